package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/descriptors"
)

// Source is where Load reads settings from, in increasing precedence: the built-in defaults,
// File, the environment through Getenv, then Overrides.
type Source struct {
	// File is a YAML config file; "" means none.
	File string
	// Getenv reads an environment variable; nil means an empty environment. An empty
	// variable counts as unset.
	Getenv func(string) string
	// Overrides are settings given on the command line, applied last in order.
	Overrides []Override
	// Environ is the whole environment (KEY=value, as os.Environ), for the names Getenv is
	// not asked about: when set, Load and Parse report the misspelt and unknown EXTAUTHZ_*
	// variables CheckEnv finds. nil checks none.
	Environ []string
}

// Override is one setting given outside the file and the environment.
type Override struct {
	Key   string // "rules_file"
	Value string // as typed: durations with a unit, lists comma-separated
	From  string // named in errors: "--rules"
}

// Load builds the Config from src and validates it. A file that cannot be read or parsed is an
// error of its own; otherwise every problem is reported at once, as Errors: unknown keys (with
// the closest known key), values of the wrong type (a duration needs its unit: 15s, not 15),
// and every invalid setting Validate finds. The Config is returned even with Errors, with the
// default in place of each value that did not decode.
func Load(src Source) (Config, error) {
	cfg, from, errs, err := parse(src)
	if err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		var verrs Errors
		if errors.As(err, &verrs) {
			for _, fe := range verrs {
				fe.From = sourceOf(from, fe.Field)
			}
			errs = append(errs, verrs...)
		}
	}
	if len(errs) > 0 {
		return cfg, errs
	}
	return cfg, nil
}

