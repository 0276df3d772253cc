package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/extauthz/extauthz/rulestore"
)

// urlDecode decodes as Java's URLDecoder: %XX escapes and + for a space; a bad escape is an
// error, and bytes that are not UTF-8 become U+FFFD.
func urlDecode(s string) (string, error) {
	d, err := url.QueryUnescape(s)
	if err != nil {
		return "", err
	}
	return strings.ToValidUTF8(d, "\uFFFD"), nil
}

// maxReason bounds the reason of a refused push, in bytes: the dashboard shows it whole.
const maxReason = 8 << 10

func (s *Server) setParamFlowRules(r *request) (int, string) {
	return s.push(r, ParamFlow)
}

// setRules takes authority rules; a list of another type Sentinel knows (flow, degrade,
// system) is refused unless it is empty, since extauthz has no such rules to put in force.
func (s *Server) setRules(r *request) (int, string) {
	t := r.params["type"]
	if strings.EqualFold(t, "authority") {
		return s.push(r, Authority)
	}
	for _, e := range emptyTypes {
		if strings.EqualFold(e, t) {
			if data, err := urlDecode(r.params["data"]); err == nil && strings.TrimSpace(data) == "[]" {
				return http.StatusOK, msgSuccess
			}
			s.logPush(r, Kind(e), nil, "", errors.New("extauthz enforces no "+e+" rules"))
			return http.StatusBadRequest, "extauthz enforces no " + e + " rules: only hotspot (param-flow) and authority rules can be pushed"
		}
	}
	return http.StatusBadRequest, "invalid type"
}

// push checks a pushed list of kind k and hands it to the Pusher. The data parameter is decoded
// a second time, as Sentinel's handlers decode it (a + in a rule becomes a space, a % must
// start an escape). The list is read as a rules source's Sentinel rules are (paramIdx through
// param_names), and refused whole, with every problem, when any rule is. A push of a kind whose
// rules in force Sentinel's format cannot carry is refused: the dashboard would replace them
// with what it showed.
func (s *Server) push(r *request, k Kind) (int, string) {
	r.before = describe(&s.opts.Rules().Rules, k)
	data, ok := r.params["data"]
	if !ok || strings.TrimSpace(data) == "" {
		s.logPush(r, k, nil, "", errors.New("no data"))
		return http.StatusBadRequest, "Bad data"
	}
	data, err := urlDecode(data)
	if err != nil {
		s.logPush(r, k, nil, "", err)
		return http.StatusBadRequest, "decode rule data error: " + err.Error()
	}
	raw := json.RawMessage(strings.TrimSpace(data))
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || raw[0] != '[' {
		s.logPush(r, k, nil, "", errors.New("data is not a JSON list"))
		return http.StatusBadRequest, "rules refused: data must be a JSON list of Sentinel rules"
	}
	doc, _ := json.Marshal(map[string]json.RawMessage{string(k): raw})
	rules, err := rulestore.Parse("dashboard push", doc, s.opts.Parse)
	if err != nil {
		s.logPush(r, k, nil, "", err)
		return http.StatusBadRequest, reason("rules refused: " + err.Error())
	}
	if _, err := s.opts.Format.Sentinel(s.opts.Rules(), k); err != nil {
		s.logPush(r, k, &rules, "", err)
		return http.StatusBadRequest, reason("push refused: " + err.Error())
	}
	if s.opts.Pusher == nil {
		err := errors.New("pushes are not enabled")
		s.logPush(r, k, &rules, "", err)
		return http.StatusBadRequest, "push refused: " + err.Error()
	}
	where, err := s.opts.Pusher.Push(r.ctx, Push{Kind: k, Rules: raw, Caller: r.caller})
	s.logPush(r, k, &rules, where, err)
	if err != nil {
		return http.StatusBadRequest, reason("push refused: " + err.Error())
	}
	return http.StatusOK, msgSuccess
}

func reason(s string) string {
	if len(s) > maxReason {
		return strings.ToValidUTF8(s[:maxReason], "") + " ..."
	}
	return s
}

// logPush logs a push with who sent it, the rules of its kind before and after (each as
// rulestore describes it), where it went, and its outcome.
func (s *Server) logPush(r *request, k Kind, pushed *rulestore.Rules, where string, err error) {
	before := r.before
	if before == nil {
		before = describe(&s.opts.Rules().Rules, k)
	}
	fields := []zap.Field{zap.String("caller", r.caller), zap.String("command", r.name),
		zap.String("kind", kindWord(k)), zap.Strings("rules_before", before)}
	if pushed != nil {
		fields = append(fields, zap.Strings("rules_pushed", describe(pushed, k)))
		if len(pushed.Warnings) > 0 {
			fields = append(fields, zap.Strings("warnings", pushed.Warnings))
		}
	}
	if err != nil {
		s.opts.Log.Warn("dashboard push refused", append(fields, zap.Error(err))...)
		return
	}
	s.opts.Log.Info("dashboard push applied", append(fields, zap.String("to", where))...)
}

func describe(rules *rulestore.Rules, k Kind) []string {
	out := []string{}
	if k == Authority {
		for _, r := range rules.Authority {
			out = append(out, rulestore.DescribeAuthority(r))
		}
		return out
	}
	if k == ParamFlow {
		for _, r := range rules.ParamFlow {
			out = append(out, rulestore.DescribeParamFlow(r))
		}
	}
	return out
}

// sentinelDoc writes Sentinel's object form of members, in the order paramFlowRules,
// authorityRules, leaving out those not given.
func sentinelDoc(members map[Kind]json.RawMessage) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for _, k := range []Kind{ParamFlow, Authority} {
		v, ok := members[k]
		if !ok {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:", string(k))
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes()
}
