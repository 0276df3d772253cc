package kubernetes

import (
	"os"
	"testing"

	"github.com/extauthz/extauthz/deploy/internal/checks"
)

func TestMain(m *testing.M) {
	code := m.Run()
	checks.Cleanup()
	os.Exit(code)
}
