package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestResolveStaysInRoot: links in the rootfs (Debian's torch/lib ->
// ../../../../x86_64-linux-gnu/..., alternatives' absolute links) resolve
// inside the rootfs, never on the host that builds the wheels.
func TestResolveStaysInRoot(t *testing.T) {
	root := t.TempDir()
	mk := func(p, body string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ln := func(target, p string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("usr/lib/x86_64-linux-gnu/blas/libblas.so.3", "blas")
	ln("/etc/alternatives/libblas.so.3-x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu/libblas.so.3")
	ln("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3", "etc/alternatives/libblas.so.3-x86_64-linux-gnu")
	mk("usr/lib/x86_64-linux-gnu/libc10.so.2.6.0", "c10")
	ln("libc10.so.2.6.0", "usr/lib/x86_64-linux-gnu/libc10.so.2.6")
	ln("../../../../x86_64-linux-gnu/libc10.so.2.6", "usr/lib/python3/dist-packages/torch/lib/libc10.so")
	ln("/", "usr/lib/python3/dist-packages/torch/up")
	ln("loop", "loop")
	g := &wheelsGen{root: root}
	g.libDirs = g.searchPath()
	for p, want := range map[string]string{
		"usr/lib/x86_64-linux-gnu/libblas.so.3":                                         "blas",
		"usr/lib/python3/dist-packages/torch/lib/libc10.so":                             "c10",
		"usr/lib/python3/dist-packages/torch/up/usr/lib/x86_64-linux-gnu/libc10.so.2.6": "c10",
	} {
		got, err := g.resolve(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		b, _ := os.ReadFile(got)
		if string(b) != want || !filepath.IsAbs(got) || got[:len(root)] != root {
			t.Errorf("%s -> %s (%q), want the rootfs's %s", p, got, b, want)
		}
	}
	if p, err := g.findLib("libblas.so.3"); err != nil || filepath.Base(filepath.Dir(p)) != "blas" {
		t.Errorf("findLib(libblas.so.3) = %s, %v", p, err)
	}
	if _, err := g.resolve("loop"); err == nil {
		t.Error("a symlink loop resolved")
	}
	if _, err := g.findLib("libmissing.so.1"); err == nil {
		t.Error("a missing library was found")
	}
}
