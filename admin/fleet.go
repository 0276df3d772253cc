package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/extauthz/extauthz/metrics"
)

// The fleet view's bounds. A replica publishes FleetPublished seconds, at most
// MaxFleetResources resources and at most MaxFleetRecordBytes in all; the view reads at most
// MaxFleetReplicas replicas and shows FleetSeconds seconds.
const (
	FleetSeconds        = 60
	FleetPublished      = 90 // FleetSeconds and three publications of MaxFleetInterval
	MaxFleetResources   = 50
	MaxFleetRecordBytes = 16 << 10
	MaxFleetReplicas    = 100
	// DefaultFleetInterval is the time between two publications of a replica's counts, and
	// MaxFleetInterval the longest: a record lives three intervals.
	DefaultFleetInterval = 5 * time.Second
	MaxFleetInterval     = 10 * time.Second
	// fleetRateSeconds is how many of the last seconds a rate is the mean of.
	fleetRateSeconds = 10
	// fleetTimeout bounds one publication or one read of the fleet.
	fleetTimeout = 2 * time.Second
	// maxFleetName bounds a replica's id, host and admin address, in bytes.
	maxFleetName = 256
)

// FleetStore is where the replicas of a fleet publish their counts and read each other's: the
// shared store (redisstore.Store). Implementations are safe for concurrent use.
type FleetStore interface {
	// PublishReplica stores record as replica id's for ttl.
	PublishReplica(ctx context.Context, id string, record []byte, ttl time.Duration) error
	// Replicas returns, by id, the records of at most max replicas whose ttl has not run out,
	// the latest published first, and how many more there are.
	Replicas(ctx context.Context, max int) (records map[string][]byte, more int, err error)
}

// Replica names one replica of the fleet.
type Replica struct {
	ID    string `json:"id"`    // unique in the fleet: host and pid
	Host  string `json:"host"`  // its host name (a pod's name)
	PID   int    `json:"pid"`   // its process id
	Admin string `json:"admin"` // the address its admin listener is bound to
}

// Fleet publishes this replica's per-second decision counts to a FleetStore every Interval and
// reads every replica's for the console's fleet view. With a nil Store the view is this
// replica alone. Set its fields before Run and before the admin handler serves; it is safe for
// concurrent use after.
type Fleet struct {
	Store   FleetStore
	Replica Replica
	// Traffic is this replica's decisions (metrics.Metrics.Snapshot).
	Traffic func(now time.Time) metrics.Snapshot
	// Interval is the time between two publications; 0 means DefaultFleetInterval, and it is
	// taken as at least a second and at most MaxFleetInterval.
	Interval time.Duration
	// OnPublish, when not nil, is told the outcome of a publication when it differs from the
	// one before (the first failure, the first success after failures): err is nil on success.
	OnPublish func(err error)

	mu     sync.Mutex
	failed bool // the last publication failed
}

// fleetRecord is what a replica publishes: its counts per second over FleetPublished seconds
// ending at End, and per resource over the FleetSeconds ending at End.
type fleetRecord struct {
	Replica
	End           int64           `json:"end"` // Unix second of the last element
	Allowed       []uint32        `json:"allowed"`
	Blocked       []uint32        `json:"blocked"`
	Resources     []FleetResource `json:"resources"`
	MoreResources int             `json:"more_resources"`
}

// FleetResource is one resource's decisions over a window.
type FleetResource struct {
	Resource string `json:"resource"` // as the console names it: "other", "" for no rule
	Allowed  uint64 `json:"allowed"`
	Blocked  uint64 `json:"blocked"`
}

// FleetCounts are decisions per second over a view's window and what they add up to.
type FleetCounts struct {
	// Allowed and Blocked are per second, oldest first, ending at the view's End; Allowed
	// counts results ok and shadow, Blocked authority, param_flow and invalid.
	Allowed      []uint32 `json:"allowed"`
	Blocked      []uint32 `json:"blocked"`
	AllowedTotal uint64   `json:"allowed_total"`
	BlockedTotal uint64   `json:"blocked_total"`
	// AllowedRate and BlockedRate are the means per second of the window's last 10 seconds.
	AllowedRate float64 `json:"allowed_rate"`
	BlockedRate float64 `json:"blocked_rate"`
	// Resources are the busiest resources over the FleetSeconds to each replica's End (not
	// the view's), at most MaxFleetResources; MoreResources is how many a replica left out
	// (summed in the total).
	Resources     []FleetResource `json:"resources"`
	MoreResources int             `json:"more_resources"`
}

// FleetReplica is one replica in the fleet view.
type FleetReplica struct {
	Replica
	Self bool `json:"self"` // the replica that answers: its counts are read now, not published
	// End is the last second its counts cover: when it last published.
	End    int64       `json:"end"`
	Counts FleetCounts `json:"counts"`
}

