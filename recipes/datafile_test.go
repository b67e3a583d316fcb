package recipes

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/cuda"
)

// embeddedDataFile is the embedded torch and image data as a refreshed
// data file (a deep copy the test may change).
func embeddedDataFile(t *testing.T) *DataFile {
	t.Helper()
	db := mustDB()
	f := &DataFile{Format: DataFileFormat, DataVersion: "test.1", BaseDataVersion: db.Version(), Generated: "2027-01-02T03:04:05Z", Sources: []DataSource{}, Changes: []DataChange{}}
	b, _ := json.Marshal(db.Torch)
	if err := json.Unmarshal(b, &f.Torch); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(db.Images)
	if err := json.Unmarshal(b, &f.Images); err != nil {
		t.Fatal(err)
	}
	return f
}

// embeddedPython is a deep copy of kiln's pinned Python builds.
func embeddedPython(t *testing.T) *PythonDownloads {
	t.Helper()
	var d PythonDownloads
	b, _ := json.Marshal(mustDB().Python)
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// A data file's python section replaces the Python builds kiln pins: a
// company's own relocatable CPython (or a mirror that rebuilt them) is
// used with the sha256 the file gives, which the plan and the lock carry;
// kiln's embedded data is untouched.
func TestLoadDataFilePython(t *testing.T) {
	f := embeddedDataFile(t)
	f.Torch.DataDate, f.Images.DataDate = "2027-01-02", "2027-01-02"
	f.Python = embeddedPython(t)
	own := strings.Repeat("ab", 32)
	for i := range f.Python.Releases {
		if strings.HasPrefix(f.Python.Releases[i].Version, "3.13.") {
			f.Python.Releases[i].SHA256["x86_64-unknown-linux-gnu"] = own
		}
	}
	f.Python.DownloadURL = "https://python.internal/standalone"
	db, err := LoadDataFile(writeDataFile(t, f))
	if err != nil {
		t.Fatal(err)
	}
	p, err := resolveWith(t, "name: a\ncuda: '12.8'\nos: ubuntu24.04\npython: '3.13'\ntorch: {}\nplatforms: [linux/amd64]\n", WithData(db))
	if err != nil {
		t.Fatal(err)
	}
	if p.PythonSource != PythonStandalone || p.PythonDist == nil || len(p.PythonDist.Archives) != 1 {
		t.Fatalf("python: %s %+v", p.PythonSource, p.PythonDist)
	}
	if a := p.PythonDist.Archives[0]; a.SHA256 != own || !strings.HasPrefix(a.URL, "https://python.internal/standalone/") {
		t.Errorf("archive %+v: want the data file's sha256 and download prefix", a)
	}
	if mustDB().pythonBuild("3.13").SHA256["x86_64-unknown-linux-gnu"] == own {
		t.Error("LoadDataFile changed the embedded data")
	}
}

func writeDataFile(t *testing.T, f any) string {
	t.Helper()
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "compat.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func resolveWith(t *testing.T, yaml string, opts ...ResolveOption) (*Plan, error) {
	t.Helper()
	r, err := Parse("kiln.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return Resolve(context.Background(), r, opts...)
}

func TestLoadDataFileUnofficialVariant(t *testing.T) {
	f := embeddedDataFile(t)
	f.Torch.DataDate, f.Images.DataDate = "2027-01-02", "2027-01-02"
	for i := range f.Torch.Releases {
		r := &f.Torch.Releases[i]
		if r.Minor == "2.11" {
			// What the cu129 index lists although the release matrix does not.
			r.Variants = append(r.Variants, TorchVariant{Name: "cu129", CUDA: "12.9", CXX11ABI: true, Unofficial: true, Source: "https://download.pytorch.org/whl/cu129/torch/ (read 2027-01-02)", Confidence: cuda.ConfA})
		}
	}
	db, err := LoadDataFile(writeDataFile(t, f))
	if err != nil {
		t.Fatal(err)
	}
	if db.Version() != "test.1" || db.Date() != "2027-01-02" || !strings.HasSuffix(db.Origin, "compat.json") {
		t.Errorf("db: %q %q %q", db.Version(), db.Date(), db.Origin)
	}
	// The embedded data is untouched.
	if rel := (&resolver{db: mustDB()}).torchRelease("2.11"); rel.variant("cu129") != nil {
		t.Fatal("LoadDataFile changed the embedded data")
	}

	// Not offered by default: cuda 12.9 with torch 2.11 is refused, naming
	// the opt-in; an unpinned torch never lands on it.
	_, err = resolveWith(t, "name: a\ncuda: '12.9'\ntorch: {version: 2.11.0}\n", WithData(db))
	if err == nil || !strings.Contains(err.Error(), "torch 2.11+cu129 wheels are on the wheel index but not in PyTorch's release matrix (unofficial") || !strings.Contains(err.Error(), `torch: {version: "2.11.0", variant: cu129}`) || !strings.Contains(err.Error(), "official: cu126, cu128, cu130") {
		t.Errorf("cuda 12.9 + torch 2.11: %v", err)
	}
	p, err := resolveWith(t, "name: a\ncuda: '12.9'\ntorch: {}\n", WithData(db))
	if err != nil || *p.Torch != "2.8.0" || *p.TorchCUDAVariant != "cu129" {
		t.Errorf("cuda 12.9 + torch {}: %v %v", p, err)
	}
	// Asked for by name: used, with a warning; no arch data, so no GPU check but a warning.
	p, err = resolveWith(t, "name: a\ntorch: {version: 2.11.0, variant: cu129}\ngpus: [h100]\n", WithData(db))
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(p.Warnings, "|")
	if *p.TorchCUDAVariant != "cu129" || p.CuDNN != nil || p.DataVersion != "test.1" || !strings.Contains(w, "not in PyTorch's release matrix (unofficial)") || !strings.Contains(w, "no compiled-arch data for torch 2.11+cu129") || !strings.Contains(w, "does not know which cuDNN") {
		t.Errorf("explicit cu129: %+v\n%s", p, w)
	}
	if !hasFact(p, "refreshed data file") || !hasFact(p, "torch 2.11+cu129 wheels") {
		t.Errorf("sources: %+v", p.Sources)
	}
}

func hasFact(p *Plan, sub string) bool {
	for _, f := range p.Sources {
		if strings.Contains(f.Fact, sub) {
			return true
		}
	}
	return false
}

func TestLoadDataFileErrorsNameFileAndField(t *testing.T) {
	cases := []struct {
		name string
		edit func(f *DataFile)
		want string
	}{
		{"format", func(f *DataFile) { f.Format = 7 }, "kiln_compat_data: 7"},
		{"date", func(f *DataFile) { f.Torch.DataDate = "Dec 1" }, `torch.data_date: "Dec 1"`},
		{"variant name", func(f *DataFile) { f.Torch.Releases[2].Variants[1].Name = "cu999" }, `torch.releases[2].variants[1].name: "cu999" does not match cuda 12.1`},
		{"patch", func(f *DataFile) { f.Torch.Releases[0].Patches = []string{"2.2.0"} }, `torch.releases[0].patches[0]: "2.2.0" is not a torch 2.1 release`},
		{"tv python", func(f *DataFile) { f.Torch.Releases[0].TorchvisionPython = "3.9" }, `torch.releases[0].torchvision_python: "3.9"`},
		{"tag", func(f *DataFile) { f.Images.Tags[0].CUDA = "12.4" }, `images.tags[0].cuda: "12.4": want X.Y.Z`},
		{"change kind", func(f *DataFile) { f.Changes = []DataChange{{Kind: "moved"}} }, `changes[0].kind: "moved"`},
		{"python sha256", func(f *DataFile) {
			f.Python = embeddedPython(t)
			f.Python.Releases[1].SHA256["x86_64-unknown-linux-gnu"] = "abc"
		}, `python.releases[1].sha256.x86_64-unknown-linux-gnu: "abc": want 64 lowercase hex digits`},
		{"python url", func(f *DataFile) { f.Python = embeddedPython(t); f.Python.DownloadURL = "ftp://x" }, `python.download_url: "ftp://x"`},
		{"python version", func(f *DataFile) { f.Python = embeddedPython(t); f.Python.Releases[0].Version = "3.13" }, `python.releases[0].version: "3.13": want X.Y.Z`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := embeddedDataFile(t)
			tc.edit(f)
			p := writeDataFile(t, f)
			_, err := LoadDataFile(p)
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %s and %q", err, p, tc.want)
			}
		})
	}
	// Unknown fields are refused (a typo would otherwise drop a fact).
	p := writeDataFile(t, map[string]any{"kiln_compat_data": 1, "torhc": 1})
	if _, err := LoadDataFile(p); err == nil || !strings.Contains(err.Error(), `unknown field "torhc"`) {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := LoadDataFile(filepath.Join(t.TempDir(), "none.json")); err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Errorf("missing file: %v", err)
	}
}

