// Package control is vmbusd's control socket: HTTP over a Unix stream
// socket in the runtime directory, used by `vmbusd stats`, `status` and
// `capture`. The socket is created mode 0600; a stale socket left by a
// crashed daemon is detected (nobody answers) and replaced, a live one is
// refused; every connection's peer credentials are checked (root or the
// daemon's own user).
package control
