# The system-wide install (/etc/ld.so.preload through `rdmasock system enable`), for
# real: inside the soft-RoCE VM with a writable root (tests/vm/run --overlay), where the
# file's changes vanish with the VM.  Never on the host: the file would change every
# process of the machine.
check-system: librdmasock.la librdmasock_engine.la tools/rdmasock$(EXEEXT)
	$(top_srcdir)/tests/vm/run --overlay --timeout 600 -- $(SHELL) \
	  $(abs_top_srcdir)/tests/system/run-system-install $(abs_top_builddir)
.PHONY: check-system
EXTRA_DIST += tests/system/run-system-install
