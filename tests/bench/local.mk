# tests/bench: the pass-through overhead benchmark (tools/bench-passthrough).
#
# rw_loop is a check program: `make check` and `make tests/bench/rw_loop` build it
# (tools/bench-passthrough does the latter when it is missing); plain `make` does not.
# No _FORTIFY_SOURCE, so its read() calls go to `read`, the symbol the library wraps.
check_PROGRAMS += tests/bench/rw_loop
tests_bench_rw_loop_SOURCES = tests/bench/rw_loop.c
tests_bench_rw_loop_CPPFLAGS = -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=0
tests_bench_rw_loop_CFLAGS = -O2 -Wall -Wextra

dist_noinst_SCRIPTS += tools/bench-passthrough
