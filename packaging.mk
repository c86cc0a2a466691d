# Packaging: debian/ (native source package "rdmasock", dh + autoreconf) and
# rpm/rdmasock.spec.  Included from the top Makefile.am; paths are relative to the top.
#
# The packaging files go into the dist tarball, and "make check-packages" builds both
# packages from that tarball in a temporary directory (the tree and its parent stay
# clean), then checks them:
#   .deb  dpkg-buildpackage -us -uc -b (configure --disable-tests: no Boost.Test; no
#         license TBD); lintian (any E: fails); the file list (dpkg -c);
#         dpkg -x, then the extracted launcher: --help, --print-lib, and running `true`
#         with the extracted library preloaded
#   .rpm  rpmbuild --nodeps -bb (no Boost.Test either); the file list (rpm -qlp);
#         rpm2cpio, then the same launcher checks
# It prints one summary line per package.  CHECK_PACKAGES_KEEP=1 keeps the temporary
# directory (build logs included) and prints its path.  Needs dpkg-dev, debhelper,
# fakeroot, lintian, rpm and cpio (tools/install-deps installs them).

EXTRA_DIST += debian/changelog debian/control debian/copyright debian/rules debian/prerm \
	debian/source/format rpm/rdmasock.spec

# debian/changelog and the spec's Version must follow AC_INIT's version.
check_packages_versions = \
	version='$(PACKAGE_VERSION)'; \
	deb=$$(dpkg-parsechangelog -l'$(srcdir)/debian/changelog' -SVersion) || exit 1; \
	rpm=$$(sed -n 's/^Version:[[:space:]]*//p' '$(srcdir)/rpm/rdmasock.spec'); \
	if [ "$$deb" != "$$version" ]; then \
	  echo "check-packages: debian/changelog is at $$deb but configure.ac at $$version" \
	    "(add an entry: dch -v $$version)" >&2; exit 1; fi; \
	if [ "$$rpm" != "$$version" ]; then \
	  echo "check-packages: rpm/rdmasock.spec is at Version $$rpm but configure.ac at" \
	    "$$version (update Version and %changelog)" >&2; exit 1; fi

