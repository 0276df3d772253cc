package decode

import "sort"

// A rule's number, the N of param_flow[N] and authority[N], is its place among the rules of its
// kind in the file: the rules in force are numbered so by the service (/rules lists them in that
// order, and the bodies of refused calls, /check, /hot and the logs name them so), and every
// message about the file numbers them the same way. In a Sentinel list, which holds rules of
// both kinds (and API definitions) in one list, that is not the element's place in the list.
// A rule in error is numbered as if it were kept; a rule that is ignored (a second Sentinel
// authority rule on a resource, a cluster rule Sentinel finds invalid) has no number, and its
// messages say where it is by line and column.

// ruleNumbers records, for one parse, which list elements were rules in error and which were
// API definitions; the kept rules are the File's AuthPos and ParamPos.
type ruleNumbers struct {
	failed map[string][]int // by section: the elements with problems, ascending
	api    []int            // the API definitions read, ascending
}

// done records that element elem of section was read, with problems or not.
func (n *ruleNumbers) done(section string, elem int, failed bool) {
	switch {
	case section == SectionAPI:
		n.api = insertSorted(n.api, elem)
	case failed:
		if n.failed == nil {
			n.failed = make(map[string][]int)
		}
		n.failed[section] = insertSorted(n.failed[section], elem)
	}
}

// Number returns the number of element elem of section, or -1 when it is no rule of the
// section (an ignored one). It is right for every element already read.
func (p *File) Number(section string, elem int) int {
	if elem < 0 {
		return -1
	}
	if section == SectionAPI {
		return rank(p.numbers.api, elem)
	}
	kept := p.ParamPos
	if section == SectionAuthority {
		kept = p.AuthPos
	}
	failed := p.numbers.failed[section]
	k, f := sort.SearchInts(kept, elem), sort.SearchInts(failed, elem)
	if (k < len(kept) && kept[k] == elem) || (f < len(failed) && failed[f] == elem) {
		return k + f
	}
	return -1
}

// rank is the place of v in the ascending list s, or -1 when it is not there.
func rank(s []int, v int) int {
	if i := sort.SearchInts(s, v); i < len(s) && s[i] == v {
		return i
	}
	return -1
}

// insertSorted adds v to the ascending list s, once.
func insertSorted(s []int, v int) []int {
	if n := len(s); n == 0 || s[n-1] < v {
		return append(s, v)
	}
	i := sort.SearchInts(s, v)
	if s[i] == v {
		return s
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
