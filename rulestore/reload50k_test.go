package rulestore

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/extauthz/extauthz/hotparam"
)

// TestReload50kInsertedKeepsState: a reload of a 50,000-rule file with a rule inserted at the
// top (every rule moves one place) keeps the state of a tracked value of a moved rule, and the
// inserted rule starts fresh.
func TestReload50kInsertedKeepsState(t *testing.T) {
	if testing.Short() {
		t.Skip("50,000 rules; skipped under -short")
	}
	path := filepath.Join(t.TempDir(), "rules.json")
	base := rulesJSON(t, 0)
	if err := os.WriteFile(path, base, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{File: path})
	if err != nil {
		t.Fatal(err)
	}
	check := func(resource string) bool {
		e := []hotparam.Entry{{Resource: resource, Params: []hotparam.Param{{Name: "user", Values: []string{"u1"}}}}}
		return s.Current().ParamFlow.Check(context.Background(), t0, e, hotparam.CheckOptions{}, nil).Allowed
	}
	admitted := 0
	for check("GET:/r25000") {
		admitted++
		if admitted > 100 {
			t.Fatal("the bucket never ran out")
		}
	}
	if admitted != 12 { // count 10 + burst 2
		t.Fatalf("%d admitted before the reload, want 12", admitted)
	}
	const head = `{"param_flow": [`
	if !bytes.HasPrefix(base, []byte(head)) {
		t.Fatalf("unexpected file head %q", base[:20])
	}
	inserted := append([]byte(head+`{"resource": "GET:/top", "param": "user", "count": 1},`+"\n"), base[len(head):]...)
	if err := os.WriteFile(path, inserted, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	cur := s.Current()
	if cur.Version != 2 || len(cur.Rules.ParamFlow) != 50001 || cur.Rules.ParamFlow[25001].Resource != "GET:/r25000" {
		t.Fatalf("reload not applied: version %d, %d rules", cur.Version, len(cur.Rules.ParamFlow))
	}
	if check("GET:/r25000") {
		t.Error("a moved rule's spent bucket was refilled by the reload")
	}
	if !check("GET:/top") {
		t.Error("the inserted rule refused its first request")
	}
	if st := cur.ParamFlow.Stats(); st[25001].Tracked != 1 {
		t.Errorf("moved rule tracks %d values, want 1", st[25001].Tracked)
	}
}
