package cuda

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/kiln-build/kiln/internal/embeddata"
)

// The driver and GPU tables are compiled in: they change only with a kiln
// release (NVIDIA's tables are read by hand and graded), never at run time,
// so `kiln compat refresh` and --compat-data leave them alone.
//
//go:embed data/*.json
var dataFS embed.FS

// Fact confidence, as in shared/reference/compat-data.md:
// A primary source read; B faithful copy or ≥2 secondary sources;
// C single secondary source or inference; UNVERIFIED not confirmed.
const (
	ConfA          = "A"
	ConfB          = "B"
	ConfC          = "C"
	ConfUnverified = "UNVERIFIED"
)

// ToolkitDriver is one row of NVIDIA's "CUDA Toolkit and Corresponding
// Driver Versions" table.
type ToolkitDriver struct {
	CUDA       string  `json:"cuda"`
	Label      string  `json:"label"`
	LinuxMin   string  `json:"linux_min"`
	WindowsMin *string `json:"windows_min"`
	Source     string  `json:"source"`
	Confidence string  `json:"confidence"`
}

// MVCFloor is the minimum driver for minor-version compatibility of a CUDA major.
type MVCFloor struct {
	CUDAMajor   int    `json:"cuda_major"`
	Floor       string `json:"floor"`
	BranchFloor int    `json:"branch_floor"`
	Source      string `json:"source"`
	Confidence  string `json:"confidence"`
}

// ImageRequire is the NVIDIA_REQUIRE_CUDA of one nvidia/cuda image version.
type ImageRequire struct {
	Image      string   `json:"image"`
	CUDAGE     string   `json:"cuda_ge"`
	Branches   []int    `json:"branches"`
	Brands     []string `json:"brands"`
	Source     string   `json:"source"`
	Confidence string   `json:"confidence"`
}

type driverData struct {
	DataVersion   string          `json:"data_version"`
	ToolkitDriver []ToolkitDriver `json:"toolkit_driver"`
	MVC           []MVCFloor      `json:"minor_version_compat"`
	ForwardCompat struct {
		ApplicableTo     []string `json:"applicable_to"`
		GeforceSupported bool     `json:"geforce_supported"`
		Package          string   `json:"package"`
		Source           string   `json:"source"`
		Confidence       string   `json:"confidence"`
	} `json:"forward_compat"`
	RequireCUDA []ImageRequire `json:"require_cuda"`
	Grammar     struct {
		ErrorMessage string `json:"error_message"`
		DisableEnv   string `json:"disable_env"`
		Source       string `json:"source"`
		Confidence   string `json:"confidence"`
	} `json:"require_cuda_grammar"`
}

// GPUInfo describes a GPU model.
type GPUInfo struct {
	Name              string   `json:"name"`
	Aliases           []string `json:"aliases"`
	ComputeCapability string   `json:"compute_capability"`
	Brand             string   `json:"brand"`
	Note              string   `json:"note,omitempty"`
	Source            string   `json:"source"`
	Confidence        string   `json:"confidence"`
	BrandSource       string   `json:"brand_source"`
	BrandConfidence   string   `json:"brand_confidence"`
}

// ArchSupport is the toolkit range that can compile for an architecture.
type ArchSupport struct {
	Arch       string `json:"arch"`
	FirstCUDA  string `json:"first_cuda,omitempty"`
	LastCUDA   string `json:"last_cuda,omitempty"`
	Note       string `json:"note,omitempty"`
	Source     string `json:"source"`
	Confidence string `json:"confidence"`
}

type gpuData struct {
	DataVersion string        `json:"data_version"`
	GPUs        []GPUInfo     `json:"gpus"`
	Arch        []ArchSupport `json:"arch_support"`
}

// DB is the embedded CUDA database: NVIDIA's driver tables and the
// NVIDIA_REQUIRE_CUDA of the nvidia/cuda images (drivers.json), and the
// GPUs and the toolkits that compile for each architecture (gpus.json).
type DB struct {
	Drivers driverData
	GPUs    gpuData
}

var data, mustDB = embeddata.Once(loadDB)

// Data returns the embedded CUDA database, loaded once.
func Data() (*DB, error) { return data() }

// DataVersion identifies the embedded data set. kiln's compatibility data
// is released as one set: recipes' files carry the same version (a test
// says so), and plans and locks record it.
func DataVersion() string { return mustDB().Drivers.DataVersion }

func loadDB() (*DB, error) {
	db := &DB{}
	if err := embeddata.Decode(dataFS, "cuda", embeddata.File{Name: "drivers.json", V: &db.Drivers}, embeddata.File{Name: "gpus.json", V: &db.GPUs}); err != nil {
		return nil, err
	}
	return db, nil
}

// Confidences are the grades a fact may carry, best first.
var Confidences = []string{ConfA, ConfB, ConfC, ConfUnverified}

// CheckDataFile checks one of kiln's embedded data files (JSON) against the
// rules every one keeps: its data_version is version (the data is released
// as one set), and every object in a list of facts carries a source and one
// of the Confidences. cuda's and recipes' tests hold their files to it, so
// the rule is written once.
func CheckDataFile(name string, b []byte, version string) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var errs []error
	if m["data_version"] != version {
		errs = append(errs, fmt.Errorf("%s: data_version %v, want %s", name, m["data_version"], version))
	}
	for k, x := range m {
		rows, _ := x.([]any)
		for i, r := range rows {
			row, ok := r.(map[string]any)
			if !ok {
				continue
			}
			src, _ := row["source"].(string)
			conf, _ := row["confidence"].(string)
			if src == "" || !slices.Contains(Confidences, conf) {
				errs = append(errs, fmt.Errorf("%s: %s[%d] lacks source/confidence: %v", name, k, i, row))
			}
		}
	}
	return errors.Join(errs...)
}
