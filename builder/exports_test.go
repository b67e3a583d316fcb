package builder

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/recipes"
	"github.com/moby/buildkit/client"
)

// mustOutput parses an output reference (REF, oci:DIR, docker-archive:FILE).
func mustOutput(t *testing.T, s string) Output {
	t.Helper()
	o, err := ParseOutput(s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestExportsFromTypedOutputs: each kind of output reference becomes its
// exporter (a push with the normalized name, an OCI layout directory, a
// docker archive in gzip), and the mistakes are refused before a solve.
func TestExportsFromTypedOutputs(t *testing.T) {
	dir := t.TempDir()
	epoch := int64(7)
	in := Inputs{SourceDateEpoch: &epoch}
	p := &recipes.Plan{Name: "My App"}
	o := Options{Outputs: []Output{
		mustOutput(t, "127.0.0.1:5000/acme/app:1"),
		{Ref: mustOutput(t, "ubuntu").Ref, Compression: "gzip"},
		mustOutput(t, "docker-archive:"+filepath.Join(dir, "a.tar")),
	}}
	es, closers, err := exports(p, in, o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	if len(es) != 3 || len(closers) != 1 {
		t.Fatalf("entries %d, closers %d", len(es), len(closers))
	}
	if es[0].Type != client.ExporterImage || es[0].Attrs["name"] != "127.0.0.1:5000/acme/app:1" || es[0].Attrs["registry.insecure"] != "true" || es[0].Attrs["compression"] != "zstd" || es[0].Attrs["source-date-epoch"] != "7" {
		t.Errorf("loopback push: %+v", es[0])
	}
	if es[1].Attrs["name"] != "docker.io/library/ubuntu:latest" || es[1].Attrs["registry.insecure"] != "" || es[1].Attrs["compression"] != "gzip" {
		t.Errorf("docker hub push: %+v", es[1])
	}
	if es[2].Type != client.ExporterDocker || es[2].Attrs["name"] != "kiln.local/my-app:latest" || es[2].Attrs["compression"] != "gzip" || es[2].Attrs["oci-mediatypes"] != "false" {
		t.Errorf("docker archive: %+v", es[2])
	}
	// The steps date their files (runArgs): an exporter that rewrote the
	// timestamps would decode and encode every layer at every export.
	for _, e := range es {
		if v, ok := e.Attrs["rewrite-timestamp"]; ok {
			t.Errorf("%s export: rewrite-timestamp=%s", e.Type, v)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a.tar")); err != nil {
		t.Errorf("archive file: %v", err)
	}

	two := Options{Outputs: []Output{mustOutput(t, "oci:"+filepath.Join(dir, "l")), mustOutput(t, "docker-archive:"+filepath.Join(dir, "b.tar"))}}
	if _, _, err := exports(p, in, two); err == nil || !strings.Contains(err.Error(), "cannot be combined") {
		t.Errorf("oci with another local output: %v", err)
	}
	if _, _, err := exports(p, in, Options{Compression: "lz4"}); err == nil || !strings.Contains(err.Error(), "want zstd, gzip or none") {
		t.Errorf("bad compression: %v", err)
	}
	if _, err := ParseOutput("docker-daemon:app"); err == nil {
		t.Error("docker-daemon: accepted as an output")
	}
}

// TestParseProgress is the one check of --progress: kiln's words, their
// old aliases and BuildKit's rawjson.
func TestParseProgress(t *testing.T) {
	for in, want := range map[string]ProgressMode{"": ProgressAuto, "auto": ProgressAuto, "bars": ProgressTTY, "tty": ProgressTTY, "plain": ProgressPlain, "none": ProgressQuiet, "quiet": ProgressQuiet, "rawjson": ProgressRawJSON} {
		if got, err := ParseProgress(in); err != nil || got != want {
			t.Errorf("ParseProgress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseProgress("fancy"); err == nil || !strings.Contains(err.Error(), "auto, tty, plain, none") {
		t.Errorf("fancy: %v", err)
	}
}
