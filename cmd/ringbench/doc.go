// Command ringbench sends and receives VMBus channel packets through a ring
// file shared with another process, using this repository's vmbus ring code.
// It has the interface, file layout, packet format, payload pattern and
// result line of ringpeer (tools/ringpeer), a peer built on DPDK's VMBus ring
// code, so either end of a run can be ringbench or ringpeer.
package main
