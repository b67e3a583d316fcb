package recipes

import (
	"embed"

	"github.com/kiln-build/kiln/internal/embeddata"
)

//go:embed data/*.json
var dataFS embed.FS

// ImageTag is a known nvidia/cuda image version and its cuDNN. CuDNNToken
// is the tag's cuDNN infix ("cudnn8", "cudnn9", "cudnn"; "" when no cuDNN
// variant is known); CuDNN is the exact version when kiln has read it from
// the image's Dockerfile ("" when only the tag is known, e.g. a tag a
// refresh found in the registry).
type ImageTag struct {
	CUDA         string `json:"cuda"`
	CuDNNToken   string `json:"cudnn_token"`
	CuDNN        string `json:"cudnn,omitempty"`
	CuDNNPackage string `json:"cudnn_package,omitempty"`
	Cudart       string `json:"cudart,omitempty"`
	Source       string `json:"source"`
	Confidence   string `json:"confidence"`
}

// OSFlavor is an OS flavour of the nvidia/cuda images.
type OSFlavor struct {
	Name             string `json:"name"`
	FirstCUDA        string `json:"first_cuda,omitempty"`
	LastCUDA         string `json:"last_cuda,omitempty"`
	Python           string `json:"python,omitempty"`
	Unofficial       bool   `json:"unofficial,omitempty"`
	Source           string `json:"source"`
	Confidence       string `json:"confidence"`
	PythonConfidence string `json:"python_confidence,omitempty"`
}

// ImageData is images.json: the nvidia/cuda tags and OS flavours.
type ImageData struct {
	DataVersion          string `json:"data_version"`
	DataDate             string `json:"data_date"`
	DataDateNote         string `json:"data_date_note,omitempty"`
	TagPattern           string `json:"tag_pattern,omitempty"`
	TagPatternSource     string `json:"tag_pattern_source,omitempty"`
	TagPatternConfidence string `json:"tag_pattern_confidence,omitempty"`
	SupportPolicy        *struct {
		Text       string `json:"text"`
		Source     string `json:"source"`
		Confidence string `json:"confidence"`
	} `json:"support_policy,omitempty"`
	Tags []ImageTag `json:"tags"`
	OS   []OSFlavor `json:"os"`
}

// TorchVariant is one CUDA build of a torch release. Stable and
// experimental variants are those of PyTorch's release matrix; a variant
// whose wheels a wheel index lists but the matrix does not (2.11.0+cu129)
// is Unofficial, and the resolver never picks it unless torch.variant names
// it. CuDNN and Archs are "" when no source says (rows a refresh added).
type TorchVariant struct {
	Name            string `json:"name"`
	CUDA            string `json:"cuda"`
	CuDNN           string `json:"cudnn"`
	CXX11ABI        bool   `json:"cxx11_abi"`
	Stable          bool   `json:"stable"`
	Unofficial      bool   `json:"unofficial,omitempty"`
	Archs           string `json:"archs"`
	ArchsConfidence string `json:"archs_confidence"`
	// Source and Confidence, when set, are the variant's own (a refresh
	// records the index that lists it); otherwise the release's apply.
	Source     string `json:"source,omitempty"`
	Confidence string `json:"confidence,omitempty"`
}

// TorchRelease is a torch minor release.
type TorchRelease struct {
	Minor              string   `json:"minor"`
	Patches            []string `json:"patches"`
	PatchesSource      string   `json:"patches_source"`
	PatchesConfidence  string   `json:"patches_confidence"`
	PythonMin          string   `json:"python_min"`
	PythonMax          string   `json:"python_max"`
	PythonExperimental string   `json:"python_experimental,omitempty"`
	TorchvisionMinor   string   `json:"torchvision_minor"`
	// TorchvisionPython is the CPython range torchvision's wheels cover,
	// "3.9-3.12" ("" when unknown): torchvision 0.20 has no cp313 wheels
	// although torch 2.5 has experimental ones.
	TorchvisionPython           string `json:"torchvision_python,omitempty"`
	TorchvisionPythonSource     string `json:"torchvision_python_source,omitempty"`
	TorchvisionPythonConfidence string `json:"torchvision_python_confidence,omitempty"`
	// TorchaudioUnsettled: no torchaudio release is known to pair with this
	// torch (the rule "torchaudio = torch version" would name one that may
	// not exist).
	TorchaudioUnsettled  bool           `json:"torchaudio_unsettled,omitempty"`
	TorchaudioSource     string         `json:"torchaudio_source,omitempty"`
	TorchaudioConfidence string         `json:"torchaudio_confidence,omitempty"`
	Variants             []TorchVariant `json:"variants"`
	PyPIDefault          string         `json:"pypi_default,omitempty"`
	Source               string         `json:"source"`
	Confidence           string         `json:"confidence"`
	ABISource            string         `json:"cxx11_abi_source"`
	ABIConfidence        string         `json:"cxx11_abi_confidence"`
	ArchsSource          string         `json:"archs_source"`
}

