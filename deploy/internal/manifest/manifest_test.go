package manifest

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

func TestDecodeIsStrict(t *testing.T) {
	d := Kubernetes()
	good := `apiVersion: apps/v1
kind: Deployment
metadata: {name: a}
spec:
  template:
    spec:
      containers:
        - name: c
          readinessProbe: {httpGet: {path: /readyz, port: 9002}}
`
	o, err := d.Decode([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	dep := o.Value.(*appsv1.Deployment)
	if got := dep.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path; got != "/readyz" {
		t.Errorf("probe path %q", got)
	}
	for name, doc := range map[string]string{
		"misspelt nested field": strings.Replace(good, "readinessProbe", "readynessProbe", 1),
		"unknown kind":          strings.Replace(good, "kind: Deployment", "kind: Deploymnet", 1),
		"duplicate field":       good + "metadata: {name: b}\n",
	} {
		if _, err := d.Decode([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func TestSplit(t *testing.T) {
	docs := Split([]byte("# head\n---\na: 1\n--- # two\nb: 2\n---\n# only a comment\n---\n"))
	if len(docs) != 2 || !strings.Contains(string(docs[0]), "a: 1") || !strings.Contains(string(docs[1]), "b: 2") {
		t.Errorf("Split: %q", docs)
	}
}
