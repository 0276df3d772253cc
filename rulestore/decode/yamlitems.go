package decode

import (
	"bytes"
	"hash/maphash"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// A YAML rules file is converted to JSON list item by list item when its shape allows, reusing
// the conversion of every item whose text is the same as in the file converted before it. The
// YAML library costs about 7 µs and 4 KB a rule, which made a 50,000-rule YAML file reload in
// 0.4–0.7 s however few rules changed; by items, a reload converts only the items that changed.
//
// The shape is the one rules files have: at column 0, the format's top-level keys (authority,
// param_flow, and Sentinel's paramFlowRules, authorityRules), each followed by a block list
// ("- " items at one indentation) or holding its value on its own (`authority: []`). An item is
// its "- " line and every line after it that is more indented, blank or a comment. The text of
// an item, parsed on its own (a list of one), is what the same item is in the whole file: a
// block value ends where a line is indented no deeper than its list's dashes, so nothing of one
// item reaches into the next; a quoted or flow value left open at an item's end fails to parse
// on its own. The items not taken from the file before are parsed after their section's key
// line and comments, as they stand in the file, and must come out as that many elements.
// Whatever could make the two differ is not split: anchors and aliases (one item naming
// another), tags, directives and document markers, tabs, carriage returns and the other
// characters YAML takes as line breaks (NEL, LS, PS), a line the shape does not place. Such a
// file, and any part that fails to convert, goes through the library whole, as every file did
// before, so errors keep their line numbers.

// YAMLItems holds what the last file converted by items was: its JSON, and each list item's
// place in it with a 128-bit hash of the item's text (two seeded 64-bit hashes), which is what
// an item of the next file is matched by. It keeps no text of the file: the file's bytes, as
// large as its JSON, are let go once it is loaded. It is not safe for concurrent use: the
// loads of one file, serialised by their owner (the Store), share one. The zero value has
// converted nothing yet.
type YAMLItems struct {
	seed  [2]maphash.Seed
	js    []byte // the JSON of the file last converted by items
	items []itemSpan
	// converted is how many list items the last conversion by items converted: the others it
	// took from the file before.
	converted int
}

// itemSpan is one list item: the hash of its text, and its JSON in YAMLItems.js.
type itemSpan struct {
	sum          textSum
	jsFrom, jsTo int32
}

// textSum is a 128-bit hash of an item's text.
type textSum [2]uint64

// yamlSection is one top-level key of a file split by items: its text from the key's line to
// the first item (or to its end when its value is on its own), and its items, items[first:end]
// of the file's list.
type yamlSection struct {
	key        string
	from, to   int32
	first, end int
}

// span is where a list item's text is in the file.
type span struct{ from, to int32 }

// splitYAML splits data into top-level sections and list items, or reports that it cannot.
// items is where to append the items (its capacity is a guess of their number); keys are the
// top-level keys a file split so may have (the Registry's).
func splitYAML(data []byte, items []span, keys []string) ([]yamlSection, []span, bool) {
	if bytes.ContainsAny(data, "&*!\t\r\u0085\u2028\u2029") || len(data) > MaxFileSize {
		return nil, nil, false // the last three are line breaks to YAML 1.1, not to the split
	}
	var secs []yamlSection
	dash := -1 // the indentation of the current section's dashes; -1 before its first item
	for at := 0; at < len(data); {
		end, line := len(data), data[at:]
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			end, line = at+i+1, line[:i]
		}
		indent := 0
		for indent < len(line) && line[indent] == ' ' {
			indent++
		}
		body := line[indent:]
		newItem := false
		switch {
		case len(body) == 0 || body[0] == '#':
			// blank or comment: part of whatever it follows
		case bytes.HasPrefix(line, []byte("---")) || bytes.HasPrefix(line, []byte("...")) || line[0] == '%':
			return nil, nil, false
		case indent == 0 && !isDash(body):
			key, rest, ok := bytes.Cut(line, []byte(":"))
			if !ok || !isKey(keys, key) || (len(rest) > 0 && rest[0] != ' ') {
				return nil, nil, false
			}
			for _, s := range secs {
				if s.key == string(key) {
					return nil, nil, false // the library reports a key given twice
				}
			}
			from := at
			if len(secs) == 0 {
				from = 0 // the comments above the first key are its head's
			}
			secs = append(secs, yamlSection{key: string(key), from: int32(from), first: len(items), end: len(items)})
			dash = -1
			if r := bytes.TrimSpace(rest); len(r) > 0 && r[0] != '#' {
				dash = -2 // a value on its own: every further line belongs to it
			}
		case len(secs) == 0:
			return nil, nil, false
		case dash == -2:
			if indent == 0 {
				return nil, nil, false
			}
		case dash == -1:
			if !isDash(body) {
				return nil, nil, false // a mapping or a Scalar under the key: not split
			}
			dash, newItem = indent, true
		case indent < dash:
			return nil, nil, false
		case indent == dash:
			if !isDash(body) {
				return nil, nil, false
			}
			newItem = true
		}
		if n := len(secs); n > 0 {
			s := &secs[n-1]
			switch {
			case newItem:
				items = append(items, span{int32(at), int32(end)})
				s.end = len(items)
			case s.end > s.first:
				items[s.end-1].to = int32(end) // the line belongs to the current item
			default:
				s.to = int32(end) // or else to the section's head
			}
		}
		at = end
	}
	if len(secs) == 0 {
		return nil, nil, false
	}
	return secs, items, true
}

