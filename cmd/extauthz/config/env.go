package config

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// serviceLink matches the variables Kubernetes puts in a pod for each Service of its namespace
// (enableServiceLinks, on by default): for a Service named extauthz, EXTAUTHZ_SERVICE_HOST,
// EXTAUTHZ_SERVICE_PORT[_NAME], EXTAUTHZ_PORT and EXTAUTHZ_PORT_9001_TCP[_PROTO|_PORT|_ADDR];
// for extauthz-admin, the same under EXTAUTHZ_ADMIN_. No key's variable has that form.
var serviceLink = regexp.MustCompile(`^EXTAUTHZ(_[A-Z0-9_]+)?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// CheckEnv looks at every variable of environ (KEY=value, as os.Environ) named with EnvPrefix,
// in any case, that no key has. It is an error, with where it comes from, when the name is
// close to a key's variable (the did-you-mean of unknown file keys: EXTAUTHZ_DECISION_DRYRUN),
// or under a section of the config (EXTAUTHZ_STORE_REDIS_...; the section's variables are
// listed), or a key only the config file can hold. Kubernetes' service links
// (EXTAUTHZ_SERVICE_HOST, EXTAUTHZ_PORT_9001_TCP, ...) are passed over. Any other name is
// returned in ignored, sorted, for the caller to warn of: other tools name variables of their
// own under the same prefix, and the service does not read them.
func CheckEnv(environ []string) (errs Errors, ignored []string) {
	keys := Keys()
	known := make(map[string]bool, len(keys))
	fileOnly := make(map[string]string) // variable -> key, for keys with no variable
	names := make([]string, 0, len(keys))
	sections := make(map[string]*envSection) // by the prefix of its variables
	for _, k := range keys {
		if k.Env == "" {
			fileOnly[EnvName(k.Name)] = k.Name
			continue
		}
		known[k.Env] = true
		names = append(names, k.Env)
		parts := strings.Split(k.Name, ".")
		for i := 1; i < len(parts); i++ {
			sec := strings.Join(parts[:i], ".")
			p := EnvName(sec) + "_"
			if sections[p] == nil {
				sections[p] = &envSection{name: sec}
			}
			sections[p].vars = append(sections[p].vars, k.Env)
		}
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if known[name] || !strings.HasPrefix(strings.ToUpper(name), EnvPrefix) || serviceLink.MatchString(name) {
			continue
		}
		unknown = append(unknown, name)
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		if key, ok := fileOnly[name]; ok {
			errs = append(errs, envError(name, key+" is set only in the config file"))
			continue
		}
		if s := suggest(name, names); s != "" {
			errs = append(errs, envError(name, "unknown variable"+s))
			continue
		}
		if sec := deepest(name, sections); sec != nil {
			errs = append(errs, envError(name, fmt.Sprintf("unknown variable (variables of %s: %s)", sec.name, strings.Join(sec.vars, ", "))))
			continue
		}
		ignored = append(ignored, name)
	}
	return errs, ignored
}

// envSection is a section of the config ("store.redis") and its keys' variables.
type envSection struct {
	name string
	vars []string
}

// deepest is the deepest section whose variables' prefix starts name, or nil.
func deepest(name string, sections map[string]*envSection) *envSection {
	best := ""
	for p := range sections {
		if strings.HasPrefix(name, p) && len(p) > len(best) {
			best = p
		}
	}
	return sections[best]
}

func envError(name, reason string) *FieldError {
	return &FieldError{Field: name, Reason: reason, From: "environment"}
}
