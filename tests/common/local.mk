# tests/common: the test-support library every suite links (tests/common/README.md):
# processes, files, ports, time, the close-log parser, the RDMA device check, I/O
# loops.  Plain C++ and libc, no Boost, no other library.  A check library: built for
# `make check` (and the check-* targets), not by plain `make`; a program takes from it
# only the objects it uses.
# Paths are relative to the top directory (included from Makefile.am).

check_LIBRARIES = tests/common/libtestcommon.a
tests_common_libtestcommon_a_SOURCES = \
	tests/common/closelog.cc tests/common/closelog.hh \
	tests/common/device.cc tests/common/device.hh \
	tests/common/files.cc tests/common/files.hh \
	tests/common/io.cc tests/common/io.hh \
	tests/common/ports.cc tests/common/ports.hh \
	tests/common/proc.cc tests/common/proc.hh \
	tests/common/text.cc tests/common/text.hh \
	tests/common/time.cc tests/common/time.hh
EXTRA_DIST += tests/common/README.md
