// Package buildinfo says which vmbusd this is: its version and source
// revision. A packager can stamp both at link time
// (-ldflags "-X github.com/vmbusd/vmbusd/internal/buildinfo.version=... -X ...revision=...");
// otherwise they come from the build information the Go toolchain embeds:
// the module version for go install of a tagged release, and vcs.revision,
// which go build records when it builds in a git checkout.
package buildinfo
