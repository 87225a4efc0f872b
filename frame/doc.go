// Package frame is the data-path vocabulary every port speaks: a Packet
// (one Ethernet frame in a fixed-size buffer, with its offload metadata),
// the Pool it comes from, and the Source and Sink interfaces a port
// implements to move packets in bursts. Pump moves frames from any Source
// to any Sink, so a netvsc queue, a TAP queue, or a future port (a VF, a
// shared-memory ring) plugs into the others without either knowing the
// other's type.
//
// # Ownership
//
// A Packet has exactly one owner at a time, and only its owner touches it:
//
//   - Pool.Get and Pool.GetBurst hand free packets to the caller.
//   - Source.RxBurst hands the packets it fills in to the caller; the
//     caller owns them from then on.
//   - Sink.TxBurst takes the first k packets it returns the count of:
//     they are the sink's from then on (it frees them when it is done,
//     possibly later, from another goroutine). The rest stay the caller's,
//     in order, to retry or free.
//   - Packet.Free, Pool.Put and PutBurst give packets back to their pool;
//     freeing a packet twice panics.
//
// The slice passed to RxBurst or TxBurst stays the caller's: neither keeps
// it past the call. A packet may go back to a pool other than the one the
// caller took from: Put and PutBurst find each packet's own pool.
//
// # Bursts and blocking
//
// RxBurst and TxBurst never block and never allocate. RxBurst fills at
// most len(pkts) entries and returns how many (0 when nothing is ready);
// TxBurst takes a prefix of pkts, possibly empty when the port has no room,
// and returns its length. Any burst size from 1 up is valid; a port works
// best with 32 to 64. The waiting lives apart, in Source.Wait (block until
// RxBurst may find a frame) and Sink.WaitTx (block until TxBurst may take
// more); both return early with ctx's error when ctx ends, and with the
// port's error when the port fails or closes.
//
// A port's RxBurst and Wait belong to one goroutine, its TxBurst and
// WaitTx to one (possibly other) goroutine, unless the port says more.
// A Pool is safe for concurrent use.
package frame
