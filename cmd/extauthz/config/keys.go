package config

import (
	"reflect"
	"strings"
	"unicode"
)

// EnvPrefix starts the name of every environment variable the service reads.
const EnvPrefix = "EXTAUTHZ_"

// Key is one setting of Config: a leaf of the struct (a string, number, bool, duration, list
// or map).
type Key struct {
	// Name is the dotted key, as in the config file: "store.redis.timeout".
	Name string
	// Env is the environment variable that sets it, or "" for a setting that only the config
	// file can hold (a list or a map of structured sources).
	Env string
	// Type is the Go type of the field.
	Type  reflect.Type
	index []int // the field's path in Config, for reflect.Value.FieldByIndex
}

// Keys lists every setting of Config in field order. It is derived from the struct, so a new
// field is a new key, with its variable, without another list to update.
func Keys() []Key {
	var keys []Key
	walk(reflect.TypeOf(Config{}), "", nil, &keys)
	return keys
}

func walk(t reflect.Type, prefix string, index []int, keys *[]Key) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		idx := append(append([]int(nil), index...), i)
		if f.Type.Kind() == reflect.Struct && (f.Anonymous || opts == "inline") {
			walk(f.Type, prefix, idx, keys)
			continue
		}
		if name == "" {
			name = snakeCase(f.Name)
		}
		if f.Type.Kind() == reflect.Struct {
			walk(f.Type, prefix+name+".", idx, keys)
			continue
		}
		k := Key{Name: prefix + name, Type: f.Type, index: idx}
		if !structured(f.Type) {
			k.Env = EnvName(k.Name)
		}
		*keys = append(*keys, k)
	}
}

// structured reports whether a value of t is too structured for one environment variable: a
// map, or a list of anything but strings.
func structured(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Map:
		return true
	case reflect.Slice:
		return t.Elem().Kind() != reflect.String
	}
	return false
}

// EnvName is the environment variable for key: "grpc.keepalive.time" is
// EXTAUTHZ_GRPC_KEEPALIVE_TIME.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// snakeCase spells a Go field name as a key: CAFile is ca_file, BreakerFailures is
// breaker_failures, GRPCAddr is grpc_addr.
func snakeCase(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			acronymEnd := unicode.IsUpper(r[i-1]) && i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || acronymEnd {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
