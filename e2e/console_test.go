package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// chromiumPath is Debian's chromium, which CI installs.
const chromiumPath = "/usr/bin/chromium"

// browser starts a headless Chromium for t and collects the console errors and the URLs of
// every request the page makes.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	errors   []string
	requests []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("the console test needs Chromium at %s (Debian package chromium): %v", chromiumPath, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	b := &browser{ctx: bctx}
	if err := chromedp.Do(bctx); err != nil { // start the browser and open the tab
		t.Fatalf("cannot start Chromium: %v", err)
	}
	messages := chromedp.Console(bctx)
	requests := chromedp.Events(bctx, network.RequestWillBeSent)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, m.String())
				b.mu.Unlock()
			}
		}
	}()
	go func() {
		for ev, err := range requests {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.requests = append(b.requests, ev.Request.URL)
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *browser) seen() (errors, requests []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...), append([]string(nil), b.requests...)
}

// consoleCounts is what the console shows per resource: its counts by result.
const consoleCounts = `Object.fromEntries([...document.querySelectorAll("#resources [data-resource]")].map(
  c => [c.dataset.resource, Object.fromEntries([...c.querySelectorAll("[data-result]")].map(
    s => [s.dataset.result, Number(s.dataset.count)]))]))`

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// metricsCounts reads extauthz_decisions_total from /metrics, summed over API and domain, per
// resource and result.
func metricsCounts(t *testing.T, s *service) map[string]map[string]int {
	t.Helper()
	resp, err := http.Get(s.adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "extauthz_decisions_total{") {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		labels := map[string]string{}
		for _, m := range labelRE.FindAllStringSubmatch(line[:end], -1) {
			v, err := strconv.Unquote(`"` + m[2] + `"`)
			if err != nil {
				t.Fatalf("label in %q: %v", line, err)
			}
			labels[m[1]] = v
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			t.Fatalf("value in %q: %v", line, err)
		}
		r := labels["resource"]
		if out[r] == nil {
			out[r] = map[string]int{}
		}
		out[r][labels["result"]] += int(n)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// compareCounts fails t unless the console shows, for every resource it lists, the counts of
// /metrics; and lists every resource /metrics counts.
func compareCounts(t *testing.T, shown map[string]map[string]int, scraped map[string]map[string]int) {
	t.Helper()
	for resource, results := range scraped {
		row, ok := shown[resource]
		if !ok {
			t.Errorf("/metrics counts resource %q, the console does not show it", resource)
			continue
		}
		for result, want := range results {
			if result == "cancelled" {
				result = "other"
			}
			if got := row[result]; got != want {
				t.Errorf("console %q %s = %d, /metrics says %d", resource, result, got, want)
			}
		}
	}
}

// TestConsole drives the console in headless Chromium against the built binary: it loads
// without console errors or requests elsewhere, lists the resources of the rules file, shows
// the numbers /metrics has after known traffic, updates without a reload, works from the
// keyboard and fits a phone's width.
func TestConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the built binary and Chromium")
	}
	s := newService(t, readRules(t))

	// Known traffic: GET:/items until one is refused, two authority refusals, and a repeated
	// search query that only the shadow rule would refuse.
	admittedItems, _, _ := untilRefused(t, s, itemReq("console-a"), 50)
	for range 2 {
		if got := checkCode(t, s.check(t, req("GET", "/items?item_id=c", "192.0.2.9", "x-origin", "stranger"))); got != 403 {
			t.Fatalf("Check from a stranger = %d, want 403", got)
		}
	}
	for range 3 {
		if !s.allowed(t, req("GET", "/search?q=console", "192.0.2.10")) {
			t.Fatal("a search was refused; only the shadow rule should see it")
		}
	}
	t.Logf("GET:/items admitted %d before the first refusal", admittedItems)

	b := newBrowser(t)
	ctx := b.ctx
	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.adminURL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#resources [data-resource="GET:/items"]`)),
	); err != nil {
		t.Fatalf("load the console: %v", err)
	}

	// The resources of the rules file, every one of them.
	var rules struct {
		Authority []struct{ Resource string } `json:"authority"`
		ParamFlow []struct{ Resource string } `json:"param_flow"`
	}
	getJSON(t, s.adminURL+"/rules", &rules)
	listed, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#resources [data-resource]")].map(c => c.dataset.resource)`))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(rules.Authority, rules.ParamFlow...) {
		if !slices.Contains(listed, r.Resource) {
			t.Errorf("the console lists %q, not the rules file's %q", listed, r.Resource)
		}
	}

	// Its numbers are those of /metrics.
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]map[string]int](consoleCounts))
	if err != nil {
		t.Fatal(err)
	}
	compareCounts(t, shown, metricsCounts(t, s))
	if got := shown["GET:/items"]["param_flow"]; got != 1 {
		t.Errorf("console GET:/items param_flow = %d, want 1", got)
	}
	// The shadow rule is marked on its resource.
	marked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`!!document.querySelector('[data-resource="GET:/search"] [data-rule="param_flow#3"] .badge.shadow')`))
	if err != nil {
		t.Fatal(err)
	}
	if !marked {
		t.Error("the shadow rule param_flow#3 is not marked shadow on GET:/search")
	}

	// Live: more traffic shows up without a reload.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	before := shown["GET:/items"]["ok"]
	for i := range 3 {
		if !s.allowed(t, itemReq(fmt.Sprintf("console-b%d", i))) {
			t.Fatal("a fresh item was refused")
		}
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
		fmt.Sprintf(`window.notReloaded && Number(document.querySelector('[data-resource="GET:/items"] [data-result="ok"]').dataset.count) === %d`, before+3),
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Fatalf("the console did not show 3 more allowed on GET:/items without a reload: %v", err)
	}
	shown, err = chromedp.Run(ctx, chromedp.Evaluate[map[string]map[string]int](consoleCounts))
	if err != nil {
		t.Fatal(err)
	}
	compareCounts(t, shown, metricsCounts(t, s))

	// Keyboard, on a fresh load: Tab reaches the filter past the skip link; typing filters the
	// resources.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.adminURL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#resources [data-resource="GET:/items"]`)),
	); err != nil {
		t.Fatalf("reload the console: %v", err)
	}
	visible, err := chromedp.Run(ctx, keyboardFilter("orders"))
	if err != nil {
		t.Fatal(err)
	}
	if len(visible) == 0 || !allContain(visible, "orders") {
		t.Errorf("after typing %q in the filter the visible resources are %q", "orders", visible)
	}
	if err := chromedp.Do(ctx, chromedp.KeyEvent(strings.Repeat(kb.Backspace, len("orders")))); err != nil {
		t.Fatal(err)
	}

	// A fresh burst, so that the screenshot shows busy values, then the wide screenshot.
	untilRefused(t, s, itemReq("console-c"), 50)
	for range 3 {
		s.allowed(t, req("GET", "/search?q=console-shot", "192.0.2.11"))
	}
	// The busiest values are those of each rule's recent window (here 1s and the one before):
	// keep the value busy until a poll of the page has seen it.
	if !eventually(15*time.Second, func() bool {
		s.allowed(t, itemReq("console-c"))
		shown, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.querySelector('[data-hot-rule="0"] td.v')`))
		return err == nil && shown
	}) {
		t.Fatal("the busiest values of GET:/items never showed")
	}
	shoot(t, ctx, "console.png", chromedp.FullScreenshot(100))
	// A phone's width: nothing wider than the screen.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2))); err != nil {
		t.Fatal(err)
	}
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - window.innerWidth`))
	if err != nil {
		t.Fatal(err)
	}
	if overflow > 0 {
		t.Errorf("on a 390px screen the page is %dpx wider than the screen", overflow)
	}
	shoot(t, ctx, "console-phone.png", chromedp.CaptureScreenshot())

	errs, requests := b.seen()
	if len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
	for _, u := range requests {
		if !strings.HasPrefix(u, s.adminURL+"/") {
			t.Errorf("the page requested %s, outside the admin listener", u)
		}
	}
	if len(requests) < 4 {
		t.Errorf("requests seen = %q; want the page, its assets and the data", requests)
	}
}