func TestResolveDataAge(t *testing.T) {
	date, _ := time.Parse(time.DateOnly, mustDB().Date())
	cases := []struct {
		days, max int
		stale     bool
	}{{0, 0, false}, {90, 0, false}, {91, 0, true}, {31, 30, true}, {400, 500, false}}
	for _, tc := range cases {
		p, err := resolveWith(t, "name: a\ncuda: '12.6'\n", WithDataAge(date.Add(time.Duration(tc.days)*24*time.Hour+time.Hour), tc.max))
		if err != nil {
			t.Fatal(err)
		}
		d := p.Data
		wantMax := tc.max
		if wantMax == 0 {
			wantMax = DefaultMaxDataAgeDays
		}
		if d == nil || d.AgeDays != tc.days || d.MaxAgeDays != wantMax || d.Stale != tc.stale || d.Origin != OriginEmbedded || d.Version != DataVersion() || d.Date != mustDB().Date() {
			t.Errorf("%+v: data %+v", tc, d)
		}
		warned := strings.Contains(strings.Join(p.Warnings, "|"), "kiln compat refresh")
		if warned != tc.stale {
			t.Errorf("%+v: stale warning %v: %v", tc, warned, p.Warnings)
		}
	}
	// Without WithDataAge (kiln lock) the plan does not depend on the date.
	p, _ := resolveWith(t, "name: a\ncuda: '12.6'\n")
	if p.Data != nil {
		t.Errorf("data without WithDataAge: %+v", p.Data)
	}
}
