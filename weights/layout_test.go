package weights

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers/blob"
)

// noFetch fails every blob request: a migration renames, it downloads
// nothing.
type noFetch struct{ blob.Source }

func (noFetch) Open(context.Context, v1.Hash, int64, int64) (io.ReadCloser, error) {
	return nil, errors.New("no blob may be fetched")
}

// layoutFiles has a top-level directory named model, as a volume of the old
// layout may: the migration must tell it from the new layout's ModelDir.
var layoutFiles = []testFile{
	{"srv/model/w-00001.safetensors", body("w1", 2<<20), 0o644},
	{"srv/model/w-00002.safetensors", body("w2", 1<<20+5), 0o640},
	{"srv/config.json", []byte(`{"layers": 2}`), 0o644},
	{"srv/tok/vocab.txt", body("v", 900), 0o600},
}

// pulledOld pulls files into a new volume and lays it out as kiln did
// before ModelDir: the model files at the top level beside the
// bookkeeping, no layout marker.
func pulledOld(t *testing.T, res *Resolved) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "vol")
	if _, err := Pull(context.Background(), res.Manifest, res.Source, dir, PullOptions{}); err != nil {
		t.Fatal(err)
	}
	aside := filepath.Join(dir, "aside")
	if err := os.Rename(filepath.Join(dir, ModelDir), aside); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(aside)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Rename(filepath.Join(aside, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, LayoutMarker)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// topLevel lists a directory's entries by name.
func topLevel(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// migratedOK checks that a pull with no blob source at all turns dir into
// a ready volume of the current layout: every file in DIR/model, with its
// bytes (hashed), nothing fetched, kiln's bookkeeping alone beside it.
func migratedOK(t *testing.T, res *Resolved, dir string) {
	t.Helper()
	r, err := Pull(context.Background(), res.Manifest, noFetch{res.Source}, dir, PullOptions{})
	if err != nil {
		t.Fatalf("pull over the old layout: %v", err)
	}
	if !r.Migrated || r.Fetched != 0 || r.Present != len(res.Manifest.Files) || r.AlreadyReady {
		t.Errorf("pull over the old layout: %+v, want migrated, every file present, nothing fetched", r)
	}
	if got, want := topLevel(t, dir), []string{LayoutMarker, LockFile, ManifestFile, ReadyMarker, ModelDir}; !slices.Equal(got, want) {
		t.Errorf("top level after the migration: %v, want %v", got, want)
	}
	for _, f := range res.Manifest.Files {
		b, err := os.ReadFile(filepath.Join(dir, ModelDir, f.Path))
		if err != nil || hexOf(b) != f.SHA256 {
			t.Errorf("%s/%s after the migration: %v", ModelDir, f.Path, err)
		}
	}
	if rep, err := Verify(context.Background(), dir, nil, 2); err != nil || !rep.OK {
		t.Errorf("the migrated volume does not verify: %+v %v", rep, err)
	}
	if r, err := Pull(context.Background(), res.Manifest, noFetch{res.Source}, dir, PullOptions{}); err != nil || !r.AlreadyReady || r.Migrated {
		t.Errorf("the pull after the migration: %+v %v, want already ready", r, err)
	}
}

// An old-layout volume (files at the top level, a top-level directory
// named model among them) verifies its files where they are but is not
// OK: Verify says a pull migrates it. The next pull moves the files into
// DIR/model by renames (nothing is fetched: the source refuses every
// blob), hashes them and writes the marker.
func TestPullMigratesOldLayout(t *testing.T) {
	res, _ := publishLayout(t, layoutFiles)
	if !slices.ContainsFunc(res.Manifest.Files, func(f File) bool { return strings.HasPrefix(f.Path, ModelDir+"/") }) {
		t.Fatalf("the test volume has no top-level %s directory: %+v", ModelDir, res.Manifest.Files)
	}
	dir := pulledOld(t, res)
	rep, err := Verify(context.Background(), dir, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || len(rep.Problems) != 1 || rep.Problems[0].Path != LayoutMarker || rep.Problems[0].Problem != OldLayoutProblem {
		t.Fatalf("verify of an old-layout volume: %+v, want the one layout problem", rep)
	}
	if !strings.Contains(OldLayoutProblem, "kiln weights pull") {
		t.Errorf("the problem does not say what migrates it: %s", OldLayoutProblem)
	}
	// Stale temporary files of a killed marker write are not model files.
	os.WriteFile(filepath.Join(dir, "."+ReadyMarker+".123.tmp"), []byte("x"), 0o644)
	migratedOK(t, res, dir)
}

// A migration interrupted anywhere is resumed by the next pull: the
// states each step leaves (the ready marker removed; some files gathered
// in MigrateDir, some still at the top level; all gathered and the layout
// marker written, the last rename not done) are each healed with nothing
// fetched.
func TestPullResumesInterruptedMigration(t *testing.T) {
	res, _ := publishLayout(t, layoutFiles)
	gather := func(t *testing.T, dir string, n int) {
		t.Helper()
		os.Mkdir(filepath.Join(dir, MigrateDir), 0o755)
		for _, name := range topLevel(t, dir) {
			if n == 0 {
				return
			}
			if IsBookkeeping(name) {
				continue
			}
			if err := os.Rename(filepath.Join(dir, name), filepath.Join(dir, MigrateDir, name)); err != nil {
				t.Fatal(err)
			}
			n--
		}
	}
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, dir string)
		// verify is a problem Verify reports in that state.
		verify string
	}{
		{"after the ready marker", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ReadyMarker))
		}, LayoutMarker + ": " + OldLayoutProblem},
		{"halfway through the renames", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ReadyMarker))
			gather(t, dir, 2)
			if names := topLevel(t, dir); !slices.Contains(names, "tok") && !slices.Contains(names, "config.json") {
				t.Fatalf("nothing left at the top level: %v", names)
			}
		}, LayoutMarker + ": " + OldLayoutProblem},
		{"before the last rename", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ReadyMarker))
			gather(t, dir, -1)
			os.WriteFile(filepath.Join(dir, LayoutMarker), []byte(ModelDir+"\n"), 0o644)
		}, MigrateDir + ": leftovers of an interrupted move into " + ModelDir + "/; kiln weights pull finishes it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := pulledOld(t, res)
			tc.stop(t, dir)
			rep, err := Verify(context.Background(), dir, nil, 2)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, p := range rep.Problems {
				lines = append(lines, p.Path+": "+p.Problem)
			}
			if rep.OK || !slices.Contains(lines, tc.verify) || !slices.Contains(lines, ReadyMarker+": missing: the volume was never completed") {
				t.Errorf("verify of the interrupted migration: %q, want %q and the marker missing", lines, tc.verify)
			}
			migratedOK(t, res, dir)
		})
	}
}

// A layout marker this kiln does not know is refused, not guessed at.
func TestUnknownLayoutRefused(t *testing.T) {
	res, _ := publishLayout(t, layoutFiles)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, LayoutMarker), []byte("v9\n"), 0o644)
	for name, err := range map[string]error{
		"pull": func() error {
			_, err := Pull(context.Background(), res.Manifest, res.Source, dir, PullOptions{})
			return err
		}(),
		"verify": func() error { _, err := Verify(context.Background(), dir, res.Manifest, 1); return err }(),
	} {
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s holds %q", LayoutMarker, "v9")) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
