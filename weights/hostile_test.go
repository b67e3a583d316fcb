package weights

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/layers/blob"
)

var update = flag.Bool("update", false, "rewrite golden files")

// validManifest is a small packed manifest to mutate.
func validManifest(t *testing.T) *Manifest {
	t.Helper()
	m, _, err := collect(t, modelFiles, WithLargeFileThreshold(1<<20)).Pack("", "sha256:"+strings.Repeat("4", 64))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestManifestGolden(t *testing.T) {
	m := validManifest(t)
	got, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "manifest.golden.json")
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(golden, got, 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("manifest differs from %s (run with -update if the schema changed on purpose):\n%s", golden, got)
	}
	if _, err := DecodeManifest(bytes.NewReader(want)); err != nil {
		t.Errorf("golden manifest does not decode: %v", err)
	}
}

func TestHostileManifests(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(m *Manifest)
		resum  bool // recompute the set digest so the targeted check is what fails
		want   string
	}{
		{"climbs out", func(m *Manifest) { m.Files[0].Path = "../../etc/cron.d/x" }, true, "climbs out of the volume"},
		{"climbs inside", func(m *Manifest) { m.Files[0].Path = "llm/../../x" }, true, "climbs out"},
		{"absolute", func(m *Manifest) { m.Files[0].Path = "/etc/passwd" }, true, "absolute path"},
		{"unclean", func(m *Manifest) { m.Files[0].Path = "llm//x" }, true, "not a clean path"},
		{"newline", func(m *Manifest) { m.Files[0].Path = "a\nb" }, true, "newline"},
		{"reserved marker", func(m *Manifest) { m.Files[0].Path = ReadyMarker }, true, "reserved"},
		{"reserved partial", func(m *Manifest) { m.Files[0].Path = PartialDir + "/x.part" }, true, "reserved"},
		{"duplicate", func(m *Manifest) { m.Files[1].Path = m.Files[0].Path }, true, "listed twice"},
		{"file and dir", func(m *Manifest) { m.Files[0].Path = "llm" }, true, "needs it to be a directory"},
		{"raw size lie", func(m *Manifest) {
			for i := range m.Files {
				if strings.HasSuffix(m.Files[i].Path, "00002.safetensors") {
					m.Files[i].Size++
					m.Size++
				}
			}
		}, true, "its raw layer"},
		{"raw digest lie", func(m *Manifest) {
			for i := range m.Files {
				if strings.HasSuffix(m.Files[i].Path, "00002.safetensors") {
					m.Files[i].SHA256 = strings.Repeat("0", 64)
				}
			}
		}, true, "but its raw layer is"},
		{"total lie", func(m *Manifest) { m.Size = 1 }, true, "the files add up to"},
		{"set digest", func(m *Manifest) { m.SetDigest = "sha256:" + strings.Repeat("f", 64) }, false, "setDigest"},
		{"negative size", func(m *Manifest) { m.Files[0].Size = -1 }, true, "negative"},
		{"setuid", func(m *Manifest) { m.Files[0].Mode = 0o4755 }, true, "only permission bits"},
		{"bad sha", func(m *Manifest) { m.Files[0].SHA256 = "ZZ" }, true, "64 lowercase hex"},
		{"unknown layer", func(m *Manifest) { m.Files[0].Layer = "sha256:" + strings.Repeat("9", 64) }, true, "not one of the manifest's layers"},
		{"layer media type", func(m *Manifest) { m.Layers[0].MediaType = "application/vnd.oci.image.layer.v1.tar+gzip" }, true, "mediaType"},
		{"version", func(m *Manifest) { m.SchemaVersion = 2 }, true, "schemaVersion 2"},
		{"mount relative", func(m *Manifest) { m.Mount = "models" }, true, "mount"},
		{"mount root", func(m *Manifest) { m.Mount = "/" }, true, "mount"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := validManifest(t)
			tc.mutate(m)
			if tc.resum {
				m.SetDigest = SetDigest(m.Files)
			}
			b, _ := json.Marshal(m)
			_, err := DecodeManifest(bytes.NewReader(b))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("unknown field", func(t *testing.T) {
		_, err := DecodeManifest(strings.NewReader(`{"schemaVersion":1,"files":[],"exec":"rm -rf /"}`))
		if err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("err = %v", err)
		}
	})
}

