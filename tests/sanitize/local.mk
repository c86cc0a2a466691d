# The preload library built under sanitizers, and the suites run with it (issue 17,
# point 7).  Paths are relative to the top directory (included from Makefile.am).
#
#   tests/sanitize/asan/librdmasock.so  AddressSanitizer + UndefinedBehaviorSanitizer
#   tests/sanitize/tsan/librdmasock.so  ThreadSanitizer
#
# Each is the library's own sources (shim and engine) compiled into one shared object
# (a VPATH configure is refused in an already configured source tree), rebuilt whenever
# librdmasock.la is.  The sanitizer's runtime path goes next to the library
# (DIR/runtime).  ASan's must be loaded first: a run preloads "RUNTIME LIBRARY".  TSan's
# comes after the library ("LIBRARY RUNTIME"): the library's calls of the C library then
# go through TSan's interceptors, as a program's do.  Loaded first, TSan called the
# library's poll(), connect()... from inside its own interceptors, where it ignores the
# library's locks (every mutex looked absent: false races) and its own blocking calls.
# The hostile suite (tests/offload/hostile.mk) uses the ASan one for its victims.
#
#   make check-sanitize        the ASan+UBSan library: boot the soft-RoCE VM, run
#                              tests/sanitize/run-sanitized inside (see there); in CI
#   make check-sanitize-guest  the same where an RDMA device already is (in the VM)
#   make check-sanitize-tsan   the TSan library, the same way (the parity suite in the
#                              default mode but two cases TSan itself cannot run:
#                              run-sanitized says why; the semantics cases in both
#                              modes; the programs ASan runs); in CI

SAN_ASAN_LIB = tests/sanitize/asan/librdmasock.so
SAN_TSAN_LIB = tests/sanitize/tsan/librdmasock.so
SAN_SHIM_CC = $(filter %.cc,$(librdmasock_base_la_SOURCES) $(librdmasock_la_SOURCES))
SAN_ENGINE_CC = $(filter %.cc,$(librdmasock_core_la_SOURCES) $(librdmasock_engine_la_SOURCES))
SAN_DEPS = librdmasock.la librdmasock_engine.la preload/librdmasock.map \
	$(SAN_SHIM_CC:%=$(srcdir)/%) $(SAN_ENGINE_CC:%=$(srcdir)/%)
SAN_CXX = $(CXX) $(DEFS) $(DEFAULT_INCLUDES) $(AM_CPPFLAGS) $(CPPFLAGS) $(AM_CXXFLAGS) \
	-O1 -g -fno-omit-frame-pointer -fPIC

# san_build SANITIZERS RUNTIME PLAIN-SOURCES: compile the sources into $@, under
# -fsanitize=SANITIZERS (every error fatal) but PLAIN-SOURCES, and record the
# compiler's RUNTIME (libasan.so, libtsan.so).
san_build = $(MKDIR_P) $(@D) && \
	plain= && for f in $(3); do \
	  o=$(@D)/$$(basename $$f .cc).o && $(SAN_CXX) -c -o $$o $(srcdir)/$$f && plain="$$plain $$o" || exit 1; \
	done && \
	$(SAN_CXX) -fsanitize=$(1) -fno-sanitize-recover=all -shared -o $@.tmp \
	  $(filter-out $(3:%=$(srcdir)/%),$(SAN_SHIM_CC:%=$(srcdir)/%) $(SAN_ENGINE_CC:%=$(srcdir)/%)) $$plain \
	  -Wl,-z,defs -Wl,--version-script=$(builddir)/preload/librdmasock.map \
	  $(IBVERBS_LIBS) $(RDMACM_LIBS) $(UNWIND_LIBS) -ldl -lpthread && \
	$(CXX) -print-file-name=$(2) > $(@D)/runtime && \
	mv $@.tmp $@

comma = ,

# ASan and UBSan: everything.
$(SAN_ASAN_LIB): $(SAN_DEPS)
	$(AM_V_GEN)$(call san_build,address$(comma)undefined,libasan.so,)

# TSan: the engine.  The shim stays plain: the runtime's start-up may call the shim
# (sigaction) before it can follow an instrumented function (tests/sanitize/run-sanitized
# also keeps it from installing signal handlers).
$(SAN_TSAN_LIB): $(SAN_DEPS)
	$(AM_V_GEN)$(call san_build,thread,libtsan.so,$(SAN_SHIM_CC))

SAN_TESTS = tests/preload/parity_tests$(EXEEXT) tests/preload/sockprobe$(EXEEXT) \
	tests/offload/offload_tests$(EXEEXT) tests/offload/peer$(EXEEXT)

check-sanitize: $(SAN_TESTS) $(SAN_ASAN_LIB)
	$(top_srcdir)/tests/vm/run --nordma-ns --timeout 1500 -- $(SHELL) \
	  $(abs_top_srcdir)/tests/sanitize/run-sanitized $(abs_top_builddir) asan

check-sanitize-guest: $(SAN_TESTS) $(SAN_ASAN_LIB)
	$(SHELL) $(srcdir)/tests/sanitize/run-sanitized $(abs_top_builddir) asan

check-sanitize-tsan: $(SAN_TESTS) $(SAN_TSAN_LIB)
	$(top_srcdir)/tests/vm/run --nordma-ns --timeout 1500 -- $(SHELL) \
	  $(abs_top_srcdir)/tests/sanitize/run-sanitized $(abs_top_builddir) tsan

.PHONY: check-sanitize check-sanitize-guest check-sanitize-tsan
EXTRA_DIST += tests/sanitize/run-sanitized tests/sanitize/tsan.supp
CLEANFILES += $(SAN_ASAN_LIB) $(SAN_TSAN_LIB) tests/sanitize/asan/runtime tests/sanitize/tsan/runtime \
	tests/sanitize/tsan/*.o tests/sanitize/asan/*.log
