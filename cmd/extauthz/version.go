package main

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at link time by the release build (see the Dockerfile):
//
//	go build -ldflags "-X main.version=v0.2.0 -X main.commit=0123abc" ./cmd/extauthz
//
// Empty means: take it from the build info.
var (
	version string
	commit  string
)

// buildInfo is what `extauthz version` prints.
type buildInfo struct {
	Version  string // the module version, "(devel)" for a build from a work tree
	Commit   string // the VCS revision, "" when unknown
	Time     string // the revision's commit time, "" when unknown
	Modified bool   // the work tree had uncommitted changes
	Go       string // the Go version that built the binary
}

// readBuildInfo reads the binary's build info, with the link-time values over it.
func readBuildInfo() buildInfo {
	bi := buildInfo{Version: "(devel)"}
	if info, ok := debug.ReadBuildInfo(); ok {
		bi.Go = info.GoVersion
		if info.Main.Version != "" {
			bi.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				bi.Commit = s.Value
			case "vcs.time":
				bi.Time = s.Value
			case "vcs.modified":
				bi.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		bi.Version = version
	}
	if commit != "" {
		bi.Commit, bi.Time, bi.Modified = commit, "", false
	}
	return bi
}

// write prints bi, one field a line.
func (bi buildInfo) write(w io.Writer) error {
	c := bi.Commit
	switch {
	case c == "":
		c = "unknown"
	case bi.Modified:
		c += " (modified)"
	}
	if bi.Time != "" {
		c += " " + bi.Time
	}
	_, err := fmt.Fprintf(w, "extauthz %s\ncommit: %s\ngo: %s\n", bi.Version, c, bi.Go)
	return err
}

// versionCommand prints the version, the commit and the Go version.
func versionCommand(started *bool) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			*started = true
			return readBuildInfo().write(cmd.OutOrStdout())
		},
	}
}