// keyboardFilter focuses the filter with two Tab presses from a freshly loaded page, types
// text, and returns the resources left visible.
func keyboardFilter(text string) chromedp.Action[[]string] {
	return func(ctx context.Context, tg *chromedp.Target) ([]string, error) {
		if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Tab)); err != nil {
			return nil, err
		}
		id, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.id || document.activeElement.outerHTML.slice(0, 80)`))
		if err != nil {
			return nil, err
		}
		if id != "filter" {
			return nil, fmt.Errorf("two Tabs from the top focus %q, want the filter", id)
		}
		if err := chromedp.Do(ctx, chromedp.KeyEvent(text)); err != nil {
			return nil, err
		}
		return chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll("#resources [data-resource]")].filter(c => !c.hidden).map(c => c.dataset.resource)`))
	}
}

// shoot writes a screenshot taken by capture into $EXTAUTHZ_SCREENSHOTS, or the test's
// temporary directory.
func shoot(t *testing.T, ctx context.Context, name string, capture chromedp.Action[[]byte]) {
	t.Helper()
	png, err := chromedp.Run(ctx, capture)
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("EXTAUTHZ_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func allContain(list []string, sub string) bool {
	for _, s := range list {
		if !strings.Contains(strings.ToLower(s), sub) {
			return false
		}
	}
	return true
}
