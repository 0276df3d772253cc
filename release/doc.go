// Package release checks the release configuration, .goreleaser.yaml at the repository root,
// without goreleaser: its tests read the file strictly (a key they do not know fails them, so
// they keep up with the file) and do what a snapshot release does with it. They build every
// target of its builds section with the file's flags, ldflags and env under
// GOFLAGS=-buildvcs=false, check each binary's format, architecture, static linking and
// stamped version and commit, pack the archives, write and verify the checksums file, catalog
// an archive with syft and compare its SBOM with go.mod, and check that the image section and
// the Dockerfile build the binary the same way. Run them with `go test` in this directory.
package release
