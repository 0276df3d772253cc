package config

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The config reference, docs/configuration.md, is generated from Config: its keys, variables and
// defaults by reflection (Keys, Default), and each key's meaning from the doc comment of its
// field, read from the source of the package that declares the field: a field's doc is written
// for the operator who sets the key. The prose before the table is testdata/reference_intro.md.
//
// Regenerate it with:
//
//	go test ./cmd/extauthz/config -run TestConfigReference -update

var update = flag.Bool("update", false, "write docs/configuration.md from Config")

// referenceFile is the generated reference, from this package's directory.
const referenceFile = "../../../docs/configuration.md"

// referenceIntro opens the reference, before the table of keys.
const referenceIntro = "testdata/reference_intro.md"

// regenerate is the command that writes referenceFile, from the repository root.
const regenerate = "go test ./cmd/extauthz/config -run TestConfigReference -update"

// modulePath is the module whose packages' sources the field docs are read from.
const modulePath = "github.com/extauthz/extauthz"

// TestConfigReference fails when docs/configuration.md is not what Config generates.
func TestConfigReference(t *testing.T) {
	got, err := generateReference()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(referenceFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatalf("%v; generate it: %s", err, regenerate)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/configuration.md is stale (Config or a field's doc changed); regenerate it from the repository root:\n\t%s", regenerate)
	}
}

// TestEveryKeyIsExplained: every key's field has a doc comment.
func TestEveryKeyIsExplained(t *testing.T) {
	docs := newFieldDocs("../../..")
	for _, k := range Keys() {
		doc, err := docs.of(k)
		if err != nil {
			t.Fatal(err)
		}
		if doc == "" {
			f := k.field()
			t.Errorf("%s: no doc comment on its field (%s.%s)", k.Name, f.parent, f.Name)
		}
	}
}

// generateReference renders docs/configuration.md.
func generateReference() ([]byte, error) {
	docs := newFieldDocs("../../..")
	def := reflect.ValueOf(Default())
	var b bytes.Buffer
	b.WriteString("<!-- Generated from the Config struct of cmd/extauthz/config and its field docs. DO NOT EDIT.\n")
	b.WriteString("     Regenerate from the repository root: " + regenerate + " -->\n\n")
	intro, err := os.ReadFile(referenceIntro)
	if err != nil {
		return nil, err
	}
	b.Write(intro)
	b.WriteString("\n| key | variable | default | meaning |\n| --- | --- | --- | --- |\n")
	for _, k := range Keys() {
		doc, err := docs.of(k)
		if err != nil {
			return nil, err
		}
		meaning := sentence(doc, k.field().Name)
		env := "`" + k.Env + "`"
		if k.Env == "" {
			env = "file only"
		}
		dflt := formatDefault(def.FieldByIndex(k.index))
		if k.Name == "rules_file" {
			dflt = "`" + DefaultRulesFile + "` if present"
		}
		row := fmt.Sprintf("| `%s` | %s | %s | %s |\n", k.Name, env, dflt, cell(meaning))
		b.WriteString(strings.ReplaceAll(row, "|  |", "| |"))
	}
	return b.Bytes(), nil
}

// sentence turns a field's doc into a meaning: "Timeout bounds one Eval" is "bounds one Eval",
// "Addr is the listener's address" is "the listener's address".
func sentence(doc, field string) string {
	if rest, ok := strings.CutPrefix(doc, field+" "); ok {
		doc = rest
		for _, verb := range []string{"is, ", "are ", "is "} {
			if rest, ok := strings.CutPrefix(doc, verb); ok {
				doc = rest
				break
			}
		}
	}
	return strings.TrimSuffix(doc, ".")
}

// cell puts text on one line of a Markdown table cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// keyField is the struct field a key is read into, with the type that declares it.
type keyField struct {
	reflect.StructField
	parent reflect.Type
}

// field is the struct field k is read into.
func (k Key) field() keyField {
	t := reflect.TypeOf(Config{})
	for _, i := range k.index[:len(k.index)-1] {
		t = t.Field(i).Type
	}
	return keyField{t.Field(k.index[len(k.index)-1]), t}
}

// fieldDocs reads the doc comments of struct fields from the module's source, one package
// directory at a time. It is not safe for concurrent use.
type fieldDocs struct {
	root string                       // the module's root directory
	pkgs map[string]map[string]string // package path -> "Type.Field" -> doc
}

func newFieldDocs(root string) *fieldDocs {
	return &fieldDocs{root: root, pkgs: make(map[string]map[string]string)}
}

// of is the doc comment of k's field (its line comment when it has no doc), "" when it has none.
func (d *fieldDocs) of(k Key) (string, error) {
	f := k.field()
	pkg := f.parent.PkgPath()
	docs, ok := d.pkgs[pkg]
	if !ok {
		var err error
		if docs, err = d.parse(pkg); err != nil {
			return "", err
		}
		d.pkgs[pkg] = docs
	}
	return docs[f.parent.Name()+"."+f.Name], nil
}

// parse reads the field docs of every struct type of the package at path pkg.
func (d *fieldDocs) parse(pkg string) (map[string]string, error) {
	rel, ok := strings.CutPrefix(pkg, modulePath)
	if !ok {
		return nil, fmt.Errorf("package %s is outside module %s", pkg, modulePath)
	}
	files, err := filepath.Glob(filepath.Join(d.root, filepath.FromSlash(rel), "*.go"))
	if err != nil {
		return nil, err
	}
	docs := make(map[string]string)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := spec.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, f := range st.Fields.List {
				text := f.Doc.Text()
				if text == "" {
					text = f.Comment.Text()
				}
				for _, n := range f.Names {
					docs[spec.Name.Name+"."+n.Name] = strings.TrimSpace(text)
				}
			}
			return false
		})
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no struct fields found in %s", pkg)
	}
	return docs, nil
}
