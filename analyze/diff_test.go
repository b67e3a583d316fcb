package analyze_test

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/testimage"
)

func layer(i int, digest, diffID string, size int64, by string) analyze.LayerReport {
	return analyze.LayerReport{Index: i, Digest: digest, DiffID: diffID, CompressedSize: size, UncompressedSize: 2 * size, CreatedBy: by}
}

func fref(p string, size int64, l int, c classify.Class) analyze.FileRef {
	return analyze.FileRef{Path: p, Size: size, Layer: l, Class: c}
}

// diffPair is a baseline and an image made by hand: a shared base layer,
// a layer each of its own, a file of each kind of change.
func diffPair() (*analyze.Report, *analyze.Report) {
	base := layer(0, "sha256:base", "sha256:base-diff", 1000, "debootstrap")
	before := &analyze.Report{
		Image: "reg.example/app:1", Digest: "sha256:one", Platform: "linux/amd64", CompressedSize: 1500, UncompressedSize: 3000,
		Layers: []analyze.LayerReport{base, layer(1, "sha256:old", "sha256:old-diff", 500, "pip install torch==2.5")},
		Files: []analyze.FileRef{
			fref("/usr/bin/bash", 100, 0, ""),
			fref("/usr/lib/libgone.so", 40, 1, ""),                            // removed
			fref("/opt/app/model.safetensors", 700, 1, classify.ClassWeights), // grown
			fref("/opt/app/serve.py", 50, 1, ""),                              // shrunk
			fref("/opt/app/same.py", 30, 1, ""),                               // same size, rewritten
			fref("/usr/include/x.h", 20, 1, classify.ClassHeaders),            // removed: a header
		},
	}
	after := &analyze.Report{
		Image: "reg.example/app:2", Digest: "sha256:two", Platform: "linux/amd64", CompressedSize: 1800, UncompressedSize: 3600,
		Layers: []analyze.LayerReport{base, layer(1, "sha256:new", "sha256:new-diff", 800, "pip install torch==2.6")},
		Files: []analyze.FileRef{
			fref("/usr/bin/bash", 100, 0, ""), // unchanged: the shared layer
			fref("/opt/app/model.safetensors", 900, 1, classify.ClassWeights),
			fref("/opt/app/serve.py", 45, 1, ""),
			fref("/opt/app/same.py", 30, 1, ""),
			fref("/usr/local/cuda/bin/nvcc", 300, 1, classify.ClassDevTools), // added
			fref("/opt/app/new.py", 10, 1, ""),                               // added
		},
	}
	for _, r := range []*analyze.Report{before, after} {
		for _, f := range r.Files {
			r.VisibleSize += f.Size
		}
		r.FileCount = len(r.Files)
	}
	return before, after
}

