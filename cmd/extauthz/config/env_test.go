package config

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// Variables named with EnvPrefix that no key has: a misspelt one (close to a key) or one
// under a section of the config is an error naming the closest variable or the section's; a
// key only the file can hold says so; Kubernetes' service links for a Service named extauthz
// pass unseen; any other is returned to be warned of.
func TestCheckEnv(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin",
		"EXTAUTHZ_GRPC_ADDR=:9001",
		"EXTAUTHZ_DECISION_DRYRUN=true",
		"EXTAUTHZ_SENSITIVE_PARAM=card",
		"EXTAUTHZ_STORE_REDIS_REPLICA=3",
		"EXTAUTHZ_AUTHZ_ORIGIN=x",
		"extauthz_log_level=debug",
		"EXTAUTHZ_SERVICE_HOST=10.0.0.1",
		"EXTAUTHZ_SERVICE_PORT=9001",
		"EXTAUTHZ_SERVICE_PORT_GRPC=9001",
		"EXTAUTHZ_PORT=tcp://10.0.0.1:9001",
		"EXTAUTHZ_PORT_9001_TCP=tcp://10.0.0.1:9001",
		"EXTAUTHZ_PORT_9001_TCP_PROTO=tcp",
		"EXTAUTHZ_PORT_9001_TCP_PORT=9001",
		"EXTAUTHZ_PORT_9001_TCP_ADDR=10.0.0.1",
		"EXTAUTHZ_ADMIN_SERVICE_HOST=10.0.0.2",
		"EXTAUTHZ_REQUIRE_ENVOY=1",
		"EXTAUTHZ_=",
		"NOEQUALS",
	}
	errs, ignored := CheckEnv(environ)
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want := []string{
		`EXTAUTHZ_AUTHZ_ORIGIN: authz.origin is set only in the config file (from environment)`,
		`EXTAUTHZ_DECISION_DRYRUN: unknown variable (did you mean "EXTAUTHZ_DECISION_DRY_RUN"?) (from environment)`,
		`EXTAUTHZ_SENSITIVE_PARAM: unknown variable (did you mean "EXTAUTHZ_SENSITIVE_PARAMS"?) (from environment)`,
		`EXTAUTHZ_STORE_REDIS_REPLICA: unknown variable (did you mean "EXTAUTHZ_STORE_REDIS_REPLICAS"?) (from environment)`,
		`extauthz_log_level: unknown variable (did you mean "EXTAUTHZ_LOG_LEVEL"?) (from environment)`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors\n got %q\nwant %q", got, want)
	}
	if want := []string{"EXTAUTHZ_", "EXTAUTHZ_REQUIRE_ENVOY"}; !reflect.DeepEqual(ignored, want) {
		t.Errorf("ignored %q, want %q", ignored, want)
	}
}

// A variable under a section that is not close to any key lists the section's variables.
func TestCheckEnvSection(t *testing.T) {
	errs, _ := CheckEnv([]string{"EXTAUTHZ_TRACING_COLLECTOR_URL=x"})
	if len(errs) != 1 || !strings.Contains(errs[0].Reason, "unknown variable (variables of tracing: EXTAUTHZ_TRACING_ENDPOINT, EXTAUTHZ_TRACING_INSECURE, EXTAUTHZ_TRACING_SAMPLE_RATIO)") {
		t.Errorf("errors %v, want one listing the variables of tracing", errs)
	}
}

// Load reports unknown variables with the other problems; without Environ it checks none.
func TestLoadUnknownEnv(t *testing.T) {
	environ := []string{"EXTAUTHZ_DECISION_DRYRUN=true", "EXTAUTHZ_LOG_LEVEL=loud"}
	_, err := Load(Source{Getenv: lookup(environ), Environ: environ})
	if err == nil || !strings.Contains(err.Error(), "EXTAUTHZ_DECISION_DRYRUN") || !strings.Contains(err.Error(), "log.level") {
		t.Errorf("Load = %v, want the unknown variable and the bad level", err)
	}
	if _, err := Load(Source{Getenv: lookup(environ[:1])}); err != nil {
		t.Errorf("Load without Environ = %v, want nil", err)
	}
}

// No key's variable looks like a Kubernetes service link, which CheckEnv passes unseen.
func TestNoKeyLooksLikeAServiceLink(t *testing.T) {
	for _, k := range Keys() {
		if k.Env != "" && serviceLink.MatchString(k.Env) {
			t.Errorf("%s (%s) looks like a service link", k.Env, k.Name)
		}
	}
	if !regexp.MustCompile(`^[A-Z0-9_]+$`).MatchString(EnvName("grpc.keepalive.min_time")) {
		t.Error("an environment name is not upper case")
	}
}

func lookup(environ []string) func(string) string {
	m := make(map[string]string)
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}
