package config

// The config reference, docs/configuration.md, is generated from Config and its field docs by
// this package's tests (reference_test.go); TestConfigReference fails while it is stale.

//go:generate go test -run TestConfigReference -update .
