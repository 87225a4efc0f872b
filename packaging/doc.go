// Package packaging holds no code: it is the home of the Debian packaging
// (build-deb and the maintainer scripts in debian/) that `make package`
// runs, and of the tests that check `make install` and the package.
//
// The tests build the package once, install it with dpkg into a throwaway
// root (its own dpkg database, maintainer scripts run outside it with
// DPKG_ROOT set), run what it installed, check the unit with
// systemd-analyze verify and purge it again; and they check that
// `make install DESTDIR=...` puts every file under DESTDIR, in the layout
// docs/install.md describes, and that `make uninstall` takes them away.
package packaging
