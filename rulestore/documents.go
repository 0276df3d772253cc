package rulestore

import (
	"crypto/sha256"
	"fmt"
	"strconv"

	"github.com/extauthz/extauthz/rulestore/decode"
)

// Document is rules content from a source other than the Store's file: an etcd key, say. Its
// Name is used in messages and tells its format as a file name does (*.json is JSON, anything
// else YAML, which accepts JSON too).
type Document struct {
	Name string
	Data []byte
}

// LoadDocuments puts in force the rules of docs taken together (their rule lists joined, in
// order): for a source that keeps one document per rule kind, or one document in all. Each
// document is parsed and checked as a file is; then the whole is compiled. It is a load like
// Reload's: serialised with other loads, all or nothing, recorded (LastError, OnLoad), and a
// no-op for content identical to that in force (which clears a failure, see Reload). A document
// with no rules document in it (empty) is an error, as an empty file is.
//
// version, when above the version in force, is the new set's version, so that replicas reading
// one source (an etcd revision) agree on it; otherwise the set gets the next version.
func (s *Store) LoadDocuments(docs []Document, version uint64) error {
	defer s.release(s.cur.Load(), heapAllocated())
	s.mu.Lock()
	defer s.mu.Unlock()
	key := documentsSum(docs)
	if s.hasApplied && key == s.applied {
		s.restored()
		return nil
	}
	var merged Rules
	var pos positions
	var errs decode.Errors
	size := 0
	for _, d := range docs {
		size += len(d.Data)
	}
	if size > MaxFileSize {
		// The same bound as a rules file: a store (etcd with a raised value limit, several
		// keys) cannot hand over more than a file could hold.
		return s.reject(fmt.Errorf("%s: the rules are larger than %d bytes", s.name(), MaxFileSize))
	}
	for _, d := range docs {
		rules, p, err := checkPos(d.Name, d.Data, s.opts.Parse)
		if err != nil {
			if e, ok := err.(decode.Errors); ok {
				errs = append(errs, e...)
			} else {
				errs = append(errs, &decode.ValidationError{File: d.Name, Index: -1, Reason: err.Error()})
			}
			continue
		}
		merged.Authority = append(merged.Authority, rules.Authority...)
		merged.ParamFlow = append(merged.ParamFlow, rules.ParamFlow...)
		merged.Warnings = append(merged.Warnings, rules.Warnings...)
		pos.authority = append(pos.authority, p.authority...)
		pos.paramFlow = append(pos.paramFlow, p.paramFlow...)
	}
	if len(errs) > 0 {
		return s.reject(errs)
	}
	if err := s.applyVersion(merged, pos, key, true, version); err != nil {
		return s.reject(err)
	}
	return nil
}

// Fail records a load that could not read its source (etcd unreachable, a key missing): the
// rules in force stay, and LastError and OnLoad report err.
func (s *Store) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.reject(err)
}

// documentsSum stands for docs: the sum of one byte string that differs whenever docs' names
// or contents do (each name and content preceded by its length), hashed as it is written.
func documentsSum(docs []Document) contentSum {
	h := sha256.New()
	n := 0
	var num [24]byte
	for _, d := range docs {
		for _, part := range [][]byte{[]byte(d.Name), d.Data} {
			b := strconv.AppendInt(num[:0], int64(len(part)), 10)
			h.Write(append(b, ':'))
			h.Write(part)
			n += len(b) + 1 + len(part)
		}
	}
	var sum contentSum
	h.Sum(sum.sha[:0])
	sum.n = n
	return sum
}
