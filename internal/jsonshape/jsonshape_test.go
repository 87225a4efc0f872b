package jsonshape

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

type inner struct {
	N int `json:"n"`
}

type doc struct {
	Name  string           `json:"name"`
	At    time.Time        `json:"at"`
	Ptr   *inner           `json:"ptr"`
	List  []inner          `json:"list"`
	Count map[string]int   `json:"count"`
	Flag  bool             `json:"flag,omitempty"`
	Skip  string           `json:"-"`
	Deep  map[string]inner `json:"deep"`
}

var docType = reflect.TypeFor[doc]()

func TestCheck(t *testing.T) {
	const good = `{"name":"a","at":"2026-01-02T03:04:05Z","ptr":null,"list":[{"n":1}],"count":{"rx_drop":2},"flag":true,"deep":{}}`
	for _, tc := range []struct {
		name, doc, want string // want: "" for no error, else a part of it
	}{
		{"every key", good, ""},
		{"pointer set", strings.Replace(good, `"ptr":null`, `"ptr":{"n":1}`, 1), ""},
		{"null list", strings.Replace(good, `"list":[{"n":1}]`, `"list":null`, 1), "$.list: null where"},
		{"null map", strings.Replace(good, `"deep":{}`, `"deep":null`, 1), "$.deep: null where"},
		{"missing key", strings.Replace(good, `"flag":true,`, "", 1), `key "flag" is missing`},
		{"extra key", strings.Replace(good, `"name":"a"`, `"name":"a","Name":"a"`, 1), `key "Name" is not in`},
		{"missing key in a list element", strings.Replace(good, `{"n":1}`, `{}`, 1), `$.list[0]: key "n" is missing`},
		{"wrong kind", strings.Replace(good, `"name":"a"`, `"name":1`, 1), "want a string"},
		{"null object", strings.Replace(good, `"deep":{}`, `"deep":{"x":null}`, 1), "null where"},
		{"map key not snake_case", strings.Replace(good, `rx_drop`, `RxDrop`, 1), `map key "RxDrop"`},
		{"not a time", strings.Replace(good, `2026-01-02T03:04:05Z`, `yesterday`, 1), "not an RFC 3339 time"},
		{"not JSON", `{`, "jsonshape:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check([]byte(tc.doc), docType)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	want := []string{"name", "at", "ptr", "ptr.n", "list", "list[].n", "count", "flag", "deep", "deep{}.n"}
	if got := Paths(docType); !slices.Equal(got, want) {
		t.Fatalf("Paths = %q, want %q", got, want)
	}
	if got := Structs(docType); !slices.Equal(got, []reflect.Type{docType, reflect.TypeFor[inner]()}) {
		t.Fatalf("Structs = %v", got)
	}
	if f := Fields(docType)[5]; f.Key != "flag" || !slices.Equal(f.Options, []string{"omitempty"}) {
		t.Fatalf("Fields[5] = %+v", f)
	}
}

func TestSnakeCase(t *testing.T) {
	for key, want := range map[string]bool{"rx_packets": true, "vmbus_len8": true, "a": true, "RxPackets": false,
		"rx__packets": false, "_rx": false, "rx_": false, "rx-packets": false, "8rx": false, "": false} {
		if SnakeCase(key) != want {
			t.Errorf("SnakeCase(%q) = %v", key, !want)
		}
	}
}