// FleetView is the body of /console/fleet.
type FleetView struct {
	Time time.Time `json:"time"`
	// Shared says the replicas publish to a shared store; false: the view is this replica
	// alone, since none is configured.
	Shared bool `json:"shared"`
	// Error is why the shared store could not be read now ("" when it was): the view is then
	// this replica alone.
	Error           string `json:"error"`
	Self            string `json:"self"`             // this replica's id
	IntervalSeconds int    `json:"interval_seconds"` // between two publications of a replica
	Seconds         int    `json:"seconds"`          // length of the series
	// End is the Unix second the series end with: the oldest of the replicas' last
	// publications, so that every replica counts in every second shown.
	End      int64          `json:"end"`
	Total    FleetCounts    `json:"total"`
	Replicas []FleetReplica `json:"replicas"` // this replica first, then by id
	// MoreReplicas is how many replicas past MaxFleetReplicas are left out; Unreadable how
	// many records could not be read (malformed, too large).
	MoreReplicas int `json:"more_replicas"`
	Unreadable   int `json:"unreadable"`
}

func (f *Fleet) interval() time.Duration {
	if f.Interval <= 0 {
		return DefaultFleetInterval
	}
	return min(max(f.Interval, time.Second), MaxFleetInterval)
}

// Run publishes this replica's counts at once and then every Interval until ctx ends; without
// a Store it returns at once.
func (f *Fleet) Run(ctx context.Context) {
	if f.Store == nil {
		return
	}
	t := time.NewTicker(f.interval())
	defer t.Stop()
	for {
		f.Publish(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Publish publishes this replica's counts of the seconds before now, once.
func (f *Fleet) Publish(ctx context.Context, now time.Time) error {
	if f.Store == nil {
		return nil
	}
	rec := f.record(now)
	body, err := encodeRecord(&rec)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, fleetTimeout)
		err = f.Store.PublishReplica(ctx, f.Replica.ID, body, 3*f.interval())
		cancel()
	}
	if ctx.Err() != nil {
		return err // shutting down: no news of the store
	}
	f.mu.Lock()
	changed := f.failed != (err != nil)
	f.failed = err != nil
	f.mu.Unlock()
	if changed && f.OnPublish != nil {
		f.OnPublish(err)
	}
	return err
}

// record is this replica's counts of the FleetPublished seconds ending the second before now
// (the current second is still counting).
func (f *Fleet) record(now time.Time) fleetRecord {
	end := now.Unix() - 1
	rec := fleetRecord{Replica: f.Replica, End: end, Allowed: make([]uint32, FleetPublished),
		Blocked: make([]uint32, FleetPublished), Resources: []FleetResource{}}
	if f.Traffic == nil {
		return rec
	}
	snap := f.Traffic(now)
	last := snap.Time.Unix() // the last element of the snapshot's series
	for _, t := range snap.Resources {
		var res FleetResource
		for i, n := range t.Allowed {
			b := t.Blocked[i]
			j := int64(i) - int64(len(t.Allowed)-1) + last - end + FleetPublished - 1 // in rec
			if j < 0 || j >= FleetPublished {
				continue
			}
			rec.Allowed[j] += n
			rec.Blocked[j] += b
			if j >= FleetPublished-FleetSeconds {
				res.Allowed += uint64(n)
				res.Blocked += uint64(b)
			}
		}
		if res.Allowed+res.Blocked > 0 {
			res.Resource = clip(t.Resource)
			rec.Resources = append(rec.Resources, res)
		}
	}
	slices.SortStableFunc(rec.Resources, func(a, b FleetResource) int {
		return cmp.Compare(b.Allowed+b.Blocked, a.Allowed+a.Blocked)
	})
	if n := len(rec.Resources); n > MaxFleetResources {
		rec.MoreResources = n - MaxFleetResources
		rec.Resources = rec.Resources[:MaxFleetResources]
	}
	return rec
}

// encodeRecord encodes rec in at most MaxFleetRecordBytes, leaving out its least busy
// resources (counted in MoreResources) if it must.
func encodeRecord(rec *fleetRecord) ([]byte, error) {
	for {
		body, err := json.Marshal(rec)
		if err != nil || len(body) <= MaxFleetRecordBytes {
			return body, err
		}
		if len(rec.Resources) == 0 {
			return nil, errors.New("fleet record too large") // names are bounded: cannot happen
		}
		drop := max(1, len(rec.Resources)/4)
		rec.Resources = rec.Resources[:len(rec.Resources)-drop]
		rec.MoreResources += drop
	}
}

// decodeRecord reads a record published under id; false when it is not one.
func decodeRecord(id string, body []byte) (fleetRecord, bool) {
	var rec fleetRecord
	if len(body) > MaxFleetRecordBytes || json.Unmarshal(body, &rec) != nil {
		return rec, false
	}
	ok := rec.ID == id && len(rec.Allowed) == len(rec.Blocked) && len(rec.Allowed) <= FleetPublished &&
		len(rec.Resources) <= MaxFleetResources && rec.MoreResources >= 0
	return rec, ok
}

// View is the fleet at now: every replica that published within its record's life, this one
// read now; this one alone without a Store or when the Store cannot be read.
func (f *Fleet) View(ctx context.Context, now time.Time) FleetView {
	self := f.record(now)
	v := FleetView{Time: now, Shared: f.Store != nil, Self: self.ID, IntervalSeconds: int(f.interval() / time.Second),
		Seconds: FleetSeconds, End: self.End}
	recs := []fleetRecord{self}
	if f.Store != nil {
		ctx, cancel := context.WithTimeout(ctx, fleetTimeout)
		found, more, err := f.Store.Replicas(ctx, MaxFleetReplicas)
		cancel()
		if err != nil {
			v.Error = "cannot read the other replicas' counts: " + err.Error()
		}
		v.MoreReplicas = more
		ids := make([]string, 0, len(found))
		for id := range found {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if id == self.ID {
				continue
			}
			rec, ok := decodeRecord(id, found[id])
			if !ok {
				v.Unreadable++
				continue
			}
			recs = append(recs, rec)
			v.End = min(v.End, rec.End)
		}
	}
	v.Total = FleetCounts{Allowed: make([]uint32, FleetSeconds), Blocked: make([]uint32, FleetSeconds),
		Resources: []FleetResource{}}
	byName := map[string]int{} // resource -> index in v.Total.Resources
	for i, rec := range recs {
		c := windowOf(rec, v.End)
		for j := range FleetSeconds {
			v.Total.Allowed[j] += c.Allowed[j]
			v.Total.Blocked[j] += c.Blocked[j]
		}
		v.Total.MoreResources += c.MoreResources
		for _, r := range c.Resources {
			k, ok := byName[r.Resource]
			if !ok {
				k = len(v.Total.Resources)
				byName[r.Resource] = k
				v.Total.Resources = append(v.Total.Resources, FleetResource{Resource: r.Resource})
			}
			v.Total.Resources[k].Allowed += r.Allowed
			v.Total.Resources[k].Blocked += r.Blocked
		}
		v.Replicas = append(v.Replicas, FleetReplica{Replica: rec.Replica, Self: i == 0, End: rec.End, Counts: c})
	}
	slices.SortStableFunc(v.Total.Resources, func(a, b FleetResource) int {
		return cmp.Or(cmp.Compare(b.Allowed+b.Blocked, a.Allowed+a.Blocked), strings.Compare(a.Resource, b.Resource))
	})
	if n := len(v.Total.Resources); n > MaxFleetResources {
		v.Total.MoreResources += n - MaxFleetResources
		v.Total.Resources = v.Total.Resources[:MaxFleetResources]
	}
	v.Total.totals()
	return v
}

// windowOf is rec's counts over the FleetSeconds ending at second end (zero where rec has
// none), with its resources as published.
func windowOf(rec fleetRecord, end int64) FleetCounts {
	c := FleetCounts{Allowed: make([]uint32, FleetSeconds), Blocked: make([]uint32, FleetSeconds),
		Resources: rec.Resources, MoreResources: rec.MoreResources}
	if c.Resources == nil {
		c.Resources = []FleetResource{}
	}
	n := int64(len(rec.Allowed))
	for j := range int64(FleetSeconds) {
		i := j - (FleetSeconds - 1) + end - rec.End + n - 1 // in rec
		if i >= 0 && i < n {
			c.Allowed[j], c.Blocked[j] = rec.Allowed[i], rec.Blocked[i]
		}
	}
	c.totals()
	return c
}

// totals sets c's totals and rates from its series.
func (c *FleetCounts) totals() {
	c.AllowedTotal, c.BlockedTotal = 0, 0
	var ra, rb uint64
	for j := range c.Allowed {
		c.AllowedTotal += uint64(c.Allowed[j])
		c.BlockedTotal += uint64(c.Blocked[j])
		if j >= len(c.Allowed)-fleetRateSeconds {
			ra += uint64(c.Allowed[j])
			rb += uint64(c.Blocked[j])
		}
	}
	c.AllowedRate = float64(ra) / fleetRateSeconds
	c.BlockedRate = float64(rb) / fleetRateSeconds
}

// NewReplica names the replica of process pid on host whose admin listener is bound to admin,
// each name cut to 256 bytes.
func NewReplica(host string, pid int, admin string) Replica {
	host = clip(host)
	return Replica{ID: clip(host + "/" + strconv.Itoa(pid)), Host: host, PID: pid, Admin: clip(admin)}
}

// clip bounds s to maxFleetName bytes, cutting no character in two.
func clip(s string) string {
	if len(s) <= maxFleetName {
		return s
	}
	return strings.ToValidUTF8(s[:maxFleetName], "")
}
