package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Version is the Sentinel version the heartbeat and the version command give: that of the
// transport spoken (1.8.8), with a postfix the dashboard shows and ignores when it compares
// versions (it posts pushes to machines of 1.6.0 and above, and leaves their Content-Type to
// its HTTP client from 1.7.1 on).
const Version = "1.8.8-extauthz"

// HeartbeatPath is where the dashboard takes heartbeats.
const HeartbeatPath = "/registry/machine"

// Machine is what a heartbeat tells the dashboard about this process.
type Machine struct {
	App      string
	AppType  int
	Hostname string
	IP       string // literal; the dashboard refuses a name
	Port     int    // the command port
	PID      int
}

// Heartbeat registers the machine with the dashboards of Addrs, as Sentinel's transport does: a
// form POST to HeartbeatPath with app, app_type, hostname, ip, port, v (the Sentinel version),
// version (the send time in Unix milliseconds) and pid. It sends to one dashboard at a time and
// moves to the next one of Addrs after a failure. Its fields are set before the first Send;
// Send and Run are safe for concurrent use.
type Heartbeat struct {
	Addrs   []string
	Machine Machine
	Client  *http.Client     // nil means a client with a 3s timeout
	Now     func() time.Time // the clock of the version field; nil means time.Now
	Log     *zap.Logger      // nil means none

	mu      sync.Mutex
	next    int   // the index in Addrs of the dashboard to try first
	lastErr error // the outcome of the previous send, to log only changes
	sent    bool  // a send succeeded since the last failure was logged
}

// Form is the heartbeat's fields at instant now.
func (m Machine) Form(now time.Time) url.Values {
	return url.Values{
		"app":      {m.App},
		"app_type": {strconv.Itoa(m.AppType)},
		"hostname": {m.Hostname},
		"ip":       {m.IP},
		"port":     {strconv.Itoa(m.Port)},
		"v":        {Version},
		"version":  {strconv.FormatInt(now.UnixMilli(), 10)},
		"pid":      {strconv.Itoa(m.PID)},
	}
}

// Send sends one heartbeat, trying each dashboard once from the one that answered last, and
// returns the last failure when none took it. The dashboard answers a refused heartbeat (an
// invalid ip, say) with HTTP 200 and a result whose success is false: that is a failure too.
func (h *Heartbeat) Send(ctx context.Context) error {
	h.mu.Lock()
	start := h.next
	h.mu.Unlock()
	if len(h.Addrs) == 0 {
		return fmt.Errorf("no dashboard address")
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	body := h.Machine.Form(now()).Encode()
	var err error
	for i := range h.Addrs {
		idx := (start + i) % len(h.Addrs)
		if err = h.post(ctx, h.Addrs[idx], body); err == nil {
			h.mu.Lock()
			h.next = idx
			h.mu.Unlock()
			h.report(h.Addrs[idx], nil)
			return nil
		}
	}
	h.mu.Lock()
	h.next = (start + 1) % len(h.Addrs)
	h.mu.Unlock()
	h.report("", err)
	return err
}

// result is the dashboard's answer to a heartbeat (its Result type).
type result struct {
	Success *bool  `json:"success"`
	Code    int    `json:"code"`
	Msg     string `json:"msg"`
}

func (h *Heartbeat) post(ctx context.Context, addr, body string) error {
	target := "http://" + addr + HeartbeatPath
	if strings.Contains(addr, "://") {
		target = strings.TrimSuffix(addr, "/") + HeartbeatPath
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("dashboard %s: %w", addr, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=UTF-8")
	cli := h.Client
	if cli == nil {
		cli = &http.Client{Timeout: 3 * time.Second}
	}
	resp, err := cli.Do(req)
	if err != nil {
		return fmt.Errorf("dashboard %s: %w", addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("dashboard %s: HTTP %d: %s", addr, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var r result
	if json.Unmarshal(b, &r) == nil && r.Success != nil && !*r.Success {
		return fmt.Errorf("dashboard %s refused the heartbeat: %s (code %d)", addr, r.Msg, r.Code)
	}
	return nil
}

// report logs a send's outcome when it differs from the previous one's: the first heartbeat
// taken, the first failure, a recovery.
func (h *Heartbeat) report(addr string, err error) {
	h.mu.Lock()
	prev, sent := h.lastErr, h.sent
	h.lastErr = err
	if err == nil {
		h.sent = true
	}
	h.mu.Unlock()
	if h.Log == nil {
		return
	}
	switch {
	case err == nil && (!sent || prev != nil):
		h.Log.Info("dashboard heartbeat taken", zap.String("dashboard", addr), zap.String("app", h.Machine.App),
			zap.String("ip", h.Machine.IP), zap.Int("port", h.Machine.Port))
	case err != nil && (prev == nil || prev.Error() != err.Error()):
		h.Log.Warn("dashboard heartbeat failed; retrying every interval", zap.Error(err))
	}
}

// Run sends a heartbeat at once and then at every tick until ctx ends.
func (h *Heartbeat) Run(ctx context.Context, ticks <-chan time.Time) {
	for {
		_ = h.Send(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
	}
}
