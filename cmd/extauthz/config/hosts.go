package config

// validHostName reports whether s is a DNS name as a Host header carries it: dot-separated
// labels of letters, digits and hyphens (1 to 63 bytes, no hyphen at either end), 253 bytes
// at most, no port.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	label := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if label == 0 || s[i-1] == '-' {
				return false
			}
			label = 0
		case c == '-':
			if label == 0 {
				return false
			}
			label++
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			label++
		default:
			return false
		}
		if label > 63 {
			return false
		}
	}
	return label > 0 && s[len(s)-1] != '-'
}
