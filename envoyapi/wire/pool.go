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

// answerPool holds the answers free for reuse and those handed out: only an answer it handed
// out is ever reset, so an answer made anywhere else is never touched. Its zero value is an
// empty pool that reuses answers.
type answerPool struct {
	freeList sync.Pool // of *answer
	keep     bool      // reuse nothing: gRPC's binary log keeps the answers it logs
	mu       sync.Mutex
	out      map[*rlsv3.RateLimitResponse]*answer
}

// get returns an OK answer with n OK statuses.
func (p *answerPool) get(n int) *rlsv3.RateLimitResponse {
	a, _ := p.freeList.Get().(*answer)
	if a == nil {
		a = new(answer)
	}
	p.mu.Lock()
	if len(p.out) >= maxOut {
		clear(p.out) // forgotten: never taken, so never reset (see maxOut)
	}
	if p.out == nil {
		p.out = make(map[*rlsv3.RateLimitResponse]*answer, maxOut)
	}
	p.out[&a.resp] = a
	p.mu.Unlock()
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

// take reports whether v is an answer handed out by get, which is then no longer out: the
// caller gives it back with free once done with it. It never takes any other message.
func (p *answerPool) take(v *rlsv3.RateLimitResponse) (*answer, bool) {
	p.mu.Lock()
	a, ok := p.out[v]
	if ok {
		delete(p.out, v)
	}
	p.mu.Unlock()
	return a, ok
}

// free resets a taken answer and makes it free for reuse, unless gRPC traces requests or logs
// them in its binary log: both keep the message to print it later.
func (p *answerPool) free(a *answer) {
	if grpc.EnableTracing || p.keep {
		return
	}
	clear(a.slab) // zero values, as Reset leaves them (a message's state is set on first use)
	a.resp.Reset()
	p.freeList.Put(a)
}

// put gives v back if it is an answer handed out by get (see take and free).
func (p *answerPool) put(v *rlsv3.RateLimitResponse) {
	if a, ok := p.take(v); ok {
		p.free(a)
	}
}
