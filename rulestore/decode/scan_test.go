package decode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestCheckDuplicates(t *testing.T) {
	many := func(dupAt int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range 30 {
			if i > 0 {
				b.WriteString(",")
			}
			k := i
			if i == dupAt {
				k = 3
			}
			fmt.Fprintf(&b, `"k%d": {"k%d": 1}`, k, k)
		}
		b.WriteString("}")
		return b.String()
	}
	for _, tc := range []struct {
		json string
		dup  string
	}{
		{`{"a": 1, "a": 2}`, "a"},
		{`{"x": {"a": 1}, "y": {"a": 1}}`, ""},
		{`{"a": {"b": 1}, "b": 2}`, ""},
		{`{"a": "\"a\"", "\u0061": 2}`, "a"},
		{`[{"a": 1}, {"a": 1}]`, ""},
		{`{"l": [{"a": 1, "b": [1, {"a": 2}]}], "a": 3}`, ""},
		{many(-1), ""},
		{many(25), "k3"},
		{many(5), "k3"},
	} {
		err := CheckDuplicates([]byte(tc.json))
		if tc.dup == "" && err != nil || tc.dup != "" && (err == nil || !strings.Contains(err.Error(), `"`+tc.dup+`"`)) {
			t.Errorf("CheckDuplicates(%.60s) = %v, want duplicate %q", tc.json, err, tc.dup)
		}
	}
}

// FuzzScan: on valid JSON the scanners agree with encoding/json.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{"a": [1, {"b": "x\"}"}], "c": null}`, `[1, "2", {"3": [4]}, true]`, `{}`, `[]`, `{"\u0061": 1e3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || CheckJSONDepth(data) != nil {
			return
		}
		var obj []json.RawMessage
		var arr []json.RawMessage
		if ms, err := scanMembers(data); err == nil {
			dec := json.NewDecoder(bytes.NewReader(data))
			if _, err := dec.Token(); err != nil {
				t.Fatal(err)
			}
			for dec.More() {
				tok, _ := dec.Token()
				var v json.RawMessage
				if err := dec.Decode(&v); err != nil {
					t.Fatal(err)
				}
				obj = append(obj, v)
				if k := len(obj) - 1; k >= len(ms) || ms[k].Name != tok.(string) {
					t.Fatalf("member %d: scanned %+v, encoding/json says %q", k, ms, tok)
				}
			}
			if len(obj) != len(ms) {
				t.Fatalf("%d members scanned, %d decoded", len(ms), len(obj))
			}
			for k := range ms {
				if !bytes.Equal(bytes.TrimSpace(ms[k].Value), bytes.TrimSpace(obj[k])) {
					t.Fatalf("member %d value %q, want %q", k, ms[k].Value, obj[k])
				}
			}
		} else if bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
			t.Fatalf("scanMembers refused an object: %v", err)
		}
		if elems, err := Elements(data); err == nil {
			if err := json.Unmarshal(data, &arr); err != nil {
				t.Fatalf("scanElements accepted a non-list: %s", data)
			}
			if len(arr) != len(elems) {
				t.Fatalf("%d elements scanned, %d decoded", len(elems), len(arr))
			}
			for k := range arr {
				if !bytes.Equal(bytes.TrimSpace(elems[k]), bytes.TrimSpace(arr[k])) {
					t.Fatalf("element %d %q, want %q", k, elems[k], arr[k])
				}
			}
		} else if bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")) {
			t.Fatalf("scanElements refused a list: %v", err)
		}
		err := CheckDuplicates(data)
		var m map[string]any
		if err != nil && json.Unmarshal(data, &m) == nil && !strings.Contains(err.Error(), "twice") {
			t.Fatalf("checkDuplicates: %v", err)
		}
	})
}
