package weights

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kiln-build/kiln/internal/atomicfile"
)

// volLayout is how a volume directory is laid out.
type volLayout int

const (
	// layoutNone: nothing of kiln's yet (a new directory, or one holding
	// the lock alone or files kiln did not put there).
	layoutNone volLayout = iota
	// layoutOld: kiln's bookkeeping with the model files beside it at the
	// directory's top level (kiln before ModelDir), or a migration out of
	// it that was interrupted before LayoutMarker was written.
	layoutOld
	// layoutModel: LayoutMarker holds ModelDir; the files are in DIR/model.
	layoutModel
)

// volumeLayout tells the layouts apart: LayoutMarker names the current
// one; without it, any of the old layout's bookkeeping (the kept manifest,
// the marker, partial downloads) or a migration's gathering directory
// means the old one.
func volumeLayout(dir string) (volLayout, error) {
	b, err := os.ReadFile(filepath.Join(dir, LayoutMarker))
	switch {
	case err == nil:
		if got := strings.TrimSpace(string(b)); got != ModelDir {
			return 0, fmt.Errorf("%s: %s holds %q, a layout this kiln does not know (want %q)", dir, LayoutMarker, got, ModelDir)
		}
		return layoutModel, nil
	case !errors.Is(err, os.ErrNotExist):
		return 0, err
	}
	for _, name := range []string{ManifestFile, ReadyMarker, PartialDir, MigrateDir} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return layoutOld, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	return layoutNone, nil
}

// writeLayoutMarker writes LayoutMarker, naming ModelDir (what
// volumeLayout reads back).
func writeLayoutMarker(dir string) error {
	return atomicfile.WriteFile(filepath.Join(dir, LayoutMarker), []byte(ModelDir+"\n"), 0o644)
}

// OldLayoutProblem is what Verify says of a volume in the old layout.
const OldLayoutProblem = "missing: the model files lie at the volume's top level, beside kiln's " +
	"bookkeeping (kiln's old layout); kiln weights pull into this directory moves them into " +
	ModelDir + "/, the directory to mount (renames, nothing is downloaded again)"

// prepareLayout makes dir a volume of the current layout, under the
// volume's lock: a new one gets LayoutMarker and an empty ModelDir; an old
// one is migrated (see migrate); a migration interrupted after its marker
// is finished. It reports whether it moved files.
func prepareLayout(dir string) (bool, error) {
	l, err := volumeLayout(dir)
	if err != nil {
		return false, err
	}
	migrated := false
	switch l {
	case layoutOld:
		if err := migrate(dir); err != nil {
			return false, fmt.Errorf("%s: moving the model files into %s/ (kiln's old layout): %w", dir, ModelDir, err)
		}
		migrated = true
	case layoutNone:
		if err := writeLayoutMarker(dir); err != nil {
			return false, err
		}
	}
	// A migration that stopped between its marker and its last rename.
	if _, err := os.Lstat(filepath.Join(dir, MigrateDir)); err == nil {
		if err := finishMigration(dir); err != nil {
			return false, err
		}
		migrated = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if err := mkdirSafe(dir, ModelDir); err != nil {
		return false, err
	}
	return migrated, nil
}

// migrate moves an old-layout volume's files into ModelDir, resumable
// wherever it stops:
//  1. the ready marker goes first: from here on the volume is not ready
//     until the pull that called migrate has verified it and written the
//     marker again;
//  2. every top-level entry that is not kiln's (the model files and
//     directories, ModelDir among them when the model had one) is renamed
//     into MigrateDir: renames within one file system, nothing copied;
//  3. LayoutMarker is written: the top level holds bookkeeping only;
//  4. MigrateDir is renamed to ModelDir (finishMigration).
//
// A rerun finds the old layout again until 3 (MigrateDir is its trace once
// the marker is gone) and goes on moving what is left; after 3, it
// finishes 4. lost+found (a file system's own) stays where it is, and the
// temporary files of a killed marker write are removed.
func migrate(dir string) error {
	if err := os.Remove(filepath.Join(dir, ReadyMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	if err := mkdirSafe(dir, MigrateDir); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	gather := filepath.Join(dir, MigrateDir)
	for _, e := range ents {
		name := e.Name()
		switch {
		case IsBookkeeping(name), name == "lost+found":
			continue
		case strings.HasPrefix(name, "..kiln-") && atomicfile.IsTemp(name):
			// atomicfile's temporary .BASE.*.tmp of a marker or manifest.
			os.Remove(filepath.Join(dir, name))
			continue
		}
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(gather, name)); err != nil {
			return err
		}
	}
	if err := atomicfile.SyncDir(gather); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	if err := writeLayoutMarker(dir); err != nil {
		return err
	}
	return finishMigration(dir)
}

// finishMigration renames MigrateDir, complete, to ModelDir.
func finishMigration(dir string) error {
	model := filepath.Join(dir, ModelDir)
	if _, err := os.Lstat(model); err == nil {
		return fmt.Errorf("%s: both %s (an interrupted migration) and %s/ are there; kiln cannot tell which holds the model: move the files by hand or remove the directory and pull again", dir, MigrateDir, ModelDir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fi, err := os.Lstat(filepath.Join(dir, MigrateDir))
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", dir, MigrateDir)
	}
	if err := os.Rename(filepath.Join(dir, MigrateDir), model); err != nil {
		return err
	}
	return atomicfile.SyncDir(dir)
}