// TorchData is torch.json: torch releases, their CUDA variants and the
// torchvision/torchaudio pairing.
type TorchData struct {
	DataVersion               string         `json:"data_version"`
	DataDate                  string         `json:"data_date"`
	DataDateNote              string         `json:"data_date_note,omitempty"`
	IndexURL                  string         `json:"index_url"`
	IndexURLSource            string         `json:"index_url_source,omitempty"`
	IndexURLConfidence        string         `json:"index_url_confidence,omitempty"`
	TorchvisionRule           string         `json:"torchvision_rule,omitempty"`
	TorchvisionRuleSource     string         `json:"torchvision_rule_source,omitempty"`
	TorchvisionRuleConfidence string         `json:"torchvision_rule_confidence,omitempty"`
	Releases                  []TorchRelease `json:"releases"`
}

// FARelease is one FlashAttention release and its prebuilt wheel matrix.
type FARelease struct {
	Version    string   `json:"version"`
	Python     string   `json:"python"`
	Torch      []string `json:"torch"`
	CUDABuilt  []string `json:"cuda_built"`
	ABI        []bool   `json:"abi"`
	CuToken    string   `json:"cu_token"`
	Platforms  []string `json:"platforms"`
	MinCUDA    string   `json:"min_cuda"`
	MinTorch   string   `json:"min_torch"`
	MinPython  string   `json:"min_python"`
	Note       string   `json:"note,omitempty"`
	Source     string   `json:"source"`
	Confidence string   `json:"confidence"`
}

type faData struct {
	DataVersion string `json:"data_version"`
	WheelURL    string `json:"wheel_url"`
	MinCC       string `json:"min_compute_capability"`
	SourceBuild struct {
		ArchsDefault string `json:"archs_default"`
		SM90MinNvcc  string `json:"sm90_min_nvcc"`
		SM100MinNvcc string `json:"sm100_120_min_nvcc"`
		SM100Since   string `json:"sm100_120_since"`
		MemPerJobGB  int    `json:"mem_per_job_gb"`
		NvccThreads  int    `json:"nvcc_threads"`
		Source       string `json:"source"`
		Confidence   string `json:"confidence"`
	} `json:"source_build"`
	Releases []FARelease `json:"releases"`
}

// BNBRelease is a bitsandbytes release family.
type BNBRelease struct {
	Versions     []string          `json:"versions"`
	CUDABuilds   []string          `json:"cuda_builds"`
	SASS         map[string]string `json:"sass"`
	MinCC        string            `json:"min_compute_capability"`
	FallbackSame bool              `json:"fallback_same_major"`
	// Platforms are the wheel architectures ("x86_64", "aarch64") a source
	// confirms; nil means only x86_64 is known.
	Platforms           []string `json:"platforms,omitempty"`
	PlatformsSource     string   `json:"platforms_source,omitempty"`
	PlatformsConfidence string   `json:"platforms_confidence,omitempty"`
	Note                string   `json:"note,omitempty"`
	Source              string   `json:"source"`
	Confidence          string   `json:"confidence"`
}

type bnbData struct {
	DataVersion string       `json:"data_version"`
	Int8MinCC   string       `json:"llm_int8_min_compute_capability"`
	Releases    []BNBRelease `json:"releases"`
}

// DB is a compatibility database: the embedded one (Data), or the
// embedded one with the torch and image facts of a refreshed data file
// (LoadDataFile). The CUDA, driver and GPU facts are not here: they are
// package cuda's, compiled in and never refreshed.
type DB struct {
	Images ImageData
	Torch  TorchData
	FA     faData
	BNB    bnbData
	// Python is the relocatable CPython builds kiln provides (never
	// refreshed: each row is a sha256 kiln pins).
	Python pythonData

	// Origin is "embedded" or the refreshed data file's path.
	Origin string
	// version is the data set's version (recorded in plans and locks).
	version string
}

// OriginEmbedded is DB.Origin of the data compiled into kiln.
const OriginEmbedded = "embedded"

// Version identifies the data set: the embedded data_version, or a
// refreshed file's.
func (db *DB) Version() string { return db.version }

// Date is when the facts that go stale fastest (torch releases and
// variants, torchvision/torchaudio, nvidia/cuda tags) were last checked
// against their sources, YYYY-MM-DD: the older of the torch and image dates.
func (db *DB) Date() string {
	if db.Images.DataDate < db.Torch.DataDate {
		return db.Images.DataDate
	}
	return db.Torch.DataDate
}

var data, mustDB = embeddata.Once(loadDB)

// Data returns the embedded compatibility database, loaded once.
func Data() (*DB, error) { return data() }

// DataVersion identifies the embedded data set; it is recorded in kiln.lock.
// It is one version with cuda.DataVersion (the data is released as one set;
// TestDataEveryRowHasSourceAndConfidence checks every file carries it).
func DataVersion() string { return mustDB().version }

func loadDB() (*DB, error) {
	db := &DB{Origin: OriginEmbedded}
	err := embeddata.Decode(dataFS, "recipes",
		embeddata.File{Name: "images.json", V: &db.Images}, embeddata.File{Name: "torch.json", V: &db.Torch},
		embeddata.File{Name: "flash_attn.json", V: &db.FA}, embeddata.File{Name: "bitsandbytes.json", V: &db.BNB},
		embeddata.File{Name: "python.json", V: &db.Python})
	if err != nil {
		return nil, err
	}
	db.version = db.Torch.DataVersion
	return db, nil
}
