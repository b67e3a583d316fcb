package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A layer whose directory scripts/fixtures.sh pruned, and whose blob is
// not cached, is reported as such (the script rebuilds the layers on it),
// not as a missing directory to tar.
func TestBuildBlobPrunedLayer(t *testing.T) {
	layers, cache := t.TempDir(), t.TempDir()
	dir := filepath.Join(layers, "torch")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pruned"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := buildBlob(filepath.Join(dir, "rootfs"), nil, "torch-k", Gzip, cache, time.Unix(0, 0))
	if !errors.Is(err, errPruned) {
		t.Fatalf("pruned layer: %v, want errPruned", err)
	}
	os.Remove(filepath.Join(dir, "pruned"))
	if _, err := buildBlob(filepath.Join(dir, "rootfs"), nil, "torch-k", Gzip, cache, time.Unix(0, 0)); err == nil || errors.Is(err, errPruned) {
		t.Fatalf("missing directory without the marker: %v, want a plain error", err)
	}
}