func TestDiff(t *testing.T) {
	before, after := diffPair()
	d, err := analyze.Diff(before, after, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d.PullBytes != 800 || d.SharedLayers != 1 || len(d.AddedLayers) != 1 || d.AddedLayers[0].Digest != "sha256:new" ||
		len(d.RemovedLayers) != 1 || d.RemovedLayers[0].Digest != "sha256:old" {
		t.Errorf("layers: pull %d, shared %d, added %+v, removed %+v", d.PullBytes, d.SharedLayers, d.AddedLayers, d.RemovedLayers)
	}
	if d.Before.Image != "reg.example/app:1" || d.After.Image != "reg.example/app:2" || d.Before.VisibleSize != 940 || d.After.VisibleSize != 1385 || d.After.LayerCount != 2 {
		t.Errorf("sides: %+v %+v", d.Before, d.After)
	}
	wantSums := map[string]analyze.ChangeSum{
		"added": {2, 310}, "removed": {2, 60}, "grown": {1, 200}, "shrunk": {1, 5}, "rewritten": {1, 30}, "unchanged": {1, 100},
	}
	if !reflect.DeepEqual(d.Changes, wantSums) {
		t.Errorf("changes %+v, want %+v", d.Changes, wantSums)
	}
	paths := func(fs []analyze.FileChange) string {
		var s []string
		for _, f := range fs {
			s = append(s, f.Path)
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct{ got, want string }{
		{paths(d.Added), "/usr/local/cuda/bin/nvcc /opt/app/new.py"}, // largest first
		{paths(d.Removed), "/usr/lib/libgone.so /usr/include/x.h"},
		{paths(d.Grown), "/opt/app/model.safetensors"},
		{paths(d.Shrunk), "/opt/app/serve.py"},
	} {
		if c.got != c.want {
			t.Errorf("files %q, want %q", c.got, c.want)
		}
	}
	g := d.Grown[0]
	if g.Change != "grown" || g.BeforeSize != 700 || g.AfterSize != 900 || g.Delta != 200 || *g.BeforeLayer != 1 || *g.AfterLayer != 1 || g.Class != classify.ClassWeights {
		t.Errorf("grown: %+v", g)
	}
	if r := d.Removed[0]; r.AfterLayer != nil || *r.BeforeLayer != 1 || r.Delta != -40 {
		t.Errorf("removed: %+v", r)
	}
	// Classes that changed, by absolute change: dev_tools +300, weights
	// +200, other -25 (+10 added, -40 removed, -5 shrunk), headers -20.
	var got []string
	for _, c := range d.Classes {
		got = append(got, c.Class)
	}
	if strings.Join(got, ",") != "dev_tools,weights,other,headers" {
		t.Errorf("classes %v", got)
	}
	o := d.Classes[2]
	if o.BeforeBytes != 220 || o.AfterBytes != 185 || o.Delta != -35 || o.AddedBytes != 10 || o.RemovedBytes != 40 || o.ChangedBytes != -5 || o.ChangedFiles != 1 {
		t.Errorf("other: %+v", o)
	}
	for _, c := range d.Classes {
		if c.Delta != c.AddedBytes-c.RemovedBytes+c.ChangedBytes {
			t.Errorf("%s: delta %d is not added - removed + changed (%+v)", c.Class, c.Delta, c)
		}
	}
	// Per path, for the treemap.
	for p, want := range map[string]string{"/usr/bin/bash": "unchanged", "/opt/app/same.py": "rewritten", "/opt/app/new.py": "added", "/usr/lib/libgone.so": ""} {
		if got := d.Change(p); got != want {
			t.Errorf("Change(%s) = %q, want %q", p, got, want)
		}
	}
	if got := d.ChangeUnder("/opt/app"); got != "grown" {
		t.Errorf("ChangeUnder(/opt/app) = %q (the model holds most bytes)", got)
	}
	if got := d.ChangeUnder("/nowhere"); got != "" {
		t.Errorf("ChangeUnder(/nowhere) = %q", got)
	}

	// --top bounds each list.
	d1, _ := analyze.Diff(before, after, 1)
	if len(d1.Added) != 1 || d1.Added[0].Path != "/usr/local/cuda/bin/nvcc" || d1.Changes["added"].Files != 2 {
		t.Errorf("top 1: %+v", d1.Added)
	}
}

// The same image against itself: nothing to pull, nothing changed, and
// every list is [] in JSON, never null.
func TestDiffSameImage(t *testing.T) {
	_, after := diffPair()
	d, err := analyze.Diff(after, after, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d.PullBytes != 0 || d.SharedLayers != 2 || len(d.AddedLayers)+len(d.RemovedLayers)+len(d.Classes) != 0 || d.Changes["unchanged"].Files != len(after.Files) {
		t.Errorf("same image: %+v", d)
	}
	b, _ := json.Marshal(d)
	if strings.Contains(string(b), "null") {
		t.Errorf("null in %s", b)
	}
}

// A layer recompressed (same diff ID, a new blob) is pulled again, but its
// files are unchanged; a docker archive's layer without a blob digest is
// matched by diff ID.
func TestDiffLayerIdentity(t *testing.T) {
	before, after := diffPair()
	after.Layers[0] = layer(0, "sha256:base-zstd", "sha256:base-diff", 900, "debootstrap")
	d, _ := analyze.Diff(before, after, 10)
	if d.PullBytes != 900+800 || d.SharedLayers != 0 || d.Change("/usr/bin/bash") != "unchanged" {
		t.Errorf("recompressed base: pull %d, shared %d, bash %s", d.PullBytes, d.SharedLayers, d.Change("/usr/bin/bash"))
	}
	after.Layers[0] = layer(0, "", "sha256:base-diff", 900, "debootstrap")
	d, _ = analyze.Diff(before, after, 10)
	if d.PullBytes != 800 || d.SharedLayers != 1 {
		t.Errorf("archive layer: pull %d, shared %d", d.PullBytes, d.SharedLayers)
	}
	// A report without its file list is refused, not read as empty.
	before.Files = nil
	if _, err := analyze.Diff(before, after, 10); err == nil || !strings.Contains(err.Error(), "Options.Files") {
		t.Errorf("no file list: %v", err)
	}
}

// From images: the baseline's layers are the image's first layers (a
// FROM), and the image's own layer deletes a file (whiteout), hides a
// directory (opaque) and adds one. Nothing of the baseline is pulled
// again; the deleted and hidden files are removed.
func TestDiffImages(t *testing.T) {
	dir := t.TempDir()
	te := testimage.Sized
	base := testimage.Layer(t, []testimage.Entry{te("usr/bin/bash", 1000), te("usr/share/doc/bash/README", 300),
		te("var/lib/apt/lists/a", 500), te("var/lib/apt/lists/b", 600)}, "gzip")
	app := testimage.Layer(t, []testimage.Entry{te("app/serve.py", 200), te("usr/bin/bash", 1100)}, "gzip")
	cleanup := testimage.Layer(t, []testimage.Entry{testimage.Whiteout("usr/share/doc"), testimage.Opaque("var/lib/apt/lists"),
		te("var/lib/apt/lists/c", 10), te("app/model.bin", 4000)}, "gzip")
	testimage.WriteLayout(t, filepath.Join(dir, "old"), "app", testimage.Image(t, testimage.Config{}, base, app))
	testimage.WriteLayout(t, filepath.Join(dir, "new"), "app", testimage.Image(t, testimage.Config{}, base, app, cleanup))
	old := openAndAnalyze(t, "oci:"+filepath.Join(dir, "old")+":app", analyze.Options{Files: true})
	cur := openAndAnalyze(t, "oci:"+filepath.Join(dir, "new")+":app", analyze.Options{Files: true})
	d, err := analyze.Diff(old, cur, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d.SharedLayers != 2 || len(d.AddedLayers) != 1 || d.PullBytes != cur.Layers[2].CompressedSize || len(d.RemovedLayers) != 0 {
		t.Errorf("layers: shared %d, added %d, pull %d (layer 2 is %d)", d.SharedLayers, len(d.AddedLayers), d.PullBytes, cur.Layers[2].CompressedSize)
	}
	var removed, added []string
	for _, f := range d.Removed {
		removed = append(removed, f.Path)
	}
	for _, f := range d.Added {
		added = append(added, f.Path)
	}
	if strings.Join(removed, " ") != "/var/lib/apt/lists/b /var/lib/apt/lists/a /usr/share/doc/bash/README" ||
		strings.Join(added, " ") != "/app/model.bin /var/lib/apt/lists/c" {
		t.Errorf("removed %v, added %v", removed, added)
	}
	// bash was overwritten in a shared layer, in both: unchanged.
	if d.Change("/usr/bin/bash") != "unchanged" || d.Changes["unchanged"].Files != 2 {
		t.Errorf("bash %q, changes %+v", d.Change("/usr/bin/bash"), d.Changes)
	}
	// Against itself: nothing to pull.
	if d, _ := analyze.Diff(cur, cur, 10); d.PullBytes != 0 || len(d.AddedLayers) != 0 {
		t.Errorf("against itself: pull %d", d.PullBytes)
	}
}

// The table fits 80 columns with long paths, references and RUN lines,
// and names what changed.
func TestDiffTableFitsEightyColumns(t *testing.T) {
	before, after := diffPair()
	long := "/usr/local/lib/python3.12/dist-packages/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9"
	after.Files = append(after.Files, fref(long, 900<<20, 1, classify.ClassCUDALibs))
	after.Image = "registry.example.com:5000/some-team/a-rather-long-repository-name/serve:2026-12-01-cu124"
	after.Layers[1].CreatedBy = "RUN /bin/sh -c pip install --no-cache-dir torch==2.6.0 torchvision torchaudio --index-url https://download.pytorch.org/whl/cu124 # buildkit"
	d, err := analyze.Diff(before, after, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, color := range []bool{false, true} {
		var b strings.Builder
		if err := d.WriteTable(&b, termtable.Color(color)); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		checkWidthExt(t, out, 80)
		for _, want := range []string{"To pull   800 B in 1 new layer(s)", "1 shared, 1 added, 1 removed", "FILES ADDED", "precompiled.so.9", "          2 removed         -60 B",
			"FILES REMOVED", "/usr/lib/libgone.so", "FILES GROWN", "700 B → 900 B", "FILES SHRUNK", "cuda_libs", "dev_tools"} {
			if !color && !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s", want, out)
			}
		}
		if strings.Contains(out, "\x1b[") != color {
			t.Errorf("colour %v:\n%s", color, out)
		}
		if testing.Verbose() && !color {
			t.Log("\n" + out)
		}
	}
}

func checkWidthExt(t *testing.T, out string, cols int) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if n := termtable.Len(l); n > cols {
			t.Errorf("%d columns: %q", n, l)
		}
	}
}
