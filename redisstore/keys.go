package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/extauthz/extauthz/hotparam"
)

// maxRawTag is the longest value used as is in a key; longer values are hashed.
const maxRawTag = 128

// tag returns the hash tag of a value: the value itself when it is short and brace-free,
// else "#" and the hex SHA-256 of it (a raw value never starts with '#', so the two never meet).
func tag(value string) string {
	if value != "" && len(value) <= maxRawTag && value[0] != '#' && !strings.ContainsAny(value, "{}") {
		return value
	}
	sum := sha256.Sum256([]byte(value))
	return "#" + hex.EncodeToString(sum[:16])
}

// The letter naming an op's state type in its key is its kind's: c concurrency (a sorted set),
// B bucket and T throttle (packed numbers; the lower-case letters named the text layout of
// earlier versions, which this one neither reads nor overwrites).

// key returns the key of an op's state: prefix:{tag}:rule:kind. The tag is the value, so the
// state of every rule for one value lives on one cluster slot.
func key(prefix string, op *hotparam.RemoteOp) string {
	return stateKey(prefix, op, kindOf(op).letter())
}

// stateKey returns prefix:{tag}:ruleID:suffix for op.
func stateKey(prefix string, op *hotparam.RemoteOp, suffix string) string {
	t := tag(op.Value)
	var b strings.Builder
	b.Grow(len(prefix) + len(t) + len(op.RuleID) + len(suffix) + 6)
	b.WriteString(prefix)
	b.WriteString(":{")
	b.WriteString(t)
	b.WriteString("}:")
	b.WriteString(op.RuleID)
	b.WriteByte(':')
	b.WriteString(suffix)
	return b.String()
}

// refundKey returns the key of the record of what an op's lease consumed, for the refunds of a
// Refund rule that is not a concurrency rule: prefix:{tag}:ruleID:r:leaseName, in the slot of
// the op's state. It is "" when the op has no such record (no Refund, no LeaseID, or concurrency,
// whose leases are the members of its state, or a probe, which consumes nothing).
func refundKey(prefix string, op *hotparam.RemoteOp) string {
	if !op.Refund || kindOf(op) == kindConcurrency || op.LeaseID == "" || (op.Probe && !op.Release) {
		return ""
	}
	t, n := tag(op.Value), leaseName(op)
	var b strings.Builder
	b.Grow(len(prefix) + len(t) + len(op.RuleID) + len(n) + 9)
	b.WriteString(prefix)
	b.WriteString(":{")
	b.WriteString(t)
	b.WriteString("}:")
	b.WriteString(op.RuleID)
	b.WriteString(":r:")
	b.WriteString(n)
	return b.String()
}

// givenUpKey returns the key of the record of an Unhold op's value's throttle turns given up
// with later ones queued behind them: prefix:{tag}:ruleID:u, in the slot of the op's state.
func givenUpKey(prefix string, op *hotparam.RemoteOp) string {
	return stateKey(prefix, op, "u")
}

// slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag, or of the
// whole key when it has no non-empty tag, modulo 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) & 16383
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
