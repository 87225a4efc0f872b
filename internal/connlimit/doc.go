// Package connlimit bounds the connections a server holds. Its Listener
// wraps a net.Listener and closes, as they are accepted, connections beyond
// a total and beyond a per-client limit where clients can be told apart (a
// Unix socket's peer uid, SO_PEERCRED), so that a client opening thousands
// of connections costs the server neither file descriptors nor goroutines,
// and the clients within the limits are still served.
//
// Closing at once, rather than leaving connections in the kernel's accept
// queue as a blocking limit would, keeps the queue moving: a well-behaved
// client retrying gets in as soon as a slot frees.
package connlimit
