package protoerr

import (
	"strings"
	"testing"
)

func TestKindsAreListedAndNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		s := k.String()
		if s == "" || strings.HasPrefix(s, "kind(") || seen[s] {
			t.Fatalf("kind %d has name %q", k, s)
		}
		seen[s] = true
	}
	if len(Kinds()) != int(kindEnd-1) {
		t.Fatal("Kinds incomplete")
	}
	if Kind(0).String() != "kind(0)" {
		t.Fatal("unknown kind name")
	}
}
