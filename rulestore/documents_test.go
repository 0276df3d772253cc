package rulestore

import (
	"bytes"
	"testing"
)

// Rules handed over as documents (from etcd) are bounded as a rules file is: more than
// MaxFileSize in all is a failed load, and the rules in force stay.
func TestLoadDocumentsBounded(t *testing.T) {
	s, err := New(Options{Source: "etcd:/rules"})
	if err != nil {
		t.Fatal(err)
	}
	good := Document{Name: "rules.yaml", Data: []byte("authority:\n  - {resource: r, strategy: black, origins: [bot]}\n")}
	if err := s.LoadDocuments([]Document{good}, 0); err != nil {
		t.Fatal(err)
	}
	version := s.Current().Version
	half := bytes.Repeat([]byte("# padding\n"), MaxFileSize/20+1)
	// Each document alone is a valid rules file within the bound; together they are over it.
	a := append([]byte("authority:\n  - {resource: a, strategy: black, origins: [bot]}\n"), half...)
	b := append([]byte("authority:\n  - {resource: b, strategy: black, origins: [bot]}\n"), half...)
	err = s.LoadDocuments([]Document{{Name: "a.yaml", Data: a}, {Name: "b.yaml", Data: b}}, 0)
	if err == nil {
		t.Fatal("documents larger than MaxFileSize in all were loaded")
	}
	if s.Current().Version != version || len(s.Current().Rules.Authority) != 1 {
		t.Errorf("the rules in force changed: version %d, want %d", s.Current().Version, version)
	}
	if s.LastError() == nil {
		t.Error("no last error after a refused load")
	}
}
