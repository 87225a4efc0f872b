// Package pcapfilter compiles tcpdump's filter expressions (the
// pcap-filter language) into classic BPF programs, and runs them on
// frames, so a capture can be narrowed the way tcpdump users expect:
//
//	f, err := pcapfilter.New("udp and port 53", pcapfilter.LinkEthernet, 0)
//	...
//	if f.Match(frame) { write(frame) }
//
// Programs have the verdicts libpcap's compiler gives (the tests run both
// over the same frames), though not its instruction sequences. That
// includes the verdicts its optimiser decides: tests are done once per
// path ("udp and port 53" checks the ethertype once), and a load whose
// value cannot change the outcome is dropped, so a frame too short for it
// is not rejected ("ip or not ip" accepts an empty frame). One thing
// differs: libpcap's optimiser also reorders tests, so for a few
// expressions, on a frame cut short before bytes the filter reads, it
// skips a load this package's program makes and accepts a frame this one
// rejects ("not port 0 or not port 1" on a frame that ends between the
// source and destination ports). An expression that matches nothing is
// refused ("tcp and vlan": expression rejects all packets), as tcpdump
// refuses it.
//
// Only the Ethernet link type is supported. Names that need a lookup
// (host names, service names such as "port domain", "gateway") are
// refused: give addresses and numbers.
//
// # Grammar
//
// An expression is primitives joined by "and" (&&) and "or" (||), which
// have equal precedence and group left to right ("a or b and c" is
// "(a or b) and c"), each optionally negated by "not" (!), with
// parentheses for grouping. An empty expression matches every frame.
//
//	expr     = term { ("and" | "or") (term | value) }
//	term     = { "not" } ( "(" expr ")" | primitive )
//	primitive= [proto] [dir] [kind] value | proto | [proto] "proto" value
//	         | [proto] ("broadcast" | "multicast")
//	         | "vlan" [id] | "less" n | "greater" n | arith relop arith
//	proto    = ether | ip | ip6 | arp | rarp | tcp | udp | sctp | icmp
//	         | icmp6 | igmp | igrp | pim | vrrp | ah | esp   ("link" = ether)
//	dir      = src | dst | src or dst | src and dst     (default: src or dst)
//	kind     = host | net | port | portrange            (default: host)
//
// A value after "and"/"or" with no qualifiers of its own takes those of
// the value before it: "host 10.0.0.1 or 10.0.0.2" is "host 10.0.0.1 or
// host 10.0.0.2", "port 53 or 123", "host a and not b" is "host a and not
// host b"; a parenthesised list of values works too: "port 53 and (80 or
// 443)".
//
// Primitives:
//
//	ether host|src|dst MAC     00:15:5d:00:00:01, 00-15-5d-00-00-01, 0015.5d00.0001
//	ether proto N|\name        ethertype above 1500, LLC SAP at or below (\ip \ip6 \arp \rarp \stp ...)
//	ether broadcast|multicast  (also plain "broadcast", "multicast")
//	vlan [ID]                  802.1Q/802.1ad/0x9100 tag; everything after it is 4 bytes further in
//	ip | ip6 | arp | rarp      by ethertype
//	tcp | udp | sctp           IPv4 or IPv6, also behind an IPv6 fragment header
//	icmp | igmp | igrp | vrrp  IPv4;  icmp6: IPv6;  pim, ah, esp: either
//	[ip|ip6] proto N|\name     protocol number or name (\tcp \udp \icmp ...)
//	[ip|arp|rarp] [dir] host A   IPv4 address (in ARP: sender/target address)
//	[ip6] [dir] host A6          IPv6 address
//	[dir] net A/len | A mask M | 10 | 10.1   IPv4 network;  net A6/len: IPv6
//	[tcp|udp|sctp] [dir] port N              unfragmented IPv4 or first fragment, and IPv6
//	[tcp|udp|sctp] [dir] portrange LO-HI     LO and HI in decimal
//	ip broadcast               destination 0.0.0.0 or 255.255.255.255 (no netmask is known)
//	ip multicast | ip6 multicast
//	less N | greater N         len <= N | len >= N
//
// Comparisons: arith relop arith, relop one of = == != < <= > >=, where
// arith is a number (decimal, 0x hex, 0-prefixed octal), "len" (the frame
// length), proto[offset] or proto[offset:size] (size 1, 2 or 4; offset
// any arith) for proto ether, ip, ip6, arp, rarp (from that header) or
// tcp, udp, sctp, icmp, igmp, igrp, pim, vrrp (from the transport header
// of an unfragmented IPv4 packet) or icmp6 (after a 40-byte IPv6 header),
// combined with + - * / % & | ^ << >> and unary minus. Precedence is
// tcpdump's: | lowest, then &, shifts, + -, * /; % and ^ take the operand
// right before them and everything after ("a * b % c" is "a * (b % c)").
// A comparison holds only in a frame that has the headers it indexes,
// and a read past the end of the frame rejects the frame, as in the
// kernel. Named constants: tcpflags, tcp-fin, tcp-syn, tcp-rst, tcp-push,
// tcp-ack, tcp-urg, tcp-ece, tcp-cwr, icmptype, icmpcode, icmp-echo,
// icmp-echoreply, icmp-unreach (and the other icmp- names), icmp6type,
// icmp6code, icmp6-echo, icmp6-echoreply, icmp6-neighborsolicit (and the
// other icmp6- names).
//
//	tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn
//	tcp[((tcp[12:1] & 0xf0) >> 2):4] = 0x47455420
//	icmp[icmptype] != icmp-echo
//
// Errors are *Error values that name the column and the problem:
//
//	filter: syntax error at column 12: expected a port number ...
package pcapfilter
