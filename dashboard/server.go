package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/rulestore"
)

// Pusher puts a pushed list of rules of one kind in force, in place of the rules of that kind:
// written through to the rules' source (Etcd), or in memory (Memory). It returns where the
// rules went, for the log.
type Pusher interface {
	Push(ctx context.Context, p Push) (where string, err error)
}

// Push is one list of rules pushed from the dashboard, already checked on its own.
type Push struct {
	Kind   Kind
	Rules  json.RawMessage // a JSON list of Sentinel rules of Kind
	Caller string          // the dashboard's address
}

// Options configure a Server.
type Options struct {
	Rules   func() *rulestore.Set            // the rules in force
	Traffic func(time.Time) metrics.Snapshot // the per-second decision counts
	Format  Format
	Parse   rulestore.ParseOptions // how pushed rules are read, as the rules source's are
	Pusher  Pusher                 // nil refuses every push
	// Allowed are the callers answered; others get 403.
	Allowed []netip.Prefix
	Now     func() time.Time // nil means time.Now
	Log     *zap.Logger      // nil means none
}

// Server answers the commands of a Sentinel dashboard as Sentinel's simple-http command center
// does: the command is the request's path, its parameters the query string and, for a POST,
// the form body; a value is trimmed, and one shorter than a byte, or a parameter shorter than
// three, is dropped. Success is 200 with the result as text; a failure is 400 with the reason,
// an unknown command 400 "Unknown command `name`". It is safe for concurrent use.
type Server struct {
	opts     Options
	commands map[string]command

	mu        sync.Mutex // guards the fields below
	refusedAt time.Time  // the last refused caller logged
	refused   int        // refused callers not logged since
}

type command struct {
	desc string
	run  func(s *Server, r *request) (int, string)
}

// request is one command: its parameters and its caller.
type request struct {
	ctx    context.Context
	name   string
	params map[string]string
	caller string
	before []string // a push's rules of its kind before it, as logged
}

// New returns a Server.
func New(opts Options) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	return &Server{opts: opts, commands: map[string]command{
		"version":           {"get sentinel version", (*Server).version},
		"api":               {"get all available command handlers", (*Server).api},
		"getRules":          {"get all active rules by type, request param: type={ruleType}", (*Server).getRules},
		"setRules":          {"modify the rules, accept param: type={ruleType}&data={ruleJson}", (*Server).setRules},
		"getParamFlowRules": {"Get all parameter flow rules", (*Server).getParamFlowRules},
		"setParamFlowRules": {"Set parameter flow rules, while previous rules will be replaced.", (*Server).setParamFlowRules},
		"jsonTree":          {"get tree node VO start from root node", (*Server).jsonTree},
		"clusterNode":       {"get all clusterNode VO, use type=notZero to ignore those nodes with totalRequest <=0", (*Server).clusterNode},
		"metric":            {"get and aggregate metrics, accept param: startTime={startTime}&endTime={endTime}&maxLines={maxLines}&identify={resourceName}", (*Server).metric},
	}}
}

// The answers Sentinel's command center gives outside any command.
const (
	msgInvalidCommand = "Invalid command"
	msgServerError    = "Command server error"
	msgSuccess        = "success"
)

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	caller := callerAddr(r.RemoteAddr)
	if !s.allowed(caller) {
		s.logRefused(caller, r.URL.Path)
		write(w, http.StatusForbidden, "Forbidden: "+caller.String()+" is not an allowed dashboard")
		return
	}
	req := &request{ctx: r.Context(), name: strings.TrimPrefix(r.URL.EscapedPath(), "/"), params: map[string]string{}, caller: caller.String()}
	if err := sentinelParams(r.URL.RawQuery, req.params); err != nil {
		write(w, http.StatusInternalServerError, msgServerError)
		return
	}
	if r.Method == http.MethodPost {
		if code, msg := s.readForm(w, r, req); code != 0 {
			write(w, code, msg)
			return
		}
	}
	if req.name == "" {
		write(w, http.StatusBadRequest, msgInvalidCommand)
		return
	}
	c, ok := s.commands[req.name]
	if !ok {
		write(w, http.StatusBadRequest, "Unknown command `"+req.name+"`")
		return
	}
	code, body := c.run(s, req)
	write(w, code, body)
}

// readForm adds a POST's form body to req's parameters, as Sentinel reads it: a Content-Type
// other than a form is 415, a body without a Content-Length 411. It returns 0 when the body
// was read, else the status and message to answer.
func (s *Server) readForm(w http.ResponseWriter, r *http.Request, req *request) (int, string) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.Contains(strings.ToLower(ct), "application/x-www-form-urlencoded") {
		return http.StatusUnsupportedMediaType, "Only form-encoded post request is supported"
	}
	if r.ContentLength < 1 {
		return http.StatusLengthRequired, "No legal Content-Length"
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", MaxBody)
		}
		return http.StatusBadRequest, "cannot read the request body: " + err.Error()
	}
	if err := sentinelParams(string(body), req.params); err != nil {
		return http.StatusInternalServerError, msgServerError
	}
	return 0, ""
}

