package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/extauthz/extauthz/rulestore"
)

// Memory is the Pusher of a rules source that cannot be written (a rules file, or none): with
// Allow, a push is put in force in the Store's memory only, in place of the rules of its kind,
// the other kind kept as it is in force; it is lost on restart and on the file's next reload.
// Without Allow every push is refused. It is safe for concurrent use.
type Memory struct {
	Store  *rulestore.Store
	Format Format
	Allow  bool
	Source string           // the rules' source, for messages: the file, or "" for none
	Now    func() time.Time // nil means time.Now

	mu      sync.Mutex
	version uint64 // the Store's version the last push put in force
	note    string // what View adds to that version
}

var _ Pusher = (*Memory)(nil)

// Push puts p in force in memory.
func (m *Memory) Push(_ context.Context, p Push) (string, error) {
	src := m.Source
	if src == "" {
		src = "no rules source"
	}
	if !m.Allow {
		return "", fmt.Errorf("the rules come from %s, which the dashboard cannot write: keep them in etcd (rules_etcd, sentinel_dashboard.etcd_key) to push, or set sentinel_dashboard.allow_memory_overrides to put pushes in force in memory only (lost on restart and reload)", src)
	}
	cur := m.Store.Current()
	other := Authority
	if p.Kind == Authority {
		other = ParamFlow
	}
	kept, err := m.Format.Sentinel(cur, other)
	if err != nil {
		return "", fmt.Errorf("cannot keep the rules of the other kind beside the push: %w", err)
	}
	keptJSON, err := json.Marshal(kept)
	if err != nil {
		return "", err
	}
	doc := sentinelDoc(map[Kind]json.RawMessage{p.Kind: p.Rules, other: keptJSON})
	if err := m.Store.LoadDocuments([]rulestore.Document{{Name: "dashboard push.json", Data: doc}}, 0); err != nil {
		return "", err
	}
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	m.mu.Lock()
	m.version = m.Store.Current().Version
	m.note = fmt.Sprintf("rules pushed from the Sentinel dashboard at %s by %s are in force in memory only, in place of those of %s: they are lost on restart and on the next reload",
		now().UTC().Format(time.RFC3339), p.Caller, src)
	m.mu.Unlock()
	return "memory", nil
}

// View is set as it is in force, with a warning while a push put it in force in memory: the
// rules /rules and the console show. set itself is never changed.
func (m *Memory) View(set *rulestore.Set) *rulestore.Set {
	m.mu.Lock()
	version, note := m.version, m.note
	m.mu.Unlock()
	if note == "" || set.Version != version {
		return set
	}
	cp := *set
	cp.Rules.Warnings = append(slices.Clip(set.Rules.Warnings), note)
	return &cp
}
