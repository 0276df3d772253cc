package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The h2 load generator speaks gRPC over HTTP/2 frames it encodes once: the request's header
// block (every field a static-table index or a never-indexed literal, so it leaves the server's
// HPACK table as it was and can be sent again and again) and its message. One goroutine per
// connection keeps its share of the clients' requests in flight: it reads the answers, checks
// each (grpc-status in the trailers, overall_code in the message) and sends the next request on
// a new stream at once, flushing its writes before it waits to read. It spends a fraction of
// the CPU of grpc-go's client per call, so on a shared machine more of it is left to the
// service under test; grpc-go's client (-load grpc) stays for comparison.

// h2Request is ShouldRateLimit calls, encoded: one header block and a message for each value
// asked for, sent in turn.
type h2Request struct {
	block  []byte   // HPACK header block
	bodies [][]byte // gRPC length-prefixed messages
}

// newH2Request encodes calls of method with messages msgs for authority.
func newH2Request(authority, method string, msgs ...[]byte) h2Request {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", authority},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"grpc-timeout", "5S"},
	} {
		// Sensitive: a never-indexed literal when not an exact static-table entry, so the
		// block adds nothing to the server's dynamic table
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true}); err != nil {
			panic(err) // a bytes.Buffer does not fail
		}
	}
	r := h2Request{block: block.Bytes()}
	for _, msg := range msgs {
		body := make([]byte, 5+len(msg))
		binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
		copy(body[5:], msg)
		r.bodies = append(r.bodies, body)
	}
	return r
}

// tally counts the answers of one connection while measuring is on.
type tally struct{ ok, over, failed atomic.Int64 }

// h2Stream is what has arrived of one call's answer.
type h2Stream struct {
	code   byte   // overall_code from the message: 1 OK, 2 OVER_LIMIT, 0 none yet
	status string // grpc-status from the trailers
}

// h2Conn is one connection of the h2 load generator, read and written by one goroutine.
type h2Conn struct {
	fr        *http2.Framer
	bw        *bufio.Writer
	br        *bufio.Reader
	dec       *hpack.Decoder
	req       h2Request
	next      int // the message of the next call
	measuring *atomic.Bool
	t         *tally

	live      map[uint32]*h2Stream
	nextID    uint32
	sendWin   int64     // the server's connection window for our messages
	waiting   int       // calls not sent for want of window
	received  int64     // DATA bytes since the last window update sent
	current   *h2Stream // stream whose header block is being decoded; nil: drop its fields
	endStream bool      // the header block being decoded ends its stream
}

// runH2 keeps streams calls of req in flight on one new connection to addr until stop is
// closed, counting the answers in t while measuring is on; its first call sends req's message
// first (the messages taken in turn from there). It returns nil once stopped.
func runH2(addr string, req h2Request, first, streams int, measuring *atomic.Bool, stop <-chan struct{}, t *tally) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	go func() { <-stop; nc.Close() }()
	c := &h2Conn{
		bw: bufio.NewWriterSize(nc, 64<<10), br: bufio.NewReaderSize(nc, 64<<10),
		req: req, next: first % len(req.bodies), measuring: measuring, t: t,
		live: make(map[uint32]*h2Stream, streams), nextID: 1, sendWin: 65535,
	}
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.SetReuseFrames()
	c.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if c.current != nil && f.Name == "grpc-status" {
			c.current.status = f.Value
		}
	})
	err = c.run(streams)
	select {
	case <-stop:
		return nil
	default:
		return err
	}
}

// run sends the preface, settings and the first streams calls, then reads answers and sends a
// call for each until the connection fails.
func (c *h2Conn) run(streams int) error {
	if _, err := c.bw.WriteString(http2.ClientPreface); err != nil {
		return err
	}
	// a large stream and connection window: the answers never wait for a window update
	const window = 1 << 30
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		return err
	}
	if err := c.fr.WriteWindowUpdate(0, window-65535); err != nil {
		return err
	}
	for range streams {
		if err := c.send(); err != nil {
			return err
		}
	}
	for {
		if c.br.Buffered() == 0 {
			if err := c.bw.Flush(); err != nil {
				return err
			}
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		if err := c.frame(f); err != nil {
			return err
		}
	}
}

// frame handles one frame from the server.
func (c *h2Conn) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			return c.fr.WriteSettingsAck()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			return c.fr.WritePing(true, f.Data)
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID != 0 {
			return nil
		}
		c.sendWin += int64(f.Increment)
		for ; c.waiting > 0 && c.sendWin >= int64(len(c.req.bodies[c.next])); c.waiting-- {
			if err := c.send(); err != nil {
				return err
			}
		}
	case *http2.GoAwayFrame:
		return fmt.Errorf("GOAWAY %v: %s", f.ErrCode, f.DebugData())
	case *http2.RSTStreamFrame:
		if s := c.live[f.StreamID]; s != nil {
			s.status = "reset"
			return c.finish(f.StreamID, s)
		}
	case *http2.DataFrame:
		if s := c.live[f.StreamID]; s != nil {
			// a RateLimitResponse starts with overall_code, field 1, a varint
			if d := f.Data(); len(d) >= 7 && d[5] == 0x08 {
				s.code = d[6]
			}
		}
		if c.received += int64(f.Length); c.received >= 1<<20 {
			err := c.fr.WriteWindowUpdate(0, uint32(c.received))
			c.received = 0
			return err
		}
	case *http2.HeadersFrame:
		c.current, c.endStream = c.live[f.StreamID], f.StreamEnded()
		return c.headers(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame:
		return c.headers(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded())
	}
	return nil
}

// headers decodes a fragment of a header block of stream id, and at the block's end finishes
// the stream when the block ends it.
func (c *h2Conn) headers(id uint32, frag []byte, end bool) error {
	if _, err := c.dec.Write(frag); err != nil {
		return err
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return err
	}
	s := c.current
	c.current = nil
	if s == nil || !c.endStream {
		return nil
	}
	if s.status == "" {
		return errors.New("a stream ended without grpc-status")
	}
	return c.finish(id, s)
}

// send starts a call on a new stream, or counts it as waiting when the server's connection
// window has no room for its message.
func (c *h2Conn) send() error {
	body := c.req.bodies[c.next]
	if c.sendWin < int64(len(body)) {
		c.waiting++
		return nil
	}
	c.next = (c.next + 1) % len(c.req.bodies)
	id := c.nextID
	c.nextID += 2
	c.live[id] = &h2Stream{}
	c.sendWin -= int64(len(body))
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.req.block, EndHeaders: true}); err != nil {
		return err
	}
	return c.fr.WriteData(id, true, body)
}

// finish counts stream id's answer and sends the next call.
func (c *h2Conn) finish(id uint32, s *h2Stream) error {
	delete(c.live, id)
	if c.measuring.Load() {
		switch {
		case s.status != "0":
			c.t.failed.Add(1)
		case s.code == 1:
			c.t.ok.Add(1)
		case s.code == 2:
			c.t.over.Add(1)
		default:
			c.t.failed.Add(1)
		}
	}
	return c.send()
}
