package release

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// artifact is a file of the release: an archive, an SBOM.
type artifact struct {
	name    string // the file name, as listed in the checksums file
	path    string
	bin     binary   // the binary an archive holds
	members []string // an archive's entries, in order
}

// packAll writes the archives of every archive entry: per target of the builds it names, a
// tar.gz named by its name_template holding the binary at its root and the listed files at
// their paths in the repository.
func packAll(t *testing.T, root, dist string, f fields, c config, bins []binary) []artifact {
	t.Helper()
	var out []artifact
	for _, a := range c.Archives {
		files := archiveFiles(t, root, a)
		for _, bin := range bins {
			if !slices.Contains(a.IDs, bin.build.ID) {
				continue
			}
			name := f.with(fields{"Os": bin.target.os, "Arch": bin.target.arch, "Binary": bin.build.Binary}).
				apply(t, "archives.name_template", a.NameTemplate) + ".tar.gz"
			path := filepath.Join(dist, name)
			members := append([]string{bin.build.Binary}, files...)
			sources := []string{bin.path}
			for _, m := range files {
				sources = append(sources, filepath.Join(root, m))
			}
			if err := writeTarGz(path, members, sources); err != nil {
				t.Fatalf("archive %s: %v", name, err)
			}
			out = append(out, artifact{name: name, path: path, bin: bin, members: members})
		}
	}
	return out
}

// archiveFiles expands an archive's files globs in the repository into file paths; a glob
// that matches nothing is an error, as the archive would lack what the file promises.
func archiveFiles(t *testing.T, root string, a archiveConfig) []string {
	t.Helper()
	var files []string
	for _, glob := range a.Files {
		matches, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil || len(matches) == 0 {
			t.Fatalf("archive %s: files %q matches nothing (%v)", a.ID, glob, err)
		}
		for _, m := range matches {
			err := filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, err := filepath.Rel(root, p)
				files = append(files, filepath.ToSlash(rel))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return files
}

// writeTarGz packs sources as members. Each file is read whole first, so one being rewritten
// meanwhile (the work tree is shared) is packed as one consistent version. The gzip command
// compresses: Go's compressor under the race detector, as CI runs these tests, takes a minute.
func writeTarGz(path string, members, sources []string) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer out.Close()
	gz := exec.Command("gzip", "-n", "-c")
	gz.Stdout = out
	in, err := gz.StdinPipe()
	if err != nil {
		return err
	}
	if err := gz.Start(); err != nil {
		return err
	}
	err = writeTar(in, members, sources)
	if cerr := in.Close(); err == nil {
		err = cerr
	}
	if werr := gz.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("gzip: %w", werr)
	}
	if err != nil {
		return err
	}
	return out.Close()
}

func writeTar(w io.Writer, members, sources []string) error {
	tw := tar.NewWriter(w)
	for i, src := range sources {
		st, err := os.Stat(src)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(st, "")
		if err != nil {
			return err
		}
		hdr.Name, hdr.Size = members[i], int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("%s: %w", members[i], err)
		}
	}
	return tw.Close()
}

// checkArchives reads every archive back: the entries it should have, the binary as built and
// executable.
func checkArchives(t *testing.T, root string, c config, archives []artifact) {
	if got, want := len(archives), len(c.Archives)*len(targets(c.Builds[0])); got != want {
		t.Errorf("%d archives, want %d", got, want)
	}
	for _, a := range archives {
		gz := exec.Command("gzip", "-dc", a.path)
		out, err := gz.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := gz.Start(); err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(out)
		var names []string
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			names = append(names, hdr.Name)
			if hdr.Name == a.bin.build.Binary {
				if hdr.Mode&0o111 == 0 {
					t.Errorf("%s: %s is not executable (mode %o)", a.name, hdr.Name, hdr.Mode)
				}
				if got, want := hashReader(t, tr), hashFile(t, a.bin.path); got != want {
					t.Errorf("%s: %s is not the binary built for %s", a.name, hdr.Name, a.bin.target)
				}
			}
		}
		if err := gz.Wait(); err != nil {
			t.Errorf("gzip -dc %s: %v", a.name, err)
		}
		if !slices.Equal(names, a.members) {
			t.Errorf("%s holds %v, want %v", a.name, names, a.members)
		}
		for _, want := range []string{"LICENSE", "README.md", "CHANGELOG.md", "docs/configuration.md", "docs/rules.md"} { // the README links to docs/
			if !slices.Contains(names, want) {
				t.Errorf("%s lacks %s", a.name, want)
			}
		}
	}
}

