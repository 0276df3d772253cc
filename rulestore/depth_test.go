package rulestore

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/rulestore/decode"
)

func nestedJSON(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + `[1]` + strings.Repeat(`}`, depth-1)
}

func TestCheckDepth(t *testing.T) {
	tests := []struct {
		name, file, data string
		ok               bool
	}{
		{"json at the limit", "r.json", nestedJSON(decode.MaxDepth), true},
		{"json over the limit", "r.json", nestedJSON(decode.MaxDepth + 1), false},
		{"json brackets in strings", "r.json", `{"a": "` + strings.Repeat("[{", 100) + `\"[["}`, true},
		{"yaml flow at the limit", "r.yaml", strings.Repeat("[", decode.MaxDepth) + strings.Repeat("]", decode.MaxDepth), true},
		{"yaml flow in a mapping at the limit", "r.yaml", "a: " + strings.Repeat("[", decode.MaxDepth-1) + strings.Repeat("]", decode.MaxDepth-1), true},
		{"yaml flow in a mapping over the limit", "r.yaml", "a: " + strings.Repeat("[", decode.MaxDepth) + strings.Repeat("]", decode.MaxDepth), false},
		{"yaml flow over the limit", "r.yaml", strings.Repeat("[", decode.MaxDepth+1) + strings.Repeat("]", decode.MaxDepth+1), false},
		{"yaml block over the limit", "r.yaml", blockYAML(decode.MaxDepth + 1), false},
		{"yaml block at the limit", "r.yaml", blockYAML(decode.MaxDepth), true},
		{"yaml dashes count", "r.yaml", strings.Repeat("- ", decode.MaxDepth+1) + "x\n", false},
		{"yaml quoted and commented brackets", "r.yaml", "a: '" + strings.Repeat("[", 40) + "' # " + strings.Repeat("{", 40) + "\nb: \"[[[\n" + strings.Repeat("[", 40) + "\"\n", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if decode.IsJSONFile(tc.file) {
				err = decode.CheckJSONDepth([]byte(tc.data))
			} else {
				err = decode.CheckYAMLDepth([]byte(tc.data))
			}
			if (err == nil) != tc.ok {
				t.Errorf("depth check = %v, want ok %v", err, tc.ok)
			}
			// Parse refuses over-deep files with the same reason.
			_, perr := Parse(tc.file, []byte(tc.data), ParseOptions{})
			if deep := perr != nil && strings.Contains(perr.Error(), "levels deep"); deep == tc.ok {
				t.Errorf("Parse = %v; want a depth error: %v", perr, !tc.ok)
			}
		})
	}
}

func blockYAML(depth int) string {
	var b strings.Builder
	for i := range depth - 1 {
		fmt.Fprintf(&b, "%sa:\n", strings.Repeat(" ", i))
	}
	fmt.Fprintf(&b, "%sb: 1\n", strings.Repeat(" ", depth-1))
	return b.String()
}

// TestParseDeepFileIsLinear: the memory Parse allocates for a file of deeply nested values grows
// linearly with its size (it grew with size times depth before the depth limit: 180 KB took 15 s).
func TestParseDeepFileIsLinear(t *testing.T) {
	for _, format := range []string{"r.json", "r.yaml"} {
		deep := func(n int) []byte {
			var b bytes.Buffer
			b.WriteString(`{"param_flow": [`)
			for i := range n {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `{"resource": "r", "param": "p", "count": 1, "x": %s}`, nestedJSON(decode.MaxDepth-3))
			}
			b.WriteString("]}")
			return b.Bytes()
		}
		alloc := func(data []byte) uint64 {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			if _, err := Parse(format, data, ParseOptions{}); err == nil {
				t.Fatal("a rule with an unknown field parsed")
			}
			runtime.ReadMemStats(&after)
			return after.TotalAlloc - before.TotalAlloc
		}
		small, large := deep(200), deep(1600)
		a, b := alloc(small), alloc(large)
		perByteSmall := float64(a) / float64(len(small))
		perByteLarge := float64(b) / float64(len(large))
		t.Logf("%s: %d B -> %d B allocated (%.1f/B), %d B -> %d B (%.1f/B)", format, len(small), a, perByteSmall, len(large), b, perByteLarge)
		if perByteLarge > 2*perByteSmall+8 {
			t.Errorf("%s: allocation per byte grew from %.1f to %.1f with 8x the size", format, perByteSmall, perByteLarge)
		}
		if perByteLarge > 400 {
			t.Errorf("%s: %.1f bytes allocated per byte of input, want at most 400", format, perByteLarge)
		}
	}
}
