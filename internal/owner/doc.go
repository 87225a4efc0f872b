// Package owner makes one process at a time the owner of a state
// directory, and with it of the devices recorded there: the daemon for as
// long as it runs, or a `vmbusd restore`, `bind` or `unbind` for as long as
// it works. Ownership is an exclusive flock(2) on STATE/vmbusd.lock, taken
// before anything is restored or touched; the kernel drops it when the
// owner dies, however it dies, so a lock that can be taken proves the last
// owner is gone. The owner describes itself (pid, command, control socket,
// the devices it drives) in STATE/owner.json, which others read to say who
// is in the way, and which a later owner reads to clean up after a dead
// one.
//
// The lock file is never removed: a process holding a lock on a file that
// has been unlinked would no longer exclude one that creates it anew.
package owner
