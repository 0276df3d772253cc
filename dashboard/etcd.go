package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/extauthz/extauthz/rulestore"
)

// Etcd is the Pusher of rules kept in etcd (rules_etcd): a push is written to Key, one of Keys,
// which holds Sentinel's object form ({"paramFlowRules": [...], "authorityRules": [...]}), in
// place of the list of its kind there; every replica watching the keys then loads it. The write
// is refused when another of Keys holds rules of the pushed kind (the dashboard would show them
// and write them back into Key), when Key holds another form, when the keys as they would be
// are refused, and when Key changed between the read and the write. Push returns once the
// Store has loaded the write, or after Wait. It is safe for concurrent use.
type Etcd struct {
	Client  *clientv3.Client
	Keys    []string // rules_etcd.keys, in order
	Key     string   // the key written
	Store   *rulestore.Store
	Parse   rulestore.ParseOptions
	Timeout time.Duration // bounds the read and the write; 0 means 5s
	Wait    time.Duration // how long Push waits for the Store to load the write; 0 means 5s
}

var _ Pusher = (*Etcd)(nil)

// Push writes p to Key.
func (e *Etcd) Push(ctx context.Context, p Push) (string, error) {
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ops := make([]clientv3.Op, len(e.Keys))
	for i, k := range e.Keys {
		ops[i] = clientv3.OpGet(k)
	}
	resp, err := e.Client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return "", fmt.Errorf("cannot read the rules from etcd: %w", err)
	}
	var cur []byte
	var modRev int64
	found := false
	docs := make([]rulestore.Document, 0, len(e.Keys))
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().GetKvs()
		var val []byte
		if len(kvs) > 0 {
			val = kvs[0].Value
		}
		if e.Keys[i] == e.Key {
			cur, found = val, len(kvs) > 0
			if found {
				modRev = kvs[0].ModRevision
			}
			docs = append(docs, rulestore.Document{Name: e.Key})
			continue
		}
		if rules, err := rulestore.Parse(e.Keys[i], val, e.Parse); err == nil && holds(rules, p.Kind) {
			return "", fmt.Errorf("etcd key %q holds %s rules too: keep the rules the dashboard edits in %q only", e.Keys[i], kindWord(p.Kind), e.Key)
		}
		docs = append(docs, rulestore.Document{Name: e.Keys[i], Data: val})
	}
	members := map[Kind]json.RawMessage{}
	if len(bytes.TrimSpace(cur)) > 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(cur, &m); err != nil {
			return "", fmt.Errorf("etcd key %q holds rules in another form than Sentinel's {\"paramFlowRules\": [...], \"authorityRules\": [...]}, which the dashboard writes: give it a key of its own", e.Key)
		}
		for name, v := range m {
			if k := Kind(name); k != ParamFlow && k != Authority {
				return "", fmt.Errorf("etcd key %q holds %q, which is not a member of Sentinel's object form (paramFlowRules, authorityRules), which the dashboard writes: give it a key of its own", e.Key, name)
			}
			members[Kind(name)] = v
		}
	}
	members[p.Kind] = p.Rules
	next := sentinelDoc(members)
	for i := range docs {
		if docs[i].Name == e.Key {
			docs[i].Data = next
		}
		if _, err := rulestore.Parse(docs[i].Name, docs[i].Data, e.Parse); err != nil {
			return "", fmt.Errorf("the rules in etcd would be refused: %w", err)
		}
	}
	cmp := clientv3.Compare(clientv3.CreateRevision(e.Key), "=", 0)
	if found {
		cmp = clientv3.Compare(clientv3.ModRevision(e.Key), "=", modRev)
	}
	put, err := e.Client.Txn(ctx).If(cmp).Then(clientv3.OpPut(e.Key, string(next))).Commit()
	if err != nil {
		return "", fmt.Errorf("cannot write etcd key %q: %w", e.Key, err)
	}
	if !put.Succeeded {
		return "", fmt.Errorf("etcd key %q changed during the push: push again", e.Key)
	}
	rev := put.Header.GetRevision()
	where := fmt.Sprintf("etcd key %q at revision %d", e.Key, rev)
	e.await(ctx, uint64(rev))
	return where, nil
}

// await returns once the Store's version reaches rev (the watch loaded the write), after Wait,
// or when ctx ends.
func (e *Etcd) await(ctx context.Context, rev uint64) {
	wait := e.Wait
	if wait <= 0 {
		wait = 5 * time.Second
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for e.Store.Current().Version < rev {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// holds reports whether rules has rules of kind k.
func holds(rules rulestore.Rules, k Kind) bool {
	if k == Authority {
		return len(rules.Authority) > 0
	}
	return len(rules.ParamFlow) > 0
}
