// Command hvsockbench measures vmbusd's user-space hv_sock transport against
// the simulated Hyper-V host in this process and prints the tables of the
// seed patches it reproduces:
//
//	sendloop  seed 000 ("hv_sock: perf: loop in send() to maximize
//	          bandwidth"): 64 KiB writes, guest to host, default rings,
//	          throughput and CPU seconds, min/max/avg/median over the
//	          iterations, before (one chunk per call) and after (send loop).
//	          The seed moved 10 GB per iteration; so does -sendloop-size by
//	          default.
//	ringsize  seed 002, second patch ("Allow the socket buffer size options
//	          to influence the actual socket buffers"): throughput for
//	          writes of 128 B, 1 KiB, 4 KiB, 64 KiB against ring sizes,
//	          guest writer (send ring varies) and host writer (receive
//	          ring varies), 1 GB per cell as in the seed.
//	vsunix    throughput and CPU seconds per GB of hv_sock and of a Unix
//	          stream socket pair side by side, both in this process, at
//	          128 B, 4 KiB and 64 KiB writes, with the default rings and
//	          with the largest: each iteration runs hv_sock and then the
//	          Unix pair, and the ratios are taken per iteration (paired),
//	          so that machine load drifting between iterations cancels.
//
// CPU is getrusage(RUSAGE_SELF), user + system, over each transfer: it
// covers both ends and the simulated host, which all run in this process.
// The guest's "before" behaviour exists only here: the benchmark hands
// Write one 4088-byte chunk per call, as the vsock core's loop handed the
// pre-2019 hvs_stream_enqueue one chunk per call.
package main
