package config

// referenceNotes are what docs/configuration.md says of a key, for an operator, where that says
// more than the doc comment of the key's field; a key without a note is explained by its field's
// doc. One entry a key, in the order of Keys.
func referenceNotes() map[string]string {
	return map[string]string{
		"rules_etcd.endpoints":      "etcd v3 client URLs; when set, the rules come from `rules_etcd.keys` instead of `rules_file` (see [Rules from etcd](rules.md#rules-from-etcd))",
		"rules_etcd.check_interval": "how often the keys are read besides the watch, to catch etcd restored from a snapshot or recreated empty (its revision back), another cluster, a missed change; `0s` takes the default",
		"rules_etcd.username":       "etcd user, when etcd has authentication on",
		"rules_etcd.password":       "its password (never logged)",
		"rules_etcd.ca_file":        "CA that etcd's certificate must chain to (PEM), for `https://` endpoints",
		"rules_etcd.cert_file":      "client certificate for etcd (PEM), with `rules_etcd.key_file`, when etcd requires one",
		"rules_etcd.key_file":       "its private key (PEM)",
	}
}
