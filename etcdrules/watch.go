package etcdrules

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/extauthz/extauthz/rulestore"
)

// Watcher keeps a Store loaded from etcd keys. Its methods are not safe for concurrent use:
// one goroutine calls Load, then Run.
type Watcher struct {
	cli   *clientv3.Client
	cfg   Config
	store *rulestore.Store

	lastErr string // the failure last recorded, so that one outage is recorded once
	// cluster and rev are what the reads saw of etcd: its cluster id and the highest revision
	// (a linearizable read never sees one lower unless etcd lost its history).
	cluster uint64
	rev     int64
	handed  [sha256.Size]byte // the hash of the documents last handed to the store
	resets  uint64
	// checkNow, when not nil, runs a check at once when it receives (tests: a check at a
	// chosen moment, besides the ticker's).
	checkNow chan struct{}

	// Retry is how long Run waits before reading again after a failure; 0 means 1s.
	Retry time.Duration
	// Log, when not nil, receives a line for each event a watch alone would hide: etcd's
	// revision going back, its cluster changing, a compacted watch, a change read without its
	// watch event. Failed reads and loads reach the Store (its LastError and OnLoad).
	Log *zap.Logger
}

// New returns a Watcher of cfg.Keys through cli into store.
func New(cli *clientv3.Client, cfg Config, store *rulestore.Store) *Watcher {
	return &Watcher{cli: cli, cfg: cfg, store: store}
}

// Resets is how many times the watcher found that etcd had lost its history (revision back,
// another cluster) or that its watch had missed a change, and read the keys again.
func (w *Watcher) Resets() uint64 { return w.resets }

// snapshot is one read of every key at one revision.
type snapshot struct {
	docs    []rulestore.Document
	version uint64 // the highest ModRevision of the keys
	header  header
}

// header is what a response says of the etcd that answered; Revision is 0 without a response.
type header struct {
	Revision            int64
	ClusterID, MemberID uint64
}

// Load reads the keys once and puts their rules in force; it returns the Store's error when
// the rules are refused, or the read's. The service calls it at start, where a failure is fatal.
func (w *Watcher) Load(ctx context.Context) error {
	_, readErr, err := w.load(ctx)
	if readErr != nil {
		return readErr
	}
	return err
}

// load reads the keys and hands them to the Store; it returns the revision read at, the read's
// error, or the Store's.
func (w *Watcher) load(ctx context.Context) (rev int64, readErr, loadErr error) {
	snap, err := w.read(ctx)
	if prev := w.rev; snap.header.Revision > 0 {
		if reason := w.compare(snap.header); reason != "" {
			w.reset(reason, prev, snap)
		}
	}
	if err != nil {
		w.fail(err)
		return 0, err, nil
	}
	return snap.header.Revision, nil, w.hand(snap)
}

// fail records a failed read in the Store, once for a run of the same failure.
func (w *Watcher) fail(err error) {
	if msg := err.Error(); msg != w.lastErr {
		w.lastErr = msg
		w.store.Fail(err)
	}
}

// hand gives the documents of snap to the Store and remembers them.
func (w *Watcher) hand(snap snapshot) error {
	w.lastErr = ""
	w.handed = docsHash(snap.docs)
	return w.store.LoadDocuments(snap.docs, snap.version)
}

// docsHash is a hash of the documents' names and contents, each length-prefixed.
func docsHash(docs []rulestore.Document) [sha256.Size]byte {
	h := sha256.New()
	var n []byte
	for _, d := range docs {
		n = strconv.AppendInt(n[:0], int64(len(d.Name)), 10)
		h.Write(append(n, ':'))
		h.Write([]byte(d.Name))
		n = strconv.AppendInt(n[:0], int64(len(d.Data)), 10)
		h.Write(append(n, ':'))
		h.Write(d.Data)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// compare checks a response header against what the reads saw before, records it, and says
// why the watch cannot be trusted any more ("" when it can): a revision below the highest seen
// (etcd restored from a snapshot or recreated empty: a watch waiting for the old revision would
// wait for ever) or another cluster. The member may change: clients move between members.
func (w *Watcher) compare(h header) string {
	reason := ""
	switch {
	case w.cluster != 0 && h.ClusterID != w.cluster:
		reason = "etcd cluster changed"
	case h.Revision < w.rev:
		reason = "etcd revision went back"
	}
	w.cluster = h.ClusterID
	if reason != "" || h.Revision > w.rev {
		w.rev = h.Revision
	}
	return reason
}

// reset logs what made the watch untrustworthy; the caller reads the keys and watches again.
func (w *Watcher) reset(reason string, prev int64, snap snapshot) {
	w.resets++
	if w.Log == nil {
		return
	}
	w.Log.Warn(reason+"; reading the rules keys again and watching from the new revision",
		zap.String("source", w.cfg.Source()), zap.Int64("revision", snap.header.Revision),
		zap.Int64("previous_revision", prev),
		zap.String("cluster_id", strconv.FormatUint(snap.header.ClusterID, 16)),
		zap.String("member_id", strconv.FormatUint(snap.header.MemberID, 16)))
}

// read gets every key at one revision. The version is the highest ModRevision of the keys: the
// same on every replica for the same content. A missing key is an error (like a missing file,
// it never means "no rules": put an empty document, {}, for that); the header is set then too.
func (w *Watcher) read(ctx context.Context) (snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.DialTimeout)
	defer cancel()
	ops := make([]clientv3.Op, len(w.cfg.Keys))
	for i, k := range w.cfg.Keys {
		ops[i] = clientv3.OpGet(k)
	}
	resp, err := w.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return snapshot{}, fmt.Errorf("cannot read rules from etcd: %w", err)
	}
	h := header{Revision: resp.Header.GetRevision(), ClusterID: resp.Header.GetClusterId(), MemberID: resp.Header.GetMemberId()}
	snap := snapshot{docs: make([]rulestore.Document, len(w.cfg.Keys)), header: h}
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return snapshot{header: h}, fmt.Errorf("cannot read rules from etcd: key %q not found", w.cfg.Keys[i])
		}
		snap.docs[i] = rulestore.Document{Name: w.cfg.Keys[i], Data: kvs[0].Value}
		snap.version = max(snap.version, uint64(kvs[0].ModRevision))
	}
	return snap, nil
}

