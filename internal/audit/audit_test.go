package audit

import (
	"context"
	"testing"
)

func TestContextCarriesOneDecision(t *testing.T) {
	if FromContext(context.Background()) != nil {
		t.Fatal("a context without a Decision returned one")
	}
	ctx, d := NewContext(context.Background())
	FromContext(ctx).Resource = "GET:/a"
	if d.Resource != "GET:/a" {
		t.Fatalf("the Decision filled through FromContext is not the one NewContext returned: %+v", d)
	}
}