// isKey reports whether key is one of keys, without allocating.
func isKey(keys []string, key []byte) bool {
	for _, k := range keys {
		if string(key) == k {
			return true
		}
	}
	return false
}

// isDash reports whether a line's text (after its indentation) starts a list item.
func isDash(body []byte) bool { return body[0] == '-' && (len(body) == 1 || body[1] == ' ') }

// convert converts data (YAML) to JSON by items, reusing the items of the previous file, and
// makes data the previous file. It reports false, changing nothing, when data is not split by
// items or a part of it does not convert: the caller then converts it whole.
func (c *YAMLItems) convert(data []byte, keys []string) ([]byte, bool) {
	secs, items, ok := splitYAML(data, make([]span, 0, len(c.items)+len(c.items)/8+16), keys)
	if !ok {
		return nil, false
	}
	if c.seed == ([2]maphash.Seed{}) {
		c.seed = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	}
	sums := make([]textSum, len(items))
	for i, it := range items {
		sums[i] = c.sum(data[it.from:it.to])
	}
	// src[i] is the previous file's item that items[i] repeats, or -1: matched in order while
	// the two files agree, an item changed in place is seen from its neighbours agreeing, and
	// only a file whose items moved (one inserted or removed) needs a map of them all.
	src := make([]int32, len(items))
	var byText map[textSum]int32
	j := 0
	for i, sum := range sums {
		src[i] = -1
		if j < len(c.items) && c.items[j].sum == sum {
			src[i], j = int32(j), j+1
			continue
		}
		if i+1 == len(items) || (j+1 < len(c.items) && c.items[j+1].sum == sums[i+1]) {
			j++ // changed in place
			continue
		}
		if byText == nil {
			byText = make(map[textSum]int32, len(c.items))
			for k := range c.items {
				byText[c.items[k].sum] = int32(k)
			}
		}
		if k, ok := byText[sum]; ok {
			src[i], j = k, int(k)+1
		}
	}
	// the items not repeated are converted, one list per section; values on their own whole
	conv := make([][]byte, len(items))
	heads := make([][]byte, len(secs))
	var missText []byte
	var miss []int
	size := 2
	for si, s := range secs {
		if s.first == s.end {
			js, err := yaml.YAMLToJSONStrict(data[s.from:s.to])
			if err != nil || len(js) < 2 || js[0] != '{' {
				return nil, false
			}
			if ms, err := scanMembers(js); err != nil || len(ms) != 1 {
				return nil, false
			}
			heads[si] = js[1 : len(js)-1]
			size += len(heads[si]) + 1
			continue
		}
		// the section's head and its items not repeated, in order: parsed as they are in the
		// file, under their key and after its comments (so the head is checked too)
		missText = append(missText[:0], data[s.from:s.to]...)
		miss = miss[:0]
		for i := s.first; i < s.end; i++ {
			if k := src[i]; k >= 0 {
				size += int(c.items[k].jsTo-c.items[k].jsFrom) + 1
				continue
			}
			missText = append(missText, data[items[i].from:items[i].to]...)
			miss = append(miss, i)
		}
		js, err := yaml.YAMLToJSONStrict(missText)
		if err != nil {
			return nil, false
		}
		ms, err := scanMembers(js)
		if err != nil || len(ms) != 1 || ms[0].Name != s.key {
			return nil, false
		}
		if len(miss) == 0 {
			if !IsNull(ms[0].Value) {
				return nil, false
			}
		} else {
			got, err := Elements(ms[0].Value)
			if err != nil || len(got) != len(miss) {
				return nil, false
			}
			for k, i := range miss {
				conv[i] = got[k]
				size += len(got[k]) + 1
			}
		}
		size += len(s.key) + 5
	}
	// sections in key order, as converting the whole file orders them
	order := make([]int, len(secs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(secs[a].key, secs[b].key) })
	js := make([]byte, 0, size)
	spans := make([]itemSpan, 0, len(items))
	js = append(js, '{')
	for n, si := range order {
		if n > 0 {
			js = append(js, ',')
		}
		s := secs[si]
		if s.first == s.end {
			js = append(js, heads[si]...)
			continue
		}
		js = append(js, '"')
		js = append(js, s.key...)
		js = append(js, `":[`...)
		for i := s.first; i < s.end; i++ {
			if i > s.first {
				js = append(js, ',')
			}
			from := len(js)
			if k := src[i]; k >= 0 {
				js = append(js, c.js[c.items[k].jsFrom:c.items[k].jsTo]...)
			} else {
				js = append(js, conv[i]...)
			}
			spans = append(spans, itemSpan{sums[i], int32(from), int32(len(js))})
		}
		js = append(js, ']')
	}
	js = append(js, '}')
	c.js, c.items = js, spans
	c.converted = 0
	for _, k := range src {
		if k < 0 {
			c.converted++
		}
	}
	return js, true
}

// sum is the hash of an item's text.
func (c *YAMLItems) sum(text []byte) textSum {
	return textSum{maphash.Bytes(c.seed[0], text), maphash.Bytes(c.seed[1], text)}
}

// Converted is how many list items the last conversion by items converted; the others it took
// from the file converted before.
func (c *YAMLItems) Converted() int { return c.converted }
