package hvsock

// KernelConnFromFD wraps a connected, non-blocking stream socket as a
// kernel-transport Conn, so that tests can drive the AF_VSOCK code paths
// over a Unix socket pair where no Hyper-V host answers.
func KernelConnFromFD(fd int) (*Conn, error) {
	s, err := newKernelStream(fd)
	if err != nil {
		return nil, err
	}
	return &Conn{s: s, local: &Addr{ContextID: CIDAny, Transport: TransportKernel},
		remote: &Addr{ContextID: CIDHost, Transport: TransportKernel}}, nil
}