type tarEntry struct {
	name string
	body string
	typ  byte
	size int64 // header size when the body lies
}

// tarVolume writes a one-layer (packed tar) artifact's blob into a layout
// directory and returns a manifest that lists files for it.
func tarVolume(t *testing.T, entries []tarEntry, files map[string]string) (*Manifest, blob.Source) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body))}
		if typ != tar.TypeReg {
			h.Size, h.Linkname = 0, "/etc/passwd"
		}
		if e.size != 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.body)[:min(int64(len(e.body)), h.Size)])
		}
	}
	tw.Close()
	lay := t.TempDir()
	d := hexOf(buf.Bytes())
	os.MkdirAll(filepath.Join(lay, "blobs", "sha256"), 0o755)
	os.WriteFile(filepath.Join(lay, "blobs", "sha256", d), buf.Bytes(), 0o644)
	m := &Manifest{SchemaVersion: 1, MediaType: MediaTypeManifest, Mount: "/models",
		Layers: []Layer{{Digest: "sha256:" + d, MediaType: MediaTypeWeightTar, Size: int64(buf.Len())}}}
	for p, content := range files {
		m.Files = append(m.Files, File{Path: p, Size: int64(len(content)), SHA256: hexOf([]byte(content)), Mode: 0o644, Layer: "sha256:" + d})
		m.Size += int64(len(content))
	}
	m.SetDigest = SetDigest(m.Files)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	return m, blob.Layout{Dir: lay}
}

func TestHostileTars(t *testing.T) {
	ok := map[string]string{"a.json": "abc"}
	cases := []struct {
		name    string
		entries []tarEntry
		files   map[string]string
		want    string
	}{
		{"escaping entry", []tarEntry{{name: "../../evil", body: "x"}, {name: "a.json", body: "abc"}}, ok, "hostile tar entry"},
		{"absolute entry", []tarEntry{{name: "/etc/evil", body: "x"}}, ok, "absolute path"},
		{"symlink entry", []tarEntry{{name: "a.json", typ: tar.TypeSymlink}}, ok, "regular files only"},
		{"extra entry", []tarEntry{{name: "a.json", body: "abc"}, {name: "b.json", body: "x"}}, ok, "not in the volume manifest"},
		{"size lie", []tarEntry{{name: "a.json", body: "abcde"}}, ok, "has 5 bytes, the manifest says 3"},
		{"content lie", []tarEntry{{name: "a.json", body: "xyz"}}, ok, "corrupt"},
		{"missing entry", []tarEntry{{name: "a.json", body: "abc"}}, map[string]string{"a.json": "abc", "b.json": "q"}, "the tar lacks it"},
		{"duplicate entry", []tarEntry{{name: "a.json", body: "abc"}, {name: "a.json", body: "abc"}}, ok, "appears twice"},
		{"truncated tar", []tarEntry{{name: "a.json", body: "abc", size: 4096}}, ok, "a.json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, src := tarVolume(t, tc.entries, tc.files)
			parent := t.TempDir()
			dir := filepath.Join(parent, "vol")
			_, err := Pull(context.Background(), m, src, dir, PullOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, ModelDir, "a.json")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a.json was put in place from a hostile tar")
			}
			if _, err := os.Stat(filepath.Join(dir, ReadyMarker)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("marker written")
			}
			if got := tree(t, parent); len(got) > 0 {
				for k := range got {
					if !strings.HasPrefix(k, "vol/"+PartialDir) {
						t.Errorf("written: %s", k)
					}
				}
			}
		})
	}
}
