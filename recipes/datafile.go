package recipes

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/internal/localfile"
)

// DataFileFormat is the version of the refreshed data file format.
const DataFileFormat = 1

// DataEnv names the environment variable that selects a refreshed data
// file (as --compat-data does); unset, kiln uses its embedded data.
const DataEnv = "KILN_COMPAT_DATA"

// DataFile is what `kiln compat refresh` writes: the torch and nvidia/cuda
// facts regenerated from the live sources, with the diff against the data
// they were refreshed from. Everything else (drivers, GPUs, FlashAttention,
// bitsandbytes) stays kiln's embedded data.
type DataFile struct {
	Format int `json:"kiln_compat_data"`
	// DataVersion is recorded in plans and locks made with the file.
	DataVersion string `json:"data_version"`
	// BaseDataVersion is the data the refresh started from and diffed against.
	BaseDataVersion string `json:"base_data_version"`
	// Generated is when the sources were read (RFC 3339, UTC).
	Generated string       `json:"generated"`
	Sources   []DataSource `json:"sources"`
	Torch     TorchData    `json:"torch"`
	Images    ImageData    `json:"images"`
	Changes   []DataChange `json:"changes"`
	// Python, when present, replaces the relocatable CPython builds kiln
	// pins (python.json's format: the download prefix, the archive kind,
	// each version's release and sha256 per target triple). kiln compat
	// refresh never writes it: it is for a company that builds or mirrors
	// its own relocatable CPythons and reviews their sha256s, as uv's
	// UV_PYTHON_DOWNLOADS_JSON_URL does. The sha256s land in every plan
	// and lock made with the file, and BuildKit checks the archives
	// against them.
	Python *PythonDownloads `json:"python,omitempty"`
}

// PythonDownloads is python.json: the relocatable CPython builds kiln
// provides when the base OS's python3 is not the recipe's version.
type PythonDownloads = pythonData

// DataSource is one live source a refresh read.
type DataSource struct {
	URL  string `json:"url"`
	What string `json:"what"`
	Date string `json:"date"`
}

// DataChange is one reviewed difference between a refresh and the data it
// started from: kind added, removed or changed; the fact; its old and new
// values; the source that says so and when it was read.
type DataChange struct {
	Kind   string `json:"kind"`
	Fact   string `json:"fact"`
	Old    string `json:"old,omitempty"`
	New    string `json:"new,omitempty"`
	Note   string `json:"note,omitempty"`
	Source string `json:"source"`
	Date   string `json:"date"`
}

// Kinds of DataChange.
const (
	ChangeAdded   = "added"
	ChangeRemoved = "removed"
	ChangeChanged = "changed"
)

// LoadDataFile returns kiln's embedded data with the torch and image facts
// of the refreshed data file at path. The file is checked the way the
// embedded data is tested (versions parse, variant names match their CUDA,
// dates are dates); a bad file is refused naming the file and the field.
func LoadDataFile(path string) (*DB, error) {
	b, err := localfile.ReadFile(path, "compat data file", localfile.MaxConfig)
	if err != nil {
		return nil, fmt.Errorf("compat data: %w", err)
	}
	var f DataFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("compat data %s: %w", path, err)
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("compat data %s: %w", path, err)
	}
	base, err := Data()
	if err != nil {
		return nil, err
	}
	db := *base
	db.Torch, db.Images = f.Torch, f.Images
	if f.Python != nil {
		db.Python = *f.Python
	}
	db.Origin, db.version = path, f.DataVersion
	return &db, nil
}

// Validate checks a data file's fields; errors name the field.
func (f *DataFile) Validate() error {
	if f.Format != DataFileFormat {
		return fmt.Errorf("kiln_compat_data: %d, want %d (a file from another kiln version?)", f.Format, DataFileFormat)
	}
	if f.DataVersion == "" {
		return fmt.Errorf("data_version: missing")
	}
	for _, d := range []struct{ field, v string }{{"torch.data_date", f.Torch.DataDate}, {"images.data_date", f.Images.DataDate}} {
		if _, err := time.Parse(time.DateOnly, d.v); err != nil {
			return fmt.Errorf("%s: %q: want YYYY-MM-DD", d.field, d.v)
		}
	}
	if len(f.Torch.Releases) == 0 {
		return fmt.Errorf("torch.releases: empty")
	}
	for i, r := range f.Torch.Releases {
		at := fmt.Sprintf("torch.releases[%d]", i)
		if _, err := cuda.ParseVersion(r.Minor); err != nil {
			return fmt.Errorf("%s.minor: %v", at, err)
		}
		if len(r.Patches) == 0 {
			return fmt.Errorf("%s.patches: empty (torch %s)", at, r.Minor)
		}
		for j, p := range r.Patches {
			if _, err := cuda.ParseVersion(p); err != nil || cuda.MajorMinor(p) != r.Minor {
				return fmt.Errorf("%s.patches[%d]: %q is not a torch %s release", at, j, p, r.Minor)
			}
		}
		for _, pv := range []struct{ field, v string }{{"python_min", r.PythonMin}, {"python_max", r.PythonMax}} {
			if _, err := cuda.ParseVersion(pv.v); err != nil {
				return fmt.Errorf("%s.%s: %v", at, pv.field, err)
			}
		}
		if r.TorchvisionPython != "" && !validPyRange(r.TorchvisionPython) {
			return fmt.Errorf("%s.torchvision_python: %q: want MIN-MAX such as 3.9-3.12", at, r.TorchvisionPython)
		}
		if len(r.Variants) == 0 {
			return fmt.Errorf("%s.variants: empty (torch %s)", at, r.Minor)
		}
		for j, v := range r.Variants {
			vat := fmt.Sprintf("%s.variants[%d]", at, j)
			if _, err := cuda.ParseVersion(v.CUDA); err != nil {
				return fmt.Errorf("%s.cuda: %v", vat, err)
			}
			if cudaVariant(v.CUDA) != v.Name {
				return fmt.Errorf("%s.name: %q does not match cuda %s", vat, v.Name, v.CUDA)
			}
		}
	}
	for i, t := range f.Images.Tags {
		if v, err := cuda.ParseVersion(t.CUDA); err != nil || len(v) != 3 {
			return fmt.Errorf("images.tags[%d].cuda: %q: want X.Y.Z", i, t.CUDA)
		}
	}
	if f.Python != nil {
		if err := f.Python.validate(); err != nil {
			return fmt.Errorf("python.%v", err)
		}
	}
	for i, c := range f.Changes {
		switch c.Kind {
		case ChangeAdded, ChangeRemoved, ChangeChanged:
		default:
			return fmt.Errorf("changes[%d].kind: %q: want added, removed or changed", i, c.Kind)
		}
	}
	return nil
}

func validPyRange(r string) bool {
	lo, hi, ok := strings.Cut(r, "-")
	if !ok {
		return false
	}
	_, e1 := cuda.ParseVersion(lo)
	_, e2 := cuda.ParseVersion(hi)
	return e1 == nil && e2 == nil
}
