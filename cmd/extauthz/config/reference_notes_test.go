package config

// referenceNotes are what docs/configuration.md says of a key, for an operator, where that says
// more than the doc comment of the key's field; a key without a note is explained by its field's
// doc. One entry a key, in the order of Keys.
func referenceNotes() map[string]string {
	return map[string]string{
		"store.redis.addrs":            "Redis for `cluster: true` rules; empty means no shared store (cluster rules are refused)",
		"store.redis.mode":             "`standalone` (one address) or `cluster`",
		"store.redis.username":         "Redis ACL user",
		"store.redis.password":         "Redis password (never logged)",
		"store.redis.tls":              "TLS to Redis",
		"store.redis.timeout":          "deadline of one check, all its round trips included",
		"store.redis.prefix":           "key prefix (no braces)",
		"store.redis.breaker_failures": "consecutive failed calls that suspend calls to Redis",
		"store.redis.breaker_cooldown": "time between probes while suspended",
		"store.redis.sample_interval":  "how often `INFO` is read from every Redis node to count evictions and restarts (`extauthz_redis_evicted_keys_total`, `extauthz_redis_restarts_total`)",
		"store.redis.blocked_cache":    "values a replica remembers as refused by Redis until they may pass, refusing them again without a call (never admits); negative: off",
		"rules_etcd.endpoints":         "etcd v3 client URLs; when set, the rules come from `rules_etcd.keys` instead of `rules_file` (see [Rules from etcd](rules.md#rules-from-etcd))",
		"rules_etcd.check_interval":    "how often the keys are read besides the watch, to catch etcd restored from a snapshot or recreated empty (its revision back), another cluster, a missed change; `0s` takes the default",
		"rules_etcd.username":          "etcd user, when etcd has authentication on",
		"rules_etcd.password":          "its password (never logged)",
		"rules_etcd.ca_file":           "CA that etcd's certificate must chain to (PEM), for `https://` endpoints",
		"rules_etcd.cert_file":         "client certificate for etcd (PEM), with `rules_etcd.key_file`, when etcd requires one",
		"rules_etcd.key_file":          "its private key (PEM)",
	}
}
