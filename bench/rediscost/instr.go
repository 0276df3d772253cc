package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// instructions runs redis-server under callgrind and prints, for each way, the instructions
// Redis executes per call: the counters zeroed, calls made, the counters dumped, for calls and
// for twice as many; the difference over calls leaves out what Redis does between calls (its
// event loop, its cron). Instruction counts do not depend on the machine's load.
func instructions(ctx context.Context, redisBin string, redisArgs []string, dir string, calls int,
	ways func(rc rueidis.Client, addr string) ([]way, func(), error)) error {
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command("valgrind", append([]string{"--tool=callgrind", "--callgrind-out-file=" + out, redisBin}, redisArgs...)...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start valgrind: %w", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := strconv.Itoa(cmd.Process.Pid)
	addr := "127.0.0.1:" + redisArgs[1]
	rc, err := dial(addr)
	if err != nil {
		return err
	}
	defer rc.Close()
	ws, done, err := ways(rc, addr)
	if err != nil {
		return err
	}
	defer done()
	dumps := 0
	// measure zeroes the counters, makes n calls of w and returns the instructions counted
	measure := func(w way, n int) (int64, error) {
		if b, err := exec.Command("callgrind_control", "-z", pid).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("callgrind_control -z: %v: %s", err, b)
		}
		for range n {
			if err := w.call(ctx); err != nil {
				return 0, fmt.Errorf("%s: %w", w.name, err)
			}
		}
		if b, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("callgrind_control -d: %v: %s", err, b)
		}
		dumps++
		return totals(out+"."+strconv.Itoa(dumps), 10*time.Second)
	}
	fmt.Printf("# redis-server under callgrind; %d and %d calls a way\n", calls, 2*calls)
	fmt.Printf("%-11s %14s\n", "way", "instr/call")
	per := map[string]float64{}
	for _, w := range ws {
		for range 100 { // warm: script loaded, connection open
			if err := w.call(ctx); err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
		}
		one, err := measure(w, calls)
		if err != nil {
			return err
		}
		two, err := measure(w, 2*calls)
		if err != nil {
			return err
		}
		per[w.name] = float64(two-one) / float64(calls)
		fmt.Printf("%-11s %14.0f\n", w.name, per[w.name])
	}
	if per["incrby"] > 0 {
		fmt.Printf("in-process / INCRBY script: %.2f   (target <= 3.5)\n", per["in-process"]/per["incrby"])
	}
	if per["binary"] > 0 {
		fmt.Printf("binary / in-process: %.2f   (target 0.8..1.2)\n", per["binary"]/per["in-process"])
		fmt.Printf("binary / INCRBY script: %.2f   (target <= 3.5)\n", per["binary"]/per["incrby"])
	}
	return nil
}

// totals reads the instruction total of a callgrind dump, waiting up to wait for it.
func totals(file string, wait time.Duration) (int64, error) {
	deadline := time.Now().Add(wait)
	for {
		b, err := os.ReadFile(file)
		if err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "totals: "); ok {
					return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				}
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no totals in %s", file)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
