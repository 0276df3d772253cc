package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/extauthz/extauthz/admin"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// fleetShown is what the console's fleet section shows: the total and each replica's row.
const fleetShown = `(() => {
  const t = document.querySelector("#fleet-total");
  return {
    replicas: t ? Number(t.dataset.replicas) : -1,
    allowed: t ? Number(t.dataset.allowed) : -1,
    blocked: t ? Number(t.dataset.blocked) : -1,
    rows: Object.fromEntries([...document.querySelectorAll("#replicas [data-replica]")].map(
      r => [r.dataset.replica, [Number(r.dataset.allowed), Number(r.dataset.blocked)]])),
    note: document.querySelector("#fleet-note").textContent,
  };
})()`

type fleetPage struct {
	Replicas int                  `json:"replicas"`
	Allowed  int                  `json:"allowed"`
	Blocked  int                  `json:"blocked"`
	Rows     map[string][2]uint64 `json:"rows"`
	Note     string               `json:"note"`
}

// TestConsoleFleet: two binaries on one Redis, traffic to each; the console of either shows
// both replicas with what each decided and the fleet's sum, as /console/fleet has them; a
// replica without Redis says it shows itself alone.
func TestConsoleFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the built binary, redis-server and Chromium")
	}
	srv := redistest.Start(t)
	config, err := filepath.Abs(extauthzYAML)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := filepath.Abs(rulesYAML)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"EXTAUTHZ_STORE_REDIS_ADDRS=" + srv.Addr(), "EXTAUTHZ_STORE_REDIS_TIMEOUT=500ms",
		"EXTAUTHZ_ADMIN_FLEET_INTERVAL=1s"}
	a, b := startServiceWith(t, config, rules, env...), startServiceWith(t, config, rules, env...)

	// a: one item until refused; b: three items, each admitted.
	sent := map[*service][2]uint64{}
	okA, _, _ := untilRefused(t, a, itemReq("fleet-a"), 50)
	sent[a] = [2]uint64{uint64(okA), 1}
	for i := range 3 {
		if !b.allowed(t, itemReq(fmt.Sprintf("fleet-b%d", i))) {
			t.Fatal("a fresh item was refused")
		}
	}
	sent[b] = [2]uint64{3, 0}
	ids := map[*service]string{}
	for _, s := range []*service{a, b} {
		var v admin.FleetView
		getJSON(t, s.adminURL+"/console/fleet", &v)
		ids[s] = v.Self
	}

	br := newBrowser(t)
	ctx := br.ctx
	for _, s := range []*service{a, b} {
		if err := chromedp.Do(ctx, chromedp.Navigate(s.adminURL+"/"), chromedp.WaitVisible(chromedp.CSS(`#fleet-total`))); err != nil {
			t.Fatalf("load the console: %v", err)
		}
		want := sent[a][0] + sent[b][0]
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
			fmt.Sprintf(`document.querySelectorAll("#replicas [data-replica]").length === 2 && Number(document.querySelector("#fleet-total").dataset.allowed) === %d`, want),
			chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[fleetPage](fleetShown))
			t.Fatalf("%s's console never showed 2 replicas and %d allowed in all: %v (shows %+v)", s.adminURL, want, err, page)
		}
		page, err := chromedp.Run(ctx, chromedp.Evaluate[fleetPage](fleetShown))
		if err != nil {
			t.Fatal(err)
		}
		var v admin.FleetView
		getJSON(t, s.adminURL+"/console/fleet", &v)
		for r, id := range ids {
			if got := page.Rows[id]; got != sent[r] {
				t.Errorf("%s's console: replica %s shows %v (allowed, blocked), want %v as sent", s.adminURL, id, got, sent[r])
			}
		}
		if page.Replicas != 2 || page.Allowed != int(v.Total.AllowedTotal) || page.Blocked != int(v.Total.BlockedTotal) ||
			page.Blocked != int(sent[a][1]+sent[b][1]) {
			t.Errorf("%s's console: fleet %+v, /console/fleet %d/%d, sent %v", s.adminURL, page, v.Total.AllowedTotal, v.Total.BlockedTotal, sent)
		}
		if !strings.Contains(page.Note, "2 replicas publishing to the shared store every 1 s") {
			t.Errorf("%s's console: note %q, want it to say 2 replicas publish every 1 s", s.adminURL, page.Note)
		}
	}
	shoot(t, ctx, "console-fleet.png", chromedp.FullScreenshot(100))

	alone := sharedService(t) // no store.redis
	if err := chromedp.Do(ctx, chromedp.Navigate(alone.adminURL+"/"), chromedp.WaitVisible(chromedp.CSS(`#fleet-total`))); err != nil {
		t.Fatalf("load the console: %v", err)
	}
	page, err := chromedp.Run(ctx, chromedp.Evaluate[fleetPage](fleetShown))
	if err != nil {
		t.Fatal(err)
	}
	if page.Replicas != 1 || len(page.Rows) != 1 || !strings.Contains(page.Note, "Shows this replica only: no shared store") {
		t.Errorf("console without Redis: %+v; want one replica and a note that it shows this replica only", page)
	}
	errs, requests := br.seen()
	if len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
	for _, u := range requests {
		if !strings.Contains(u, "127.0.0.1:") {
			t.Errorf("the page requested %s, outside the admin listeners", u)
		}
	}
}
