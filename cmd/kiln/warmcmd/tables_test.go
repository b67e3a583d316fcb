package warmcmd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/warm"
)

// The weights table under warm's ran to ~150 columns (make demo's step 6):
// it fits 80 like the others.
func TestWeightsTableFitsEightyColumns(t *testing.T) {
	var b bytes.Buffer
	writeWeightsTable(&b, []*warm.WeightsReport{{
		Ref:   "127.0.0.1:5000/kiln-demo/app-weights@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Dir:   "/var/tmp/kiln-demo-containerd/weights/sha256-0123456789abcdef0123456789abcdef",
		State: warm.StateFetched, Bytes: 300 << 20, FetchedBytes: 300 << 20,
		Files: []warm.WeightsFile{{Path: "model.safetensors", State: warm.StateFetched}, {Path: "config.json", State: warm.StatePresent}},
	}})
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		if n := termtable.Len(l); n > 80 {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	// Wrapped, not cut: every word is there.
	if words := strings.Join(strings.Fields(b.String()), " "); !strings.Contains(words, "1 present, 1") || !strings.Contains(words, "fetched") {
		t.Errorf("no file counts:\n%s", b.String())
	}
}

// The image table says which form was warmed (REPO:TAG-erofs, named by
// REPO:TAG), wrapped within 80 columns like the notes.
func TestWarmTableSaysForm(t *testing.T) {
	ref := "127.0.0.1:5000/kiln-demo/serving-with-a-long-name:2026.12.06-cuda12.8"
	var b bytes.Buffer
	writeWarmTable(&b, &warm.Report{Ready: true, Images: []warm.ImageReport{{
		Ref: ref, Source: ref + "-erofs", Form: warm.FormErofs, Platform: "linux/amd64",
		Digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	}}})
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		if !testkit.Fits(l, 80) {
			t.Errorf("a line of %d columns: %q", termtable.Len(l), l)
		}
	}
	// Wrapped, not cut (a reference longer than a line has one of its
	// own).
	want := "form:" + ref + "-erofs(EROFSformnamedby" + ref + ")"
	if words := strings.Join(strings.Fields(b.String()), ""); !strings.Contains(words, want) {
		t.Errorf("no %q in:\n%s", want, b.String())
	}
}