// sentinelParams adds the parameters of a query string to params as Sentinel's command center
// reads them: an anchor cut off, each of key=value trimmed and decoded (a later one wins), one
// shorter than three bytes or with an empty key or value dropped. A bad escape is an error.
func sentinelParams(q string, params map[string]string) error {
	if i := strings.IndexByte(q, '#'); i >= 0 {
		q = q[:i]
	}
	for part := range strings.SplitSeq(q, "&") {
		if len(part) < 3 {
			continue
		}
		i := strings.IndexByte(part, '=')
		if i <= 0 || i >= len(part)-1 {
			continue
		}
		k, err := decodeParam(strings.TrimSpace(part[:i]))
		if err != nil {
			return err
		}
		v, err := decodeParam(strings.TrimSpace(part[i+1:]))
		if err != nil {
			return err
		}
		params[k] = v
	}
	return nil
}

// decodeParam decodes a form value as Java's URLDecoder does: %XX escapes and + for a space.
func decodeParam(s string) (string, error) { return urlDecode(s) }

func write(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}

// callerAddr is the address of a request's peer.
func callerAddr(remote string) netip.Addr {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap().WithZone("")
}

func (s *Server) allowed(a netip.Addr) bool {
	return a.IsValid() && slices.ContainsFunc(s.opts.Allowed, func(p netip.Prefix) bool { return p.Contains(a) })
}

// logRefused logs a refused caller, at most one line a second (with the count of the others).
func (s *Server) logRefused(a netip.Addr, path string) {
	now := s.opts.Now()
	s.mu.Lock()
	if now.Sub(s.refusedAt) < time.Second {
		s.refused++
		s.mu.Unlock()
		return
	}
	n := s.refused
	s.refusedAt, s.refused = now, 0
	s.mu.Unlock()
	s.opts.Log.Warn("dashboard command refused: the caller is not an allowed dashboard",
		zap.String("caller", a.String()), zap.String("command", strings.TrimPrefix(path, "/")),
		zap.Int("refused_since_last_line", n))
}

func (s *Server) version(*request) (int, string) { return http.StatusOK, Version }

func (s *Server) api(*request) (int, string) {
	type entry struct {
		Desc string `json:"desc"`
		URL  string `json:"url"`
	}
	names := make([]string, 0, len(s.commands))
	for n := range s.commands {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]entry, 0, len(names))
	for _, n := range names {
		out = append(out, entry{Desc: s.commands[n].desc, URL: "/" + n})
	}
	return jsonAnswer(out)
}

func jsonAnswer(v any) (int, string) {
	b, err := json.Marshal(v)
	if err != nil {
		return http.StatusInternalServerError, msgServerError
	}
	return http.StatusOK, string(b)
}

// The rule types of getRules and setRules that extauthz has no rules of.
var emptyTypes = []string{"flow", "degrade", "system"}

func (s *Server) getRules(r *request) (int, string) {
	t := r.params["type"]
	switch {
	case strings.EqualFold(t, "authority"):
		list, _ := s.opts.Format.Sentinel(s.opts.Rules(), Authority)
		return jsonAnswer(list)
	case slices.ContainsFunc(emptyTypes, func(e string) bool { return strings.EqualFold(e, t) }):
		return http.StatusOK, "[]"
	}
	return http.StatusBadRequest, "invalid type"
}

func (s *Server) getParamFlowRules(*request) (int, string) {
	list, _ := s.opts.Format.Sentinel(s.opts.Rules(), ParamFlow)
	return jsonAnswer(list)
}

func (s *Server) jsonTree(*request) (int, string) {
	return jsonAnswer(tree(s.opts.Rules(), s.opts.Traffic(s.opts.Now())))
}

func (s *Server) clusterNode(r *request) (int, string) {
	all := nodes(s.opts.Rules(), s.opts.Traffic(s.opts.Now()))
	if strings.EqualFold(r.params["type"], "notZero") {
		all = slices.DeleteFunc(all, func(n nodeJSON) bool { return n.OneMinuteTotal <= 0 })
	}
	return jsonAnswer(all)
}

// metric answers as Sentinel's metric command: no startTime is an empty success, a startTime
// or endTime that is no number the command center's error, and maxLines (default 6000) at
// most 12000.
func (s *Server) metric(r *request) (int, string) {
	start, ok := r.params["startTime"]
	if !ok || strings.TrimSpace(start) == "" {
		return http.StatusOK, ""
	}
	q := metricQuery{MaxLines: 6000, Identity: r.params["identity"]}
	var err error
	if q.Start, err = strconv.ParseInt(start, 10, 64); err != nil {
		return http.StatusInternalServerError, msgServerError
	}
	if end, ok := r.params["endTime"]; ok && strings.TrimSpace(end) != "" {
		if q.End, err = strconv.ParseInt(end, 10, 64); err != nil {
			return http.StatusInternalServerError, msgServerError
		}
		q.HasEnd = true
	} else if ml, ok := r.params["maxLines"]; ok && strings.TrimSpace(ml) != "" {
		if q.MaxLines, err = strconv.Atoi(ml); err != nil {
			return http.StatusBadRequest, "Error when retrieving metrics"
		}
	}
	q.MaxLines = max(0, min(q.MaxLines, 12000))
	return http.StatusOK, metricLines(s.opts.Traffic(s.opts.Now()), q)
}
