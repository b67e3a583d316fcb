package fatbin

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/continuity/sysx"
)

// D9: the pruned library keeps setuid and setgid bits and extended
// attributes, as the help says mode is kept.
func TestPruneFileKeepsSetuidAndXattrs(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libx.so.1")
	if err := os.WriteFile(lib, torchLike(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(lib, 0o755|os.ModeSetuid|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	xattr := sysx.LSetxattr(lib, "user.kiln.test", []byte("kept"), 0) == nil
	if !xattr {
		t.Log("no user xattrs on this file system: mode only")
	}
	p, err := PruneFile(lib, []GPU{{"h100", 90}}, true, false)
	if err != nil || p.Edited == 0 {
		t.Fatalf("prune: %v %+v", err, p)
	}
	fi, _ := os.Stat(lib)
	if want := 0o755 | os.ModeSetuid | os.ModeSetgid; fi.Mode() != want {
		t.Errorf("mode %v, want %v", fi.Mode(), want)
	}
	if xattr {
		if v, err := sysx.LGetxattr(lib, "user.kiln.test"); err != nil || string(v) != "kept" {
			t.Errorf("xattr user.kiln.test: %q %v", v, err)
		}
	}
}

// D9: a library replaced while it is pruned (a concurrent pip install
// renames its upgrade over it) is left as the upgrade, not overwritten
// with the pruned old one; nothing is left beside it.
func TestPruneFileLeavesALibraryReplacedMeanwhile(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libx.so.1")
	if err := os.WriteFile(lib, torchLike(), 0o644); err != nil {
		t.Fatal(err)
	}
	upgrade := append([]byte("upgrade "), torchLike()...)
	for _, how := range []string{"renamed over", "written in place"} {
		t.Run(how, func(t *testing.T) {
			if err := os.WriteFile(lib, torchLike(), 0o644); err != nil {
				t.Fatal(err)
			}
			testHookBeforeCheck = func(path string) {
				if how == "renamed over" {
					tmp := filepath.Join(dir, "pip-tmp")
					os.WriteFile(tmp, upgrade, 0o644)
					os.Rename(tmp, path)
					return
				}
				os.WriteFile(path, upgrade, 0o644)
			}
			t.Cleanup(func() { testHookBeforeCheck = func(string) {} })
			_, err := PruneFile(lib, []GPU{{"h100", 90}}, true, false)
			if !errors.Is(err, ErrChanged) {
				t.Errorf("err %v, want ErrChanged", err)
			}
			if b, _ := os.ReadFile(lib); !bytes.Equal(b, upgrade) {
				t.Error("the upgrade was overwritten by the pruned old library")
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				t.Errorf("left %d files beside it", len(ents)-1)
			}
		})
	}
}

// D9: a killed prune's temporary file is recognised (TempPrefix) and is
// not a library; neither is another writer's scratch.
func TestPruneTempIsNotALibrary(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libx.so.1")
	if err := os.WriteFile(lib, torchLike(), 0o644); err != nil {
		t.Fatal(err)
	}
	var tmp string
	testHookBeforeCheck = func(string) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.Name() != "libx.so.1" {
				tmp = e.Name()
			}
		}
	}
	t.Cleanup(func() { testHookBeforeCheck = func(string) {} })
	if _, err := PruneFile(lib, []GPU{{"h100", 90}}, true, false); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tmp, TempPrefix) || !IsPruneTemp(tmp) {
		t.Errorf("temporary file %q, want prefix %s", tmp, TempPrefix)
	}
	for _, n := range []string{tmp, ".libx.so.1.123.tmp", ".kiln-prune.libtorch_cuda.so.4242.tmp"} {
		if IsSharedObject(n) {
			t.Errorf("%s taken for a shared library", n)
		}
	}
	if !IsSharedObject("libx.so.1") || IsPruneTemp("libx.so.1") {
		t.Error("libx.so.1")
	}
}