// sourceOf is where the value of field came from: its own key's source, or for a part of a
// structured key (authz.origin[1].from) that key's, or for a problem a library found in a
// section (store.redis.addrs[1]) the key it names. "" for a built-in default.
func sourceOf(from map[string]string, field string) string {
	for f := field; f != ""; {
		if src, ok := from[f]; ok {
			return src
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return ""
}

// Parse is Load without Validate: it reports only what keeps a setting from being read (an
// unknown key, a value of the wrong type), for a caller that validates on its own.
func Parse(src Source) (Config, error) {
	cfg, _, errs, err := parse(src)
	if err != nil {
		return cfg, err
	}
	if len(errs) > 0 {
		return cfg, errs
	}
	return cfg, nil
}

// parse reads src into a Config. It returns where each key's value came from, the problems of
// single settings, and an error for a file that cannot be read at all.
func parse(src Source) (Config, map[string]string, Errors, error) {
	cfg := Default()
	v := viper.New()
	from := make(map[string]string) // key -> where its value came from
	var raw []byte
	if src.File != "" {
		data, err := os.ReadFile(src.File)
		if err != nil {
			return cfg, nil, nil, fmt.Errorf("cannot read config: %w", err)
		}
		raw = data
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return cfg, nil, nil, fmt.Errorf("config %s: %w", src.File, err)
		}
	}

	keys := Keys()
	var errs Errors
	if src.File != "" {
		errs = append(errs, unknownKeys(v, keys, src.File)...)
		for _, k := range keys {
			if v.InConfig(k.Name) {
				from[k.Name] = src.File
			}
		}
	}
	if src.Getenv != nil {
		for _, k := range keys {
			if k.Env == "" {
				continue
			}
			if val := src.Getenv(k.Env); val != "" {
				v.Set(k.Name, val)
				from[k.Name] = k.Env
			}
		}
	}
	if src.Environ != nil {
		envErrs, _ := CheckEnv(src.Environ)
		errs = append(errs, envErrs...)
	}
	byName := make(map[string]Key, len(keys))
	for _, k := range keys {
		byName[k.Name] = k
	}
	for _, o := range src.Overrides {
		if _, ok := byName[o.Key]; !ok {
			errs = append(errs, &FieldError{Field: o.Key, Reason: "unknown key", From: o.From})
			continue
		}
		v.Set(o.Key, o.Value)
		from[o.Key] = o.From
	}

	root := reflect.ValueOf(&cfg).Elem()
	for _, k := range keys {
		origin, set := from[k.Name]
		if !set {
			continue
		}
		val := v.Get(k.Name)
		if val == nil {
			continue // an empty value in the file: the default stays
		}
		// Environment variables and flags are text; the file's values are typed.
		weak := origin != src.File
		unused, err := decode(val, root.FieldByIndex(k.index), weak)
		if err != nil {
			errs = append(errs, &FieldError{Field: k.Name, Reason: reason(err, k, val), From: origin})
		}
		for _, path := range unused {
			field, r := unusedKey(k, path)
			errs = append(errs, &FieldError{Field: field, Reason: r, From: origin})
		}
	}

	if raw != nil {
		if err := restoreParamCase(&cfg, raw); err != nil {
			errs = append(errs, &FieldError{Field: "authz.params", Reason: err.Error(), From: src.File})
		}
	}
	if _, named := from["rules_file"]; !named && cfg.RulesFile == "" {
		cfg.RulesFile = DefaultRulesFile
		cfg.RulesOptional = true
	}
	return cfg, from, errs, nil
}

// unknownKeys reports every key of the file that Config does not have, with the closest known
// key, and every section written as a single value.
func unknownKeys(v *viper.Viper, keys []Key, file string) Errors {
	known := make(map[string]bool, len(keys))
	names := make([]string, 0, len(keys))
	sections := make(map[string][]string) // section -> its keys' last parts
	var structuredKeys []string
	for _, k := range keys {
		known[k.Name] = true
		names = append(names, k.Name)
		if k.Env == "" {
			structuredKeys = append(structuredKeys, k.Name+".")
		}
		parts := strings.Split(k.Name, ".")
		for i := 1; i < len(parts); i++ {
			sec := strings.Join(parts[:i], ".")
			sections[sec] = append(sections[sec], parts[i])
		}
	}
	var errs Errors
	all := v.AllKeys()
	sort.Strings(all)
outer:
	for _, name := range all {
		if known[name] {
			continue
		}
		for _, p := range structuredKeys {
			if strings.HasPrefix(name, p) {
				continue outer // checked when the map is decoded
			}
		}
		if sub, ok := sections[name]; ok {
			if v.Get(name) == nil {
				continue // an empty section
			}
			errs = append(errs, &FieldError{Field: name, From: file,
				Reason: fmt.Sprintf("is a section (%s), not a single value", strings.Join(unique(sub), ", "))})
			continue
		}
		r := "unknown key" + suggest(name, names)
		if !strings.Contains(r, "did you mean") {
			if i := strings.LastIndexByte(name, '.'); i > 0 {
				if sub, ok := sections[name[:i]]; ok {
					r += fmt.Sprintf(" (keys of %s: %s)", name[:i], strings.Join(unique(sub), ", "))
				}
			}
		}
		errs = append(errs, &FieldError{Field: name, Reason: r, From: file})
	}
	return errs
}

func unique(s []string) []string {
	seen := make(map[string]bool, len(s))
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

var durationType = reflect.TypeOf(time.Duration(0))

// decode decodes val into the field dst. weak allows text for numbers and booleans. It returns
// the paths of the keys inside val that no field takes ("[0].frm" in a list of sources,
// "[user].nam" in a map of them), for unusedKey to word.
func decode(val any, dst reflect.Value, weak bool) ([]string, error) {
	var md mapstructure.Metadata
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:           dst.Addr().Interface(),
		TagName:          "json",
		SquashTagOption:  "inline",
		Metadata:         &md,
		ZeroFields:       true,
		WeaklyTypedInput: weak,
		MatchName:        matchName,
		DecodeHook:       mapstructure.ComposeDecodeHookFunc(durationHook, splitHook),
	})
	if err != nil {
		return nil, err
	}
	if err := dec.Decode(val); err != nil {
		return nil, err
	}
	sort.Strings(md.Unused)
	return md.Unused, nil
}

// unusedKey words a key inside the structured value of k that no field takes: path is as the
// decoder reports it ("[0].frm"). It returns the key in the file's terms
// ("authz.origin[0].frm", "authz.params.user.nam") and the reason, with the closest known
// key or the list of known keys.
func unusedKey(k Key, path string) (field, why string) {
	field, t := k.Name, k.Type
	for path != "" {
		switch path[0] {
		case '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return field + path, "unknown key"
			}
			elem := path[1:end]
			path = path[end+1:]
			if t.Kind() == reflect.Map {
				field += "." + elem
			} else {
				field += "[" + elem + "]"
			}
			t = t.Elem()
		case '.':
			path = path[1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			name := path[:end]
			path = path[end:]
			known := jsonNames(t)
			if path == "" { // the unknown key itself
				why = "unknown key" + suggest(name, known)
				if !strings.Contains(why, "did you mean") && len(known) > 0 {
					why += " (keys: " + strings.Join(known, ", ") + ")"
				}
				return field + "." + name, why
			}
			field += "." + name
			if f, ok := fieldByJSONName(t, name); ok {
				t = f.Type
			}
		}
	}
	return field, "unknown key"
}

