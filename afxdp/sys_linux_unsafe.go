//go:build linux

package afxdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Raw socket options with structure arguments, which x/sys/unix has no
// helpers for. None of them is on the data path.

func setsockoptPtr(fd, level, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

// getsockoptPtr returns the length the kernel wrote.
func getsockoptPtr(fd, level, opt int, p unsafe.Pointer, n uintptr) (uintptr, error) {
	l := uint32(n)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	return uintptr(l), nil
}

func setUMEMReg(fd int, reg *unix.XDPUmemReg) error {
	return setsockoptPtr(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(reg), unsafe.Sizeof(*reg))
}

func getMmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	n, err := getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	if err == nil && n != unsafe.Sizeof(off) {
		// Kernels before 5.4 return the layout without the flags
		// word, which need-wakeup relies on.
		return off, errOldKernel
	}
	return off, err
}

func getXDPStatistics(fd int, st *unix.XDPStatistics) error {
	_, err := getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(st), unsafe.Sizeof(*st))
	return err
}

// kick makes a data-less sendto or recvfrom: the AF_XDP wake-ups.
func kick(fd int, trap uintptr) error {
	_, _, e := unix.Syscall6(trap, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// ethtoolChannels is struct ethtool_channels (linux/ethtool.h).
type ethtoolChannels struct {
	cmd                                         uint32
	maxRx, maxTx, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// ifreqData is struct ifreq with the ifr_data member.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

const ethtoolGChannels = 0x3c // ETHTOOL_GCHANNELS

// rxQueueCount asks the driver how many RX queues it runs (ethtool -l):
// separate RX channels plus combined ones.
func rxQueueCount(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{cmd: ethtoolGChannels}
	var ifr ifreqData
	copy(ifr.name[:unix.IFNAMSIZ-1], name)
	ifr.data = unsafe.Pointer(&ch)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if e != 0 {
		return 0, e
	}
	return int(ch.rxCount + ch.combinedCount), nil
}
