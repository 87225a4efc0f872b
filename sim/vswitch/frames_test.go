package vswitch

import "slices"

// udpFrame builds a UDP/IPv4 frame from src to dst of size bytes.
func udpFrame(dst, src [6]byte, sport uint16, size int) []byte {
	g := NewGenerator(GeneratorConfig{SrcMAC: src[:]})
	b := make([]byte, size)
	g.Frame(b, dst[:], int(sport)-1024, 7)
	return b
}

// tcpFrame builds a TCP/IPv4 (or IPv6) frame with payload bytes of data.
func tcpFrame(v6 bool, payload int) []byte {
	var ip []byte
	tcp := make([]byte, 20+payload)
	be.PutUint16(tcp[0:], 40000)
	be.PutUint16(tcp[2:], 80)
	be.PutUint32(tcp[4:], 1000)
	tcp[12] = 5 << 4
	tcp[13] = 0x18 // PSH|ACK
	for i := range payload {
		tcp[20+i] = byte(i)
	}
	eth := []byte{2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 8, 0, 0}
	if v6 {
		be.PutUint16(eth[12:], EthTypeIPv6)
		ip = make([]byte, 40)
		ip[0] = 0x60
		ip[6] = IPProtoTCP
		ip[7] = 64
		ip[23], ip[39] = 1, 2
		ip[8], ip[24] = 0xfd, 0xfd
		be.PutUint16(ip[4:], uint16(len(tcp)))
	} else {
		be.PutUint16(eth[12:], EthTypeIPv4)
		ip = make([]byte, 20)
		ip[0] = 0x45
		be.PutUint16(ip[2:], uint16(20+len(tcp)))
		be.PutUint16(ip[4:], 77)
		ip[8], ip[9] = 64, IPProtoTCP
		copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	}
	return slices.Concat(eth, ip, tcp)
}
