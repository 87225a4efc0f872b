package daemon_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

// duplicateKeys returns, for each JSON log line in logs that repeats a
// key within one object (as slog does when a logger's With and a call
// name the same attribute), the line's message and the key. encoding/json
// keeps the last of two keys silently, so the check reads tokens.
func duplicateKeys(logs []byte) ([]string, error) {
	var found []string
	sc := bufio.NewScanner(bytes.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		var msg string
		dups, err := objectDups(dec, "", &msg)
		if err != nil {
			return found, fmt.Errorf("log line %q: %w", line, err)
		}
		for _, k := range dups {
			found = append(found, fmt.Sprintf("%q: %s", msg, k))
		}
	}
	return found, sc.Err()
}

// objectDups reads one JSON value from dec and returns the keys repeated
// in any object within it (nested keys as group.key); msg receives the
// top-level "msg".
func objectDups(dec *json.Decoder, prefix string, msg *string) ([]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		var dups []string
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string)
			if seen[k] {
				dups = append(dups, prefix+k)
			}
			seen[k] = true
			if prefix == "" && k == "msg" {
				var s string
				if err := dec.Decode(&s); err != nil {
					return nil, err
				}
				*msg = s
				continue
			}
			sub, err := objectDups(dec, prefix+k+".", msg)
			if err != nil {
				return nil, err
			}
			dups = append(dups, sub...)
		}
		_, err := dec.Token() // '}'
		return dups, err
	case json.Delim('['):
		var dups []string
		for dec.More() {
			sub, err := objectDups(dec, prefix, msg)
			if err != nil {
				return nil, err
			}
			dups = append(dups, sub...)
		}
		_, err := dec.Token() // ']'
		return dups, err
	}
	return nil, nil
}

func TestDuplicateKeysFindsARepeatedAttribute(t *testing.T) {
	logs := `{"time":"t","level":"INFO","msg":"up","nic":"eth1","nic":"1f2e"}
{"time":"t","level":"INFO","msg":"fine","nic":"eth1","g":{"a":1,"b":[{"x":1,"x":2}]}}
{"time":"t","level":"WARN","msg":"clean","nic":"eth1","err":"x"}
`
	got, err := duplicateKeys([]byte(logs))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`"up": nic`, `"fine": g.b.x`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("duplicateKeys: %q, want %q", got, want)
	}
	if _, err := duplicateKeys([]byte("not json\n")); err == nil {
		t.Error("a line that is not JSON passed")
	}
}

// checkLogKeys fails t if the daemon's JSON log repeats a key in a line.
func checkLogKeys(t *testing.T, r io.Reader) {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	dups, err := duplicateKeys(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dups {
		t.Errorf("log line repeats a key: %s", d)
	}
}
