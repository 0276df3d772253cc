package wire

import (
	"sync"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// Rate-limit answers are reused: the handler takes one from its Codec (Codec.Answer) and the
// server codec (Codec.Marshal) gives it back once it has encoded it. gRPC encodes a unary answer exactly once,
// after the handler and every interceptor returned (the observe interceptor reads the answer
// before returning it and keeps nothing of it), and afterwards keeps it only for its own
// request tracing (grpc.EnableTracing, checked here) and for stats handlers (OutPayload.Payload;
// the server installs none: a stats handler that reads the payload must come with a codec that
// does not recycle). An answer that never reaches the codec (the handler called directly)
// stays counted as out, up to maxOut; then the pool forgets every answer out (each is left to
// the garbage collector, never reset) and goes on reusing. One mutex guards the answers out:
// two short critical sections a call, fine on a few cores; shard it if it shows in a profile
// on many.

// maxOut bounds the answers handed out and not yet given back. An answer is out only between
// the handler's return and gRPC's encoding, so few are out at once in a server; the bound
// keeps a program that calls the handler without the codec from tracking answers without end.
// Reaching it, the pool forgets the answers out rather than stop reusing: answers that never
// come back (the handler called directly, by a benchmark before) would otherwise leave every
// later call allocating its answer, and the few that do come back are then simply not reused.
const maxOut = 256

// answer is a reusable rate-limit answer with room for its statuses.
type answer struct {
	resp rlsv3.RateLimitResponse
	ptrs []*rlsv3.RateLimitResponse_DescriptorStatus
	slab []rlsv3.RateLimitResponse_DescriptorStatus
}

func (a *answer) msg() *rlsv3.RateLimitResponse { return &a.resp }

func (a *answer) reset() {
	clear(a.slab) // zero values, as Reset leaves them (a message's state is set on first use)
	a.resp.Reset()
}

// reusable is what a pool holds: A's message (the key it hands it out under) and how to make
// it fresh again.
type reusable[M comparable, A any] interface {
	*A
	msg() M
	reset()
}

// pool holds the answers of one kind free for reuse and those handed out: only an answer it
// handed out is ever reset, so a message made anywhere else is never touched. Its zero value
// is an empty pool that reuses answers.
type pool[M comparable, A any, P reusable[M, A]] struct {
	freeList sync.Pool // of P
	keep     bool      // reuse nothing: gRPC's binary log keeps the answers it logs
	mu       sync.Mutex
	out      map[M]P
}

// hand returns an answer, counted as out until taken (or forgotten, see maxOut). A reused one
// is as reset left it.
func (p *pool[M, A, P]) hand() P {
	a, _ := p.freeList.Get().(P)
	if a == nil {
		a = P(new(A))
	}
	p.mu.Lock()
	if len(p.out) >= maxOut {
		clear(p.out) // forgotten: never taken, so never reset (see maxOut)
	}
	if p.out == nil {
		p.out = make(map[M]P, maxOut)
	}
	p.out[a.msg()] = a
	p.mu.Unlock()
	return a
}

// take reports whether m is the message of an answer handed out, which is then no longer out:
// the caller gives it back with free once done with it. It never takes any other message.
func (p *pool[M, A, P]) take(m M) (P, bool) {
	p.mu.Lock()
	a, ok := p.out[m]
	if ok {
		delete(p.out, m)
	}
	p.mu.Unlock()
	return a, ok
}

// free resets a taken answer and makes it free for reuse, unless gRPC traces requests or logs
// them in its binary log: both keep the message to print it later.
func (p *pool[M, A, P]) free(a P) {
	if grpc.EnableTracing || p.keep {
		return
	}
	a.reset()
	p.freeList.Put(a)
}

// put gives m back if it is the message of an answer handed out (see take and free).
func (p *pool[M, A, P]) put(m M) {
	if a, ok := p.take(m); ok {
		p.free(a)
	}
}

// answerPool is the pool of rate-limit answers.
type answerPool struct {
	pool[*rlsv3.RateLimitResponse, answer, *answer]
}

// get returns an OK answer with n OK statuses.
func (p *answerPool) get(n int) *rlsv3.RateLimitResponse {
	var a *answer = p.hand() // typed, so that staticcheck sees answer used (it misses type arguments)
	if cap(a.slab) < n {
		a.slab = make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
		a.ptrs = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	a.resp.OverallCode = rlsv3.RateLimitResponse_OK
	for i := range n {
		a.slab[i].Code = rlsv3.RateLimitResponse_OK
		a.ptrs[i] = &a.slab[i]
	}
	a.resp.Statuses = a.ptrs[:n]
	return &a.resp
}
