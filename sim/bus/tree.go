package bus

import (
	"io/fs"
	"net"
)

// Writing the tree, for the services that add devices of their own to it
// (the VF's PCI device and netdev): the same primitives the bus uses for
// its devices, so that their files, modes and links read as sysfs's do.

// PutFile creates (or truncates) path with content and exactly mode.
func PutFile(path, content string, mode fs.FileMode) error { return putFile(path, content, mode) }

// RemoveIfExists removes path; a missing path is not an error.
func RemoveIfExists(path string) error { return removeIfExists(path) }

// RemoveDirAtomically renames dir to a hidden name in tmpParent, so that it
// vanishes in one step, then deletes it. A missing dir is not an error.
func RemoveDirAtomically(dir, tmpParent string) error { return removeDirAtomically(dir, tmpParent) }

// RenameNoReplace renames like rename(2) but fails if newpath exists.
func RenameNoReplace(oldpath, newpath string) error { return renameNoReplace(oldpath, newpath) }

// KernfsSymlink creates link pointing at target with the relative text
// kernfs gives sysfs links (or an absolute one under a Config.AbsoluteLinks
// root).
func KernfsSymlink(link, target string) error { return kernfsSymlink(link, target) }

// SymlinkAs creates a symlink at path whose text is computed as if it lived
// at as (a path at the same depth, e.g. inside a directory about to be
// renamed into place).
func SymlinkAs(path, as, target string) error { return symlinkAs(path, as, target) }

// Netdev is a network interface as net-sysfs shows it.
type Netdev struct {
	Name      string
	Index     int
	MAC       net.HardwareAddr
	MTU       int
	Flags     uint32 // IFF_*
	Type      int    // ARPHRD_*
	Operstate string
}

// WriteNetdev creates parent/<name>/ with the attributes net-sysfs shows,
// and R/sys/class/net/<name>; dev, when not empty, is the device directory
// the netdev belongs to (its "device" link).
func WriteNetdev(root, parent, dev string, nd Netdev) error {
	return writeNetdev(root, parent, dev, netdev(nd))
}

// RemoveNetdev undoes WriteNetdev: the class link first.
func RemoveNetdev(root, parent, name string) error { return removeNetdev(root, parent, name) }