// Run watches the keys until ctx ends, loading them again on every change. While etcd cannot
// be reached, the rules in force stay (the failure is recorded once), and the watch resumes
// from the last revision seen when etcd is back, so that no change is missed. Every
// CheckInterval it also reads the keys: when etcd's revision went back (restored from a
// snapshot, recreated empty), its cluster changed, or the keys changed without a watch event,
// it loads them and watches from the new revision; a compacted watch reads the keys again
// too. It returns nil when ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	retry := w.Retry
	if retry <= 0 {
		retry = time.Second
	}
	for ctx.Err() == nil {
		rev, readErr, _ := w.load(ctx) // a refused load is recorded by the Store
		if readErr != nil {
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			continue
		}
		w.watch(ctx, rev+1)
	}
	return nil
}

// watchEnd is why a key's watch asks for the keys to be read again.
type watchEnd struct {
	changed bool  // events: the ordinary case
	err     error // the watch failed or was cancelled (a compaction among others)
	compact int64 // the compaction revision, when the watch's revision was compacted
}

// watch waits for a change to any key from revision from on, and returns when one came, when
// a watch ended (compaction, cancellation), when a check found that the watch cannot be
// trusted, or when ctx ends.
func (w *Watcher) watch(ctx context.Context, from int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ended := make(chan watchEnd, len(w.cfg.Keys))
	for _, k := range w.cfg.Keys {
		go func() {
			// Watch blocks until its stream is set up: etcd down at this moment must not keep the
			// checks below from running and recording the outage.
			ch := w.cli.Watch(wctx, k, clientv3.WithRev(from))
			end := watchEnd{err: errors.New("watch channel closed")}
			for resp := range ch {
				if err := resp.Err(); err != nil || resp.Canceled {
					end = watchEnd{err: cmpErr(err, "watch cancelled"), compact: resp.CompactRevision}
					break
				}
				if len(resp.Events) > 0 {
					end = watchEnd{changed: true}
					break
				}
			}
			ended <- end // buffered: one per key
		}()
	}
	interval := w.cfg.CheckInterval
	if interval <= 0 {
		interval = DefaultCheckInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case end := <-ended:
			if !end.changed && ctx.Err() == nil && w.Log != nil {
				fields := []zap.Field{zap.String("source", w.cfg.Source()), zap.Error(end.err)}
				if end.compact > 0 {
					fields = append(fields, zap.Int64("compact_revision", end.compact))
				}
				w.Log.Warn("etcd watch ended; reading the rules keys again", fields...)
			}
			return
		case <-tick.C:
			if w.check(ctx) {
				return
			}
		case <-w.checkNow:
			if w.check(ctx) {
				return
			}
		}
	}
}

// cmpErr is err, or an error saying what when err is nil.
func cmpErr(err error, what string) error {
	if err != nil {
		return err
	}
	return errors.New(what)
}

// check reads the keys beside the watch and reports whether the watch must start again:
// etcd's history was lost or replaced (see compare), the keys changed without the watch
// telling, or etcd is back after a failed check. A failed read is recorded in the Store (once
// for an outage); the watch goes on, resuming by itself when etcd is back.
func (w *Watcher) check(ctx context.Context) bool {
	snap, err := w.read(ctx)
	reason, prev := "", w.rev
	if snap.header.Revision > 0 {
		reason = w.compare(snap.header)
		if reason != "" {
			w.reset(reason, prev, snap)
		}
	}
	if err != nil {
		w.fail(err)
		return reason != ""
	}
	switch {
	case reason != "":
		return true
	case w.lastErr != "":
		return true // etcd answers again: Run's load clears the failure
	case docsHash(snap.docs) != w.handed:
		if snap.version > uint64(prev) {
			return true // a change the watch has yet to deliver, or has just delivered
		}
		// not an event on its way: the change is no newer than a revision read before
		w.resets++
		if w.Log != nil {
			w.Log.Warn("etcd rules keys changed without a watch event; reading them again",
				zap.String("source", w.cfg.Source()), zap.Uint64("mod_revision", snap.version))
		}
		return true
	}
	return false
}
