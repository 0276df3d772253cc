package hotparam

// Keyer is implemented by a rule's Matcher that also says under which key a value is limited:
// values with one key share one state and one exception item (Items are looked up by key). A
// rule importing Sentinel's typed exception items uses it so that 007 and 7 are one number.
// Key must be safe for concurrent use and cheap: it runs for every value the rule matches.
type Keyer interface {
	Key(value string) string
}

// keyOf is the key value is limited under by a rule whose Matcher is m (not nil).
func keyOf(m Matcher, value string) string {
	if k, ok := m.(Keyer); ok {
		return k.Key(value)
	}
	return value
}
