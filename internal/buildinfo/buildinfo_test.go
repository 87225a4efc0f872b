package buildinfo

import (
	"strings"
	"testing"
)

func TestGetFillsEveryField(t *testing.T) {
	in := Get()
	if in.Version == "" || in.Revision == "" || !strings.HasPrefix(in.GoVersion, "go") || !strings.Contains(in.Platform, "/") {
		t.Fatalf("incomplete: %+v", in)
	}
}

func TestLinkerValuesWin(t *testing.T) {
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"
	in := Get()
	if in.Version != "v1.2.3" || in.Revision != revision {
		t.Fatalf("got %+v", in)
	}
}

func TestShortRevision(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0123456789abcdef0123", "0123456789ab"},
		{"0123456789abcdef0123-dirty", "0123456789ab-dirty"},
		{"unknown", "unknown"},
		{"abc-dirty", "abc-dirty"},
	} {
		if got := (Info{Revision: tc.in}).ShortRevision(); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}
