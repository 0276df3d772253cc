package redisstore

import (
	"strconv"

	"github.com/extauthz/extauthz/hotparam"
)

// Script returns the server-side script of a Store and, for ops, the KEYS and ARGV of its call in
// standalone mode with the given key prefix (Redis's clock; nonce names the call's anonymous
// concurrency leases), for tools that drive the script through another client, such as the
// client comparison benchmark in bench/goredis. The script is the one Eval sends; its SHA-1 is
// its EVALSHA name.
func Script(prefix string, ops []hotparam.RemoteOp, nonce uint64) (src string, keys, args []string) {
	s := &Store{cfg: Config{Prefix: prefix, Mode: ModeStandalone}}
	g := s.group(ops, s.keys(ops))[0]
	return scriptSource, g.keys, g.encode(ops, "", strconv.FormatUint(nonce, 36))
}
