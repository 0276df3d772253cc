package decode

import (
	"bytes"
	"fmt"
)

// MaxDepth is how deeply a rules file may nest mappings and lists. The deepest rule of any
// supported format nests 5 levels (a Sentinel dashboard entity wrapping a rule's item list);
// the limit is checked by one linear scan before anything is decoded, so that decoding, whose
// cost grows with size times depth, stays linear in the file's size.
const MaxDepth = 32

// CheckJSONDepth reports a JSON text nested deeper than MaxDepth, by one pass over its bytes.
func CheckJSONDepth(data []byte) error {
	depth, line := 0, 1
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case c == '\n':
			line++
			escaped = false
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			if depth > MaxDepth {
				return depthError(line)
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return nil
}

// CheckYAMLDepth reports a YAML text nested deeper than MaxDepth, by one pass over its lines. A
// line's depth is the number of enclosing indentation levels, plus the "- " entries that open on
// it, plus the flow collections ([ and {) open at its end; quoted text (over several lines too)
// and comments are skipped.
// It may count a level too many on odd text (a plain Scalar with an unbalanced bracket), never
// one too few for block and flow nesting.
func CheckYAMLDepth(data []byte) error {
	var indents []int // the indentation of each open block level
	flow := 0
	var quote byte // the quote of a quoted Scalar open at the end of the previous line
	base := 0      // the block depth of the current line
	for n, line := 1, data; len(line) > 0 || n == 1; n++ {
		var rest []byte
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line, rest = line[:i], line[i+1:]
		} else {
			rest = nil
		}
		if flow == 0 && quote == 0 {
			indent := 0
			for indent < len(line) && line[indent] == ' ' {
				indent++
			}
			body := bytes.TrimSpace(line[indent:])
			if len(body) > 0 && body[0] != '#' {
				for len(indents) > 0 && indents[len(indents)-1] >= indent {
					indents = indents[:len(indents)-1]
				}
				indents = append(indents, indent)
				dashes := 0
				for len(body) >= 2 && body[0] == '-' && (body[1] == ' ' || body[1] == '\t') {
					dashes++
					body = bytes.TrimLeft(body[1:], " \t")
				}
				base = len(indents) + dashes
				if dashes == 0 && (body[0] == '[' || body[0] == '{') {
					base-- // a flow collection, not a block mapping, at this indentation
				}
				if base > MaxDepth {
					return depthError(n)
				}
			}
		}
		for i := 0; i < len(line); i++ {
			c := line[i]
			switch {
			case quote == '\'':
				if c == '\'' {
					quote = 0
				}
			case quote == '"':
				if c == '\\' {
					i++
				} else if c == '"' {
					quote = 0
				}
			case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
				i = len(line)
			case c == '\'' || c == '"':
				quote = c
			case c == '[' || c == '{':
				flow++
				if base+flow > MaxDepth {
					return depthError(n)
				}
			case (c == ']' || c == '}') && flow > 0:
				flow--
			}
		}
		line = rest
		if rest == nil {
			break
		}
	}
	return nil
}

func depthError(line int) error {
	return fmt.Errorf("line %d: nested more than %d levels deep", line, MaxDepth)
}