// jsonNames are the keys a struct type takes, in field order; none for another type.
func jsonNames(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = snakeCase(f.Name)
		}
		names = append(names, name)
	}
	return names
}

// fieldByJSONName is the field of struct type t that key name sets.
func fieldByJSONName(t reflect.Type, name string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if n == "" {
			n = snakeCase(f.Name)
		}
		if n == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// matchName matches a file key to a field with no json name: ca_file is CAFile.
func matchName(key, field string) bool {
	return strings.EqualFold(strings.ReplaceAll(key, "_", ""), strings.ReplaceAll(field, "_", ""))
}

// valueError is a value a hook refused, with the reason worded for the user.
type valueError struct{ reason string }

func (e *valueError) Error() string { return e.reason }

// durationHook reads a duration from text with its unit ("15s"); a bare number is refused,
// since it would silently mean nanoseconds.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	switch d := data.(type) {
	case time.Duration:
		return d, nil
	case string:
		dur, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, &valueError{fmt.Sprintf("%q is not a duration: write a number with its unit, like 15s, 500ms or 2h", d)}
		}
		return dur, nil
	case int, int64, int32, uint, uint64, uint32, float64, float32:
		return nil, &valueError{fmt.Sprintf("%v has no unit: write a duration with its unit, like %vs or %vms", d, d, d)}
	}
	return nil, &valueError{fmt.Sprintf("want a duration like 15s, got %v", data)}
}

// splitHook turns a comma-separated string (an environment variable, a flag) into a list.
func splitHook(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || to.Kind() != reflect.Slice {
		return data, nil
	}
	if strings.TrimSpace(s) == "" {
		return []string{}, nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts, nil
}

// reason words a decoding error of key k, whose value was val.
func reason(err error, k Key, val any) string {
	var ve *valueError
	if errors.As(err, &ve) {
		return ve.reason
	}
	shown := fmt.Sprintf("%v", val)
	if s, ok := val.(string); ok {
		shown = fmt.Sprintf("%q", s)
	}
	if strings.Contains(k.Name, "password") || k.Name == "sensitive.key" {
		shown = "(hidden)"
	}
	switch k.Type.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "want a whole number, got " + shown
	case reflect.Bool:
		return "want true or false, got " + shown
	case reflect.Float64:
		return "want a number, got " + shown
	case reflect.String:
		return "want a single value, got " + shown
	case reflect.Slice:
		if k.Type.Elem().Kind() == reflect.String {
			return "want a list of values, got " + shown
		}
	}
	return oneLine(err)
}

// oneLine puts the decoder's multi-line error on one line.
func oneLine(err error) string {
	msg := strings.TrimPrefix(err.Error(), "decoding failed due to the following error(s):")
	var parts []string
	for _, line := range strings.Split(msg, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, "; ")
}

// restoreParamCase gives the names under authz.params back the case they have in the file:
// the config reader folds keys to lower case, but param names are matched against rules
// exactly.
func restoreParamCase(cfg *Config, raw []byte) error {
	var doc struct {
		Authz struct {
			Params map[string]any `json:"params"`
		} `json:"authz"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil // the reader parsed it; a shape it cannot hold was reported while decoding
	}
	if len(doc.Authz.Params) == 0 || len(cfg.Mapping.Authz.Params) == 0 {
		return nil
	}
	original := make(map[string]string, len(doc.Authz.Params))
	for name := range doc.Authz.Params {
		lower := strings.ToLower(name)
		if other, dup := original[lower]; dup {
			a, b := other, name
			if a > b {
				a, b = b, a
			}
			return fmt.Errorf("%q and %q differ only in case", a, b)
		}
		original[lower] = name
	}
	params := make(map[string]descriptors.Source, len(cfg.Mapping.Authz.Params))
	for name, src := range cfg.Mapping.Authz.Params {
		if orig, ok := original[name]; ok {
			name = orig
		}
		params[name] = src
	}
	cfg.Mapping.Authz.Params = params
	return nil
}
