package redistest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// DelayProxy listens on a loopback port and forwards each connection to addr, each direction's
// bytes delivered oneWay after they were read, in order: a Redis a round trip of 2×oneWay away,
// as one across a network is, where loopback's round trip is a few microseconds. It is closed
// when t ends. It returns the address to dial.
func DelayProxy(t testing.TB, addr string, oneWay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); delayCopy(out, in, oneWay) }()
			go func() { defer wg.Done(); delayCopy(in, out, oneWay) }()
		}
	}()
	return ln.Addr().String()
}

// chunk is what one read returned, and when.
type chunk struct {
	b  []byte
	at time.Time
}

// delayCopy copies src to dst, each read's bytes written d after the read, until either side
// fails; then it closes both.
func delayCopy(dst, src net.Conn, d time.Duration) {
	defer dst.Close()
	defer src.Close()
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b[:n], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at.Add(d)))
		if _, err := dst.Write(c.b); err != nil {
			src.Close()
			for range q { // let the reader end
			}
			return
		}
	}
}
