package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X; empty means "ask the toolchain's build info".
var (
	version  string
	revision string
)

// Info describes the running binary.
type Info struct {
	// Version is a release ("v1.2.0"), a git describe string, or "devel".
	Version string
	// Revision is the source commit ("unknown" when neither the linker
	// nor the toolchain recorded one), with "-dirty" when the tree had
	// uncommitted changes.
	Revision string
	// GoVersion is the toolchain that built it ("go1.26.0").
	GoVersion string
	// Platform is GOOS/GOARCH.
	Platform string
}

// Get returns the binary's build information.
func Get() Info {
	in := Info{Version: version, Revision: revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		in.GoVersion = bi.GoVersion
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		if in.Revision == "" {
			rev, dirty := "", false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if rev != "" && dirty {
				rev += "-dirty"
			}
			in.Revision = rev
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Revision == "" {
		in.Revision = "unknown"
	}
	return in
}

// ShortRevision is Revision cut to 12 hex digits (a "-dirty" suffix is
// kept), as logs and tables show it.
func (in Info) ShortRevision() string {
	r, suffix := in.Revision, ""
	if n := len(r) - len("-dirty"); n > 0 && r[n:] == "-dirty" {
		r, suffix = r[:n], "-dirty"
	}
	if len(r) > 12 {
		r = r[:12]
	}
	return r + suffix
}
