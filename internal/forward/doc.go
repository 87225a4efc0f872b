// Package forward splices connections: every connection an accept side
// (a net.Listener) yields is joined to one a dial side opens, and bytes are
// copied both ways until both directions are done. vmbusd uses it to
// forward hv_sock services: an hv_sock port to a local Unix socket or TCP
// address (an hvsock.Listener on the accept side), and a local listener to
// an hv_sock port (hvsock.Dial on the dial side). It knows nothing of
// hv_sock; any net.Conn works.
//
// Each direction ends with a half-close passed on to the other side (read
// EOF on one connection -> CloseWrite on the other, when it has one), so a
// request/response protocol that shuts its write side keeps working. A
// read or write error in either direction closes both connections. Every
// connection has counters (bytes each way, open and close times, why it
// closed), readable while it runs.
//
//	accept side                      dial side
//	client --Read--> copy in  --Write--> upstream      client EOF   -> upstream.CloseWrite
//	client <-Write-- copy out <--Read--- upstream      upstream EOF -> client.CloseWrite
package forward
