package decode

import (
	"bytes"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// Locator finds where a rule, or one of its fields, is in the file it was read from: the line
// and column (from 1, the column in characters) of the field's key, or of the rule when the
// field is not there. A JSON file is scanned for offsets; a YAML file is read again into
// go.yaml.in/yaml/v3's node tree, which keeps every node's place. Both happen only when a
// message needs a place, once per file: a file with no problem and no warning costs nothing.
//
// Which list holds a section's rules is the dialect's to say (SectionKey): by default the
// top-level key named like the section (the native format's authority and param_flow).
//
// A Locator is used by one parse at a time (it is not safe for concurrent use); the zero value
// and nil locate nothing.
type Locator struct {
	data []byte   // the file's content, byte order mark removed
	json bool     // data is JSON (else YAML)
	keys []string // the top-level keys of a YAML file split by items (Registry)

	// SectionKey, when set, returns the top-level key whose list holds the rules of section,
	// or "" when the file's top level is itself the list.
	SectionKey func(section string) string

	read  bool       // the YAML node tree was built (root is nil if the file did not parse)
	root  *yaml.Node // the YAML document's top node
	lines []int      // the offsets where lines start, once needed
	lists map[string][]int

	split     bool // splitYAML ran: secs and items are its result when splitOK
	splitOK   bool
	itemReads int // the rules read one by one
	secs      []yamlSection
	items     []span

	// The last offset placed, and its place: a line can be the whole file (JSON written on one
	// line), so a column is counted on from the last one when it can be.
	lastOff, lastLine, lastCol int
}

// newLocator returns a Locator for data.
func newLocator(data []byte, json bool, keys []string) *Locator {
	return &Locator{data: data, json: json, keys: keys}
}

// step is one step of a path in the file: a mapping's key, or a list's element (index >= 0).
type step struct {
	key   string
	index int
}

// Rule returns where field of the rule at elem (its index in the list of its section, as the
// file has it) is; 0, 0 when the file does not say.
func (l *Locator) Rule(section string, elem int, field string) (line, col int) {
	if l == nil || elem < 0 {
		return 0, 0
	}
	var path []step
	key := section
	if l.SectionKey != nil {
		key = l.SectionKey(section)
	}
	if key != "" {
		path = append(path, step{key: key, index: -1})
	}
	path = append(path, step{index: elem})
	return l.find(append(path, fieldPath(field)...))
}

// top returns where field, a key path from the file's top level, is.
func (l *Locator) top(field string) (line, col int) {
	if l == nil || field == "" {
		return 0, 0
	}
	return l.find(fieldPath(field))
}

// fieldPath splits a field as messages write it ("items[0].value") into steps.
func fieldPath(field string) []step {
	var path []step
	for part := range strings.SplitSeq(field, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name != "" {
			path = append(path, step{key: name, index: -1})
		}
		for rest != "" {
			n, after, ok := strings.Cut(rest, "]")
			i, err := strconv.Atoi(n)
			if !ok || err != nil || i < 0 {
				return path
			}
			path = append(path, step{index: i})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return path
}

// find walks path from the top and returns where its last step that is in the file is.
func (l *Locator) find(path []step) (line, col int) {
	if l.json {
		return l.findJSON(path)
	}
	return l.findYAML(path)
}

// findYAML walks the YAML node tree. A rule of a file whose top-level lists split into items
// (see splitYAML) is found by reading its item alone, so that placing a few rules of a long
// file does not read the whole file again (up to maxItemReads); other paths, and the rules past
// those, read the whole file, once.
func (l *Locator) findYAML(path []step) (line, col int) {
	if len(path) >= 2 && path[0].index < 0 && path[1].index >= 0 && !l.read && l.itemReads < maxItemReads {
		if text, first, ok := l.item(path[0].key, path[1].index); ok {
			l.itemReads++
			var doc yaml.Node
			if yaml.Unmarshal(text, &doc) == nil && doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
				if seq := doc.Content[0]; seq.Kind == yaml.SequenceNode && len(seq.Content) == 1 {
					line, col = walkYAML(seq, append([]step{{index: 0}}, path[2:]...))
					if line > 0 {
						line += first - 1
					}
					return line, col
				}
			}
		}
	}
	if !l.read {
		l.read = true
		var doc yaml.Node
		if yaml.Unmarshal(l.data, &doc) == nil && doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
			l.root = doc.Content[0]
		}
	}
	return walkYAML(l.root, path)
}

// maxItemReads is how many rules a locator reads one by one before it reads the whole file
// instead: reading one costs the YAML library's setup (some 20 KB), which past a few dozen
// rules costs more than one reading of the whole.
const maxItemReads = 64

// item returns the text of element elem of the top-level list key, and the line it starts on,
// when the file splits into items.
func (l *Locator) item(key string, elem int) ([]byte, int, bool) {
	if !l.split {
		l.split = true
		l.secs, l.items, l.splitOK = splitYAML(l.data, nil, l.keys)
	}
	if !l.splitOK {
		return nil, 0, false
	}
	for _, sec := range l.secs {
		if sec.key != key {
			continue
		}
		if elem >= sec.end-sec.first {
			return nil, 0, false
		}
		sp := l.items[sec.first+elem]
		line, _ := l.lineCol(int(sp.from))
		return l.data[sp.from:sp.to], line, true
	}
	return nil, 0, false
}

// walkYAML walks path from n and returns where its last step found is. A key missing from a
// mapping that has a "rule" mapping (a Sentinel dashboard entity) is looked for in it; aliases
// are followed, and merge keys.
func walkYAML(n *yaml.Node, path []step) (line, col int) {
	for _, s := range path {
		n = resolveAlias(n)
		if n == nil {
			break
		}
		var at, next *yaml.Node
		switch {
		case s.index >= 0 && n.Kind == yaml.SequenceNode && s.index < len(n.Content):
			at, next = n.Content[s.index], n.Content[s.index]
		case s.index < 0 && n.Kind == yaml.MappingNode:
			at, next = yamlMember(n, s.key)
			if at == nil {
				if _, inner := yamlMember(n, "rule"); resolveAlias(inner) != nil && resolveAlias(inner).Kind == yaml.MappingNode {
					at, next = yamlMember(resolveAlias(inner), s.key)
				}
			}
		}
		if at == nil {
			break
		}
		line, col, n = at.Line, at.Column, next
	}
	return line, col
}

// yamlMember returns the key node and the value node of key in the mapping m, looking in the
// mappings merged into it (<<) when it is not its own.
func yamlMember(m *yaml.Node, key string) (k, v *yaml.Node) {
	for depth := 0; m != nil && m.Kind == yaml.MappingNode && depth < 8; depth++ {
		var merged *yaml.Node
		for i := 0; i+1 < len(m.Content); i += 2 {
			switch kn := m.Content[i]; {
			case kn.Kind == yaml.ScalarNode && kn.Value == key:
				return kn, m.Content[i+1]
			case kn.Kind == yaml.ScalarNode && kn.Value == "<<" && kn.Tag == "!!merge":
				merged = resolveAlias(m.Content[i+1])
			}
		}
		m = merged
	}
	return nil, nil
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	return n
}

// findJSON walks the JSON text, valid by the time a rule is located. The elements of the
// top-level lists are found once, so that locating many rules of a long list stays linear.
func (l *Locator) findJSON(path []step) (line, col int) {
	at, found := skipSpace(l.data, 0), -1
	for k, s := range path {
		var next int
		switch {
		case s.index >= 0 && (k == 0 || k == 1 && path[0].index < 0):
			// an element of the top-level list, or of one of the top-level object's lists
			key := ""
			if k == 1 {
				key = path[0].key
			}
			elems := l.elements(key, at)
			if s.index >= len(elems) {
				return l.lineCol(found)
			}
			next = elems[s.index]
			found = next
		case s.index >= 0:
			e, ok := jsonElement(l.data, at, s.index)
			if !ok {
				return l.lineCol(found)
			}
			next, found = e, e
		default:
			keyAt, valAt, ok := jsonMember(l.data, at, s.key)
			if !ok {
				if _, inner, has := jsonMember(l.data, at, "rule"); has {
					keyAt, valAt, ok = jsonMember(l.data, inner, s.key)
				}
			}
			if !ok {
				return l.lineCol(found)
			}
			next, found = valAt, keyAt
		}
		at = next
	}
	return l.lineCol(found)
}

// elements returns the offsets of the elements of the list at offset at (the top level's when
// key is "", else the top level's member key), splitting it on first use.
func (l *Locator) elements(key string, at int) []int {
	if es, ok := l.lists[key]; ok {
		return es
	}
	var es []int
	if i := skipSpace(l.data, at); i < len(l.data) && l.data[i] == '[' {
		for i = skipSpace(l.data, i+1); i < len(l.data) && l.data[i] != ']'; {
			es = append(es, i)
			end := skipValue(l.data, i)
			if end == i {
				break
			}
			i = skipSpace(l.data, end)
			if i < len(l.data) && l.data[i] == ',' {
				i = skipSpace(l.data, i+1)
			}
		}
	}
	if l.lists == nil {
		l.lists = make(map[string][]int)
	}
	l.lists[key] = es
	return es
}

// jsonMember finds key in the object at b[at]: the offsets of its key and of its value.
func jsonMember(b []byte, at int, key string) (keyAt, valAt int, ok bool) {
	i := skipSpace(b, at)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	for i = skipSpace(b, i+1); i < len(b) && b[i] == '"'; {
		end, esc := skipString(b, i)
		name := jsonString(b[i:end], esc)
		v := skipSpace(b, end)
		if v >= len(b) || b[v] != ':' {
			return 0, 0, false
		}
		v = skipSpace(b, v+1)
		if name == key {
			return i, v, true
		}
		i = skipSpace(b, skipValue(b, v))
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return 0, 0, false
}

// jsonElement finds element n of the list at b[at].
func jsonElement(b []byte, at, n int) (int, bool) {
	i := skipSpace(b, at)
	if i >= len(b) || b[i] != '[' {
		return 0, false
	}
	for i, k := skipSpace(b, i+1), 0; i < len(b) && b[i] != ']'; k++ {
		if k == n {
			return i, true
		}
		end := skipValue(b, i)
		if end == i {
			break
		}
		i = skipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return 0, false
}

// lineCol converts an offset in the file to a line and a column; 0, 0 for a negative one.
func (l *Locator) lineCol(off int) (line, col int) {
	if off < 0 || off > len(l.data) {
		return 0, 0
	}
	if l.lines == nil {
		l.lines = append(l.lines, 0)
		for i, c := range l.data {
			if c == '\n' {
				l.lines = append(l.lines, i+1)
			}
		}
	}
	n := sort.Search(len(l.lines), func(i int) bool { return l.lines[i] > off }) // lines[n-1] <= off
	from, col := l.lines[n-1], 1
	if l.lastLine == n && l.lastOff <= off {
		from, col = l.lastOff, l.lastCol
	}
	col += utf8.RuneCount(l.data[from:off])
	l.lastOff, l.lastLine, l.lastCol = off, n, col
	return n, col
}

// textLineCol is the line and column of offset off in data, counted in one pass.
func textLineCol(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	start := bytes.LastIndexByte(data[:off], '\n') + 1
	return 1 + bytes.Count(data[:off], []byte("\n")), utf8.RuneCount(data[start:off]) + 1
}
