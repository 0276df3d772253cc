package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// load is how h2load drives one Envoy: clients HTTP/2 connections, each sending rate requests
// a second (open loop, one stream in flight per connection), for dur.
type load struct {
	h2load  string
	clients int
	rate    int // per client
	dur     time.Duration
	headers []string
}

// result is what one run measured.
type result struct {
	requests int           // completed with a 2xx
	failed   int           // anything else (a non-2xx status, an error)
	rps      float64       // completed requests a second
	p50, p99 time.Duration // time to the end of each response
	envoyCPU time.Duration // Envoy's CPU over the run
	svcCPU   time.Duration // the service's (and its Redis's) over the run
}

func (r result) perRequest(d time.Duration) float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(r.requests)
}

var status2xx = regexp.MustCompile(`status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
var finished = regexp.MustCompile(`finished in ([0-9.]+)(s|ms), ([0-9.]+) req/s`)
var totals = regexp.MustCompile(`requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored`)

// run sends l's load to the URIs in uris (a file) and measures the CPU of pids (Envoy first)
// over it; a run of a second before it warms connections and caches up.
func (l load) run(dir, uris string, envoyPID int, svcPIDs []int) (result, error) {
	args := func(d time.Duration, logFile string) []string {
		a := []string{"-i", uris, "-c", strconv.Itoa(l.clients), "-m", "1", "--rps", strconv.Itoa(l.rate),
			"-D", strconv.Itoa(int(d.Seconds()))}
		for _, h := range l.headers {
			a = append(a, "-H", h)
		}
		if logFile != "" {
			a = append(a, "--log-file", logFile)
		}
		return a
	}
	if out, err := exec.Command(l.h2load, args(time.Second, "")...).CombinedOutput(); err != nil {
		return result{}, fmt.Errorf("h2load warm-up: %v\n%s", err, out)
	}
	cpu := func() (time.Duration, time.Duration, error) {
		e, err := cpuTime(envoyPID)
		if err != nil {
			return 0, 0, err
		}
		var s time.Duration
		for _, p := range svcPIDs {
			c, err := cpuTime(p)
			if err != nil {
				return 0, 0, err
			}
			s += c
		}
		return e, s, nil
	}
	logFile := filepath.Join(dir, "h2load.tsv")
	e0, s0, err := cpu()
	if err != nil {
		return result{}, err
	}
	out, err := exec.Command(l.h2load, args(l.dur, logFile)...).CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("h2load: %v\n%s", err, out)
	}
	e1, s1, err := cpu()
	if err != nil {
		return result{}, err
	}
	r := result{envoyCPU: e1 - e0, svcCPU: s1 - s0}
	if err := r.parse(string(out)); err != nil {
		return r, err
	}
	if r.p50, r.p99, err = percentiles(logFile); err != nil {
		return r, err
	}
	return r, nil
}

// parse reads h2load's summary: completed requests, their statuses and the rate.
func (r *result) parse(out string) error {
	s, f, t := status2xx.FindStringSubmatch(out), finished.FindStringSubmatch(out), totals.FindStringSubmatch(out)
	if s == nil || f == nil || t == nil {
		return fmt.Errorf("cannot read h2load's summary:\n%s", out)
	}
	n := func(x string) int { v, _ := strconv.Atoi(x); return v }
	r.requests = n(s[1])
	r.failed = n(t[1]) - r.requests
	secs, _ := strconv.ParseFloat(f[1], 64)
	if f[2] == "ms" {
		secs /= 1000
	}
	if secs > 0 {
		r.rps = float64(r.requests) / secs
	}
	return nil
}

// percentiles are the median and 99th percentile of the third column of h2load's log file
// (microseconds from a request's start to the end of its response).
func percentiles(path string) (time.Duration, time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var us []int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), "\t")
		if len(fs) < 3 {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(fs[2]), 10, 64)
		if err == nil {
			us = append(us, v)
		}
	}
	if len(us) == 0 {
		return 0, 0, fmt.Errorf("%s: no request logged", path)
	}
	slices.Sort(us)
	at := func(q float64) time.Duration { return time.Duration(us[int(q*float64(len(us)-1))]) * time.Microsecond }
	return at(0.50), at(0.99), sc.Err()
}