# The $(MAKE) line stays on its own: "make -n check-packages" (how tools/test-all asks
# whether the target exists) must not run the shell script below.
.PHONY: check-packages
check-packages:
	@$(check_packages_versions)
	$(AM_V_at)$(MAKE) $(AM_MAKEFLAGS) dist-gzip
	@set -e; \
	start=$$(date +%s); top=$$PWD; version='$(PACKAGE_VERSION)'; \
	tarball="$$top/$(distdir).tar.gz"; \
	tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/rdmasock-packages.XXXXXX"); \
	cleanup() { \
	  cd /; \
	  if [ -n "$(CHECK_PACKAGES_KEEP)" ]; then echo "check-packages: kept $$tmp"; \
	  else chmod -R u+w "$$tmp" 2>/dev/null || :; rm -rf "$$tmp"; fi; }; \
	trap cleanup EXIT; trap 'exit 130' HUP INT TERM; \
	fail() { echo "check-packages: FAIL: $$*" >&2; exit 1; }; \
	run() { log="$$tmp/$$1.log"; shift; \
	  "$$@" >"$$log" 2>&1 || { rc=$$?; tail -n 80 "$$log" >&2; \
	    fail "$$* (exit $$rc; log above)"; }; }; \
	clean_env="env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES -u DESTDIR"; \
	has() { grep -qxE "$$1" "$$2" || { sed 's/^/  /' "$$2" >&2; fail "no $$1 in $$3"; }; }; \
	launcher_checks() { \
	  root=$$1 launcher=$$1/usr/bin/rdmasock want=$$2 what=$$3; \
	  run "$$what-help" env -u RDMASOCK_LIB "$$launcher" --help; \
	  grep -q RDMASOCK_ "$$tmp/$$what-help.log" \
	    || fail "$$what: rdmasock --help lists no RDMASOCK_ variable"; \
	  got=$$(env -u RDMASOCK_LIB "$$launcher" --print-lib) \
	    || fail "$$what: rdmasock --print-lib failed"; \
	  [ "$$got" = "$$want" ] \
	    || fail "$$what: rdmasock --print-lib prints $$got, expected $$want"; \
	  run "$$what-preload" env -u RDMASOCK_LIB "$$launcher" --lib "$$root$$want" true; }; \
	\
	echo "check-packages: building the .deb from $(distdir).tar.gz in $$tmp"; \
	arch=$$(dpkg --print-architecture); multiarch=$$(dpkg-architecture -qDEB_HOST_MULTIARCH); \
	mkdir "$$tmp/deb" "$$tmp/deb-root"; tar -xzf "$$tarball" -C "$$tmp/deb"; \
	cd "$$tmp/deb/$(distdir)"; \
	run deb-build $$clean_env dpkg-buildpackage -us -uc -b --jobs-try=auto; \
	! grep -q 'boost/test' "$$tmp/deb-build.log" \
	  || fail "the .deb build looked for Boost.Test (configure --disable-tests)"; \
	! grep -qw TBD debian/copyright rpm/rdmasock.spec || fail "a license is still TBD"; \
	cd "$$top"; \
	deb="$$tmp/deb/rdmasock_$${version}_$$arch.deb"; \
	[ -f "$$deb" ] || fail "dpkg-buildpackage made no $$deb"; \
	lintian_opts=--display-info; \
	if [ "$$(id -u)" = 0 ]; then lintian_opts="$$lintian_opts --allow-root"; fi; \
	lrc=0; lintian $$lintian_opts "$$tmp/deb/rdmasock_$${version}_$$arch.changes" \
	  >"$$tmp/lintian.log" 2>&1 || lrc=$$?; \
	sed 's/^/  lintian: /' "$$tmp/lintian.log"; \
	lerrors=$$(grep -c '^E:' "$$tmp/lintian.log" || :); \
	lwarnings=$$(grep -c '^W:' "$$tmp/lintian.log" || :); \
	[ "$$lerrors" = 0 ] && [ "$$lrc" = 0 ] \
	  || fail "lintian: $$lerrors error(s), exit status $$lrc"; \
	dpkg -c "$$deb" | awk '{ print $$6 }' | sed 's|^\./|/|' >"$$tmp/deb.files"; \
	for f in "/usr/lib/$$multiarch/rdmasock/librdmasock\.so" \
	         "/usr/lib/$$multiarch/rdmasock/librdmasock_engine\.so" /usr/bin/rdmasock \
	         '/usr/share/man/man1/rdmasock\.1\.gz' '/usr/share/man/man7/rdmasock\.7\.gz' \
	         '/etc/security/limits\.d/30-rdmasock-limits\.conf' '/usr/share/rdmasock/rdmasock-service\.conf'; do \
	  has "$$f" "$$tmp/deb.files" "the .deb (dpkg -c)"; done; \
	! grep '\.la$$' "$$tmp/deb.files" || fail "the .deb has a libtool .la file"; \
	dpkg -x "$$deb" "$$tmp/deb-root"; \
	launcher_checks "$$tmp/deb-root" "/usr/lib/$$multiarch/rdmasock/librdmasock.so" deb; \
	echo "check-packages: deb $${deb##*/}: OK ($$(grep -vc '/$$' "$$tmp/deb.files") files;" \
	  "lintian: $$lerrors errors, $$lwarnings warnings; launcher --help, --print-lib," \
	  "preload ok)"; \
	\
	echo "check-packages: building the .rpm from $(distdir).tar.gz"; \
	mkdir -p "$$tmp/rpm/SOURCES" "$$tmp/rpm/tmp" "$$tmp/rpm-root"; \
	cp "$$tarball" "$$tmp/rpm/SOURCES/"; \
	tar -xOzf "$$tarball" "$(distdir)/rpm/rdmasock.spec" >"$$tmp/rdmasock.spec"; \
	run rpm-build $$clean_env rpmbuild --nodeps --define "_topdir $$tmp/rpm" \
	  --define "_tmppath $$tmp/rpm/tmp" -bb "$$tmp/rdmasock.spec"; \
	sed -n '/^RPM build warnings:/,$$s/^/  rpmbuild: /p' "$$tmp/rpm-build.log"; \
	! grep -q 'boost/test' "$$tmp/rpm-build.log" \
	  || fail "the .rpm build looked for Boost.Test (configure --disable-tests)"; \
	rpm=$$(find "$$tmp/rpm/RPMS" -name "rdmasock-$$version-*.rpm" ! -name '*-debug*'); \
	[ -n "$$rpm" ] && [ "$$(echo "$$rpm" | wc -l)" = 1 ] \
	  || fail "rpmbuild made no single rdmasock-$$version-*.rpm: $$rpm"; \
	rpm -qlp "$$rpm" >"$$tmp/rpm.files"; \
	libdir=$$(rpm --eval '%{_libdir}'); bindir=$$(rpm --eval '%{_bindir}'); \
	mandir=$$(rpm --eval '%{_mandir}'); \
	for f in "$$libdir/rdmasock/librdmasock\.so" "$$libdir/rdmasock/librdmasock_engine\.so" \
	         "$$bindir/rdmasock" "$$(rpm --eval '%{_sysconfdir}')/security/limits\.d/30-rdmasock-limits\.conf" \
	         "$$(rpm --eval '%{_datadir}')/rdmasock/rdmasock-service\.conf" \
	         "$$mandir/man1/rdmasock\.1(\.gz|\.bz2|\.xz|\.zst)?" \
	         "$$mandir/man7/rdmasock\.7(\.gz|\.bz2|\.xz|\.zst)?"; do \
	  has "$$f" "$$tmp/rpm.files" "the .rpm (rpm -qlp)"; done; \
	! grep '\.la$$' "$$tmp/rpm.files" || fail "the .rpm has a libtool .la file"; \
	rpm2cpio "$$rpm" | cpio -idm --quiet -D "$$tmp/rpm-root"; \
	launcher_checks "$$tmp/rpm-root" "$$libdir/rdmasock/librdmasock.so" rpm; \
	echo "check-packages: rpm $${rpm##*/}: OK ($$(wc -l <"$$tmp/rpm.files") paths;" \
	  "launcher --help, --print-lib, preload ok)"; \
	echo "check-packages: both packages OK in $$(( $$(date +%s) - start )) s"
