package weights

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/kiln-build/kiln/layers/blob"
	"golang.org/x/sync/errgroup"
)

// Problem is one way a volume differs from its manifest.
type Problem struct {
	Path    string `json:"path"`
	Problem string `json:"problem"`
}

// VerifyReport is the outcome of Verify.
type VerifyReport struct {
	Dir       string    `json:"dir"`
	SetDigest string    `json:"set_digest"`
	Files     int       `json:"files"`
	Bytes     int64     `json:"bytes"`
	OK        bool      `json:"ok"`
	Problems  []Problem `json:"problems"`
}

// Verify checks a volume offline against m (nil: the manifest Pull kept in
// dir/.kiln-manifest.json): every file's size, sha256 and mode in
// dir/model (ModelDir), no missing and no extra files there, no symlinks,
// and a readiness marker holding the set digest. A volume in kiln's old
// layout (files at dir's top level) has its files checked where they are
// and a LayoutMarker problem that says a pull migrates it. A problem's
// path is a manifest path (relative to dir/model), or the name of one of
// kiln's own entries at dir's top level. It hashes up to jobs files at
// once.
func Verify(ctx context.Context, dir string, m *Manifest, jobs int) (*VerifyReport, error) {
	if jobs <= 0 {
		jobs = 4
	}
	if m == nil {
		var err error
		if m, err = ReadManifest(filepath.Join(dir, ManifestFile)); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%s: no %s (not pulled by kiln?); pass the manifest with --manifest", dir, ManifestFile)
			}
			return nil, err
		}
	} else if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("volume manifest: %v", err)
	}
	rep := &VerifyReport{Dir: dir, SetDigest: m.SetDigest, Files: len(m.Files), Bytes: m.Size}
	var mu sync.Mutex
	add := func(p, format string, a ...any) {
		mu.Lock()
		rep.Problems = append(rep.Problems, Problem{Path: p, Problem: fmt.Sprintf(format, a...)})
		mu.Unlock()
	}
	l, err := volumeLayout(dir)
	if err != nil {
		return nil, err
	}
	root, old := filepath.Join(dir, ModelDir), l == layoutOld
	if old {
		root = dir
		add(LayoutMarker, "%s", OldLayoutProblem)
	} else {
		for name, problem := range map[string]string{
			PartialDir: "leftovers of an interrupted pull",
			MigrateDir: "leftovers of an interrupted move into " + ModelDir + "/; kiln weights pull finishes it",
		} {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				add(name, "%s", problem)
			}
		}
	}
	walk := true
	switch fi, err := os.Lstat(root); {
	case errors.Is(err, os.ErrNotExist):
		walk = false // every file is missing
	case err != nil:
		return nil, err
	case !fi.IsDir():
		add(ModelDir, "not a directory (kiln does not follow a symlink there)")
		walk = false
	}
	want := map[string]File{}
	for _, f := range m.Files {
		want[f.Path] = f
	}
	found := map[string]bool{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(jobs)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if !walk {
			return filepath.SkipAll
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		// In the old layout, kiln's own entries lie beside the files.
		if old && IsBookkeeping(rel) {
			if rel == PartialDir {
				add(rel, "leftovers of an interrupted pull")
			}
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			add(rel, "is a symlink")
			return nil
		}
		if d.IsDir() {
			return nil
		}
		f, ok := want[rel]
		if !ok {
			add(rel, "extra file, not in the manifest")
			return nil
		}
		found[rel] = true
		if !d.Type().IsRegular() {
			add(rel, "not a regular file")
			return nil
		}
		g.Go(func() error {
			if gctx.Err() != nil {
				return gctx.Err()
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			if fi.Size() != f.Size {
				add(rel, "size %d, want %d", fi.Size(), f.Size)
				return nil
			}
			h, err := blob.FileDigest(p)
			sum := h.Hex
			if err != nil {
				return err
			}
			if sum != f.SHA256 {
				add(rel, "sha256 %s, want %s", sum, f.SHA256)
			}
			if uint32(fi.Mode().Perm()) != f.Mode {
				add(rel, "mode %#o, want %#o", fi.Mode().Perm(), f.Mode)
			}
			return nil
		})
		return nil
	})
	if werr := g.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		if !found[f.Path] {
			add(f.Path, "missing")
		}
	}
	switch b, err := os.ReadFile(filepath.Join(dir, ReadyMarker)); {
	case errors.Is(err, os.ErrNotExist):
		add(ReadyMarker, "missing: the volume was never completed")
	case err != nil:
		return nil, err
	case strings.TrimSpace(string(b)) != m.SetDigest:
		add(ReadyMarker, "holds %q, want %s", strings.TrimSpace(string(b)), m.SetDigest)
	}
	sort.Slice(rep.Problems, func(i, j int) bool {
		if rep.Problems[i].Path != rep.Problems[j].Path {
			return rep.Problems[i].Path < rep.Problems[j].Path
		}
		return rep.Problems[i].Problem < rep.Problems[j].Problem
	})
	if rep.Problems == nil {
		rep.Problems = []Problem{}
	}
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}
