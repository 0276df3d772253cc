package helm

import (
	"bytes"
	"os"
	"testing"

	"github.com/extauthz/extauthz/deploy/monitoring"
)

// The chart cannot read files outside its folder, so it carries copies of the monitoring pack;
// they must be the pack as tested in deploy/monitoring, byte for byte.
func TestChartCarriesTheMonitoringPack(t *testing.T) {
	for _, f := range []struct {
		path string
		want []byte
	}{
		{"extauthz/files/alerts.yaml", monitoring.Alerts},
		{"extauthz/files/dashboard.json", monitoring.Dashboard},
	} {
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.want) {
			t.Errorf("%s differs from deploy/monitoring's: copy it again", f.path)
		}
	}
}