// archiveOf is the archive holding bin.
func archiveOf(t *testing.T, archives []artifact, bin binary) artifact {
	t.Helper()
	for _, a := range archives {
		if a.bin.path == bin.path {
			return a
		}
	}
	t.Fatalf("no archive holds the %s binary", bin.target)
	return artifact{}
}

// newHash is the checksum section's algorithm.
func newHash(algorithm string) (hash.Hash, error) {
	switch algorithm {
	case "sha256", "":
		return sha256.New(), nil
	case "sha512":
		return sha512.New(), nil
	}
	return nil, fmt.Errorf("checksum: algorithm %q: release/ knows sha256 and sha512; teach it this one", algorithm)
}

func hashReader(t *testing.T, r io.Reader) string {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hashFile(t *testing.T, path string) string {
	t.Helper()
	return hashWith(t, "sha256", path)
}

func hashWith(t *testing.T, algorithm, path string) string {
	t.Helper()
	h, err := newHash(algorithm)
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := io.Copy(h, in); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeChecksums writes the checksums file as goreleaser does: "<hex>  <name>" a line, sorted
// by name, for every uploaded file.
func writeChecksums(t *testing.T, dist string, f fields, c config, files []artifact) string {
	t.Helper()
	var lines []string
	for _, a := range files {
		lines = append(lines, hashWith(t, c.Checksum.Algorithm, a.path)+"  "+a.name+"\n")
	}
	slices.SortFunc(lines, func(a, b string) int {
		_, na, _ := strings.Cut(a, "  ")
		_, nb, _ := strings.Cut(b, "  ")
		return strings.Compare(na, nb)
	})
	path := filepath.Join(dist, f.apply(t, "checksum.name_template", c.Checksum.NameTemplate))
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkChecksums reads the checksums file back: one line per file, each sum right.
func checkChecksums(t *testing.T, c config, path string, files []artifact) {
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || sums[name] != "" {
			t.Errorf("checksums line %q: not <sum>  <name>, or the name again", sc.Text())
		}
		sums[name] = sum
	}
	if len(sums) != len(files) {
		t.Errorf("%d checksums, want one for each of %d files", len(sums), len(files))
	}
	for _, a := range files {
		if got, want := sums[a.name], hashWith(t, c.Checksum.Algorithm, a.path); got != want {
			t.Errorf("%s: checksum %q, want %q", a.name, got, want)
		}
	}
}

// runDocs runs the commands of docs/deploy.md that check a downloaded release (its "Getting a
// release" sh block) in dist, with X.Y.Z the snapshot's version and linux_amd64 this machine.
func runDocs(t *testing.T, root, dist string, f fields, host binary) {
	data, err := os.ReadFile(filepath.Join(root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Getting a release\n")
	if !ok {
		t.Fatal(`docs/deploy.md has no "## Getting a release" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```sh\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal(`docs/deploy.md "Getting a release": no sh block`)
	}
	script := strings.ReplaceAll(block, "X.Y.Z", f["Version"].(string))
	script = strings.ReplaceAll(script, "linux_amd64", host.target.os+"_"+host.target.arch)
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = dist
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the commands of docs/deploy.md failed: %v\n%s\n%s", err, script, out)
	}
	want := fmt.Sprintf("extauthz %s\ncommit: %s\n", f["Version"], f["FullCommit"])
	if !strings.Contains(string(out), ": OK\n") || !strings.Contains(string(out), want) {
		t.Errorf("the commands of docs/deploy.md said\n%s\nwant the archive's checksum OK and\n%s", out, want)
	}
}
