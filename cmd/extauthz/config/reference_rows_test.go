package config

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// formatDefault spells a default value as the config reference (docs/configuration.md) does.
func formatDefault(v reflect.Value) string {
	if d, ok := v.Interface().(time.Duration); ok {
		return "`" + formatDuration(d) + "`"
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return ""
		}
		return "`" + v.String() + "`"
	case reflect.Slice:
		if v.Len() == 0 {
			return "`[]`"
		}
	case reflect.Map:
		if v.Len() == 0 {
			return ""
		}
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d%u.unit == 0 {
			return fmt.Sprintf("%d%s", d/u.unit, u.name)
		}
	}
	return d.String()
}

// Every key has its row in the config reference, docs/configuration.md, with its variable and
// its default, and every row names a key that exists.
func TestConfigReferenceRows(t *testing.T) {
	f, err := os.Open(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := make(map[string][]string)
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			in = line == "# Configuration"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[strings.Trim(cells[0], "`")] = cells[1:]
	}
	if len(rows) == 0 {
		t.Fatal("no config reference table in docs/configuration.md")
	}
	def := reflect.ValueOf(Default())
	for _, k := range Keys() {
		cells, ok := rows[k.Name]
		if !ok {
			t.Errorf("docs/configuration.md: no row for %s", k.Name)
			continue
		}
		delete(rows, k.Name)
		if len(cells) < 3 {
			t.Errorf("docs/configuration.md row %s: want variable, default and meaning, got %q", k.Name, cells)
			continue
		}
		wantEnv := "`" + k.Env + "`"
		if k.Env == "" {
			wantEnv = "file only"
		}
		if cells[0] != wantEnv {
			t.Errorf("docs/configuration.md row %s: variable %q, want %q", k.Name, cells[0], wantEnv)
		}
		wantDef := formatDefault(def.FieldByIndex(k.index))
		if k.Name == "rules_file" {
			wantDef = "`" + DefaultRulesFile + "` if present"
		}
		if cells[1] != wantDef {
			t.Errorf("docs/configuration.md row %s: default %q, want %q", k.Name, cells[1], wantDef)
		}
		if cells[2] == "" {
			t.Errorf("docs/configuration.md row %s: no meaning", k.Name)
		}
	}
	for name := range rows {
		t.Errorf("docs/configuration.md: row for %s, which is no config key", name)
	}
}
