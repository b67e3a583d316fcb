package analyze

import "github.com/kiln-build/kiln/analyze/classify"

// SchemaVersion is bumped on any incompatible change to the JSON report.
// Fields are only ever added within a version.
const SchemaVersion = 1

// Report is the result of analyzing one image. Its JSON form is kiln's
// stable, documented output (docs/analyze-json.md).
type Report struct {
	SchemaVersion int    `json:"schema_version"`
	Image         string `json:"image"`
	Source        string `json:"source"`
	// Mirror is the registry mirror the image was read through, when
	// one was (--mirror, $KILN_MIRROR, the host's files).
	Mirror   string `json:"mirror,omitempty"`
	Digest   string `json:"digest"`
	Platform string `json:"platform"`
	// CompressedSize is the sum of the layer blobs (what a pull moves).
	CompressedSize int64 `json:"compressed_size"`
	// UncompressedSize is the sum of the layers' tar streams.
	UncompressedSize int64 `json:"uncompressed_size"`
	// VisibleSize is the bytes of regular files in the final filesystem.
	VisibleSize int64 `json:"visible_size"`
	FileCount   int   `json:"file_count"`
	Verified    bool  `json:"verified"`

	Layers  []LayerReport `json:"layers"`
	Waste   Waste         `json:"waste"`
	Classes []ClassReport `json:"classes"`
	CUDA    CUDAFacts     `json:"cuda"`
	// DuplicateCUDALibs lists CUDA libraries present more than once in the
	// final filesystem, e.g. under /usr/local/cuda and in a wheel.
	DuplicateCUDALibs []DuplicateLib `json:"duplicate_cuda_libs"`
	LargestFiles      []FileRef      `json:"largest_files"`
	// Kernels is the device code found in shared libraries; null unless
	// asked for (--kernels or --gpu).
	Kernels  *KernelReport `json:"kernels"`
	Warnings []string      `json:"warnings"`
	// Tree is the squashed filesystem for a treemap (Options.Tree); not
	// part of the JSON report.
	Tree *TreeNode `json:"-"`
	// Files is every non-directory entry of the final filesystem (after
	// whiteouts and opaque directories), in path order (Options.Files);
	// not part of the JSON report. Symlinks and hard links have size 0.
	Files []FileRef `json:"-"`
}

// LayerReport describes one layer.
type LayerReport struct {
	Index            int              `json:"index"`
	Digest           string           `json:"digest"`
	DiffID           string           `json:"diff_id"`
	MediaType        string           `json:"media_type"`
	Compression      string           `json:"compression"` // gzip, zstd, none
	CompressedSize   int64            `json:"compressed_size"`
	UncompressedSize int64            `json:"uncompressed_size"`
	FileCount        int              `json:"file_count"`
	CreatedBy        string           `json:"created_by"`
	BytesByClass     map[string]int64 `json:"bytes_by_class"`
	// WastedBytes is how many of this layer's file bytes later layers
	// overwrite or delete.
	WastedBytes int64 `json:"wasted_bytes"`
}

// Waste summarises bytes shipped but not visible in the final filesystem.
type Waste struct {
	// WastedBytes counts only superseded copies: files later overwritten,
	// deleted by whiteouts or hidden by opaque directories, and duplicate
	// entries within one layer.
	WastedBytes int64 `json:"wasted_bytes"`
	// Efficiency is dive's score: Σ over paths of the smallest copy / Σ of
	// all copies (1.0 when nothing is duplicated).
	Efficiency float64 `json:"efficiency"`
	// DiveWastedBytes is dive's figure for comparison: the total size of
	// every path seen in two or more layers, first copy included.
	DiveWastedBytes int64 `json:"dive_wasted_bytes"`
	// Top lists the largest superseded copies.
	Top []WastedFile `json:"top"`
}

// WastedFile is one superseded copy.
type WastedFile struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Layer int    `json:"layer"`
	// By is the layer that overwrote or deleted it; How is "overwritten",
	// "deleted" (whiteout), "hidden" (opaque dir) or "duplicate" (twice in
	// one layer).
	By  int    `json:"by"`
	How string `json:"how"`
}

// ClassReport is one CUDA-aware class.
type ClassReport struct {
	Class classify.Class `json:"class"`
	// Bytes counts every copy shipped in any layer; VisibleBytes only what
	// the final filesystem still has.
	Bytes        int64     `json:"bytes"`
	Files        int       `json:"files"`
	VisibleBytes int64     `json:"visible_bytes"`
	DevOnly      bool      `json:"dev_only"`
	Fix          string    `json:"fix"`
	Top          []FileRef `json:"top"`
}

// FileRef names a file copy in a layer.
type FileRef struct {
	Path   string         `json:"path"`
	Size   int64          `json:"size"`
	Layer  int            `json:"layer"`
	Class  classify.Class `json:"class,omitempty"`
	Format string         `json:"format,omitempty"` // weights format, when detected
	// Deleted is true when a later layer removes or replaces this copy.
	Deleted bool `json:"deleted,omitempty"`
}

// DuplicateLib is one SONAME present in several places.
type DuplicateLib struct {
	Soname string    `json:"soname"`
	Copies []FileRef `json:"copies"`
	// WastedBytes is what removing all but the largest copy saves.
	WastedBytes int64 `json:"wasted_bytes"`
}

// CUDAFacts is what the config and files say about CUDA.
type CUDAFacts struct {
	// CUDAVersion is the config's CUDA_VERSION.
	CUDAVersion string `json:"cuda_version"`
	// RuntimeVersion is the cudart version found in the files.
	RuntimeVersion string `json:"runtime_version"`
	CuDNNVersion   string `json:"cudnn_version"`
	// CuDNNSource says where the cuDNN version was seen.
	CuDNNSource        string       `json:"cudnn_source,omitempty"`
	RequireCUDA        string       `json:"require_cuda"`
	Requirement        *Requirement `json:"requirement"`
	DisableRequire     bool         `json:"disable_require"`
	VisibleDevices     string       `json:"visible_devices"`
	DriverCapabilities string       `json:"driver_capabilities"`
	// MinDriver is the lowest host driver that runs the image: Toolkit is
	// the driver the toolkit shipped with, MinorVersionCompat the floor
	// with minor-version compatibility (SASS-only code).
	MinDriver *MinDriver `json:"min_driver"`
	// CompatLibs are the forward-compatibility libraries (cuda-compat:
	// libcuda.so* under /usr/local/cuda*/compat) in the final filesystem;
	// without them an image cannot run on an older data-center driver.
	CompatLibs []string `json:"compat_libs,omitempty"`
}

// Requirement is NVIDIA_REQUIRE_CUDA parsed: any one term satisfied lets the
// container start.
type Requirement struct {
	CUDA  string   `json:"cuda"` // the plain cuda>= floor
	Terms []string `json:"terms"`
	// Brands and DriverBranches describe the forward-compat clauses.
	Brands         []string `json:"brands"`
	DriverBranches []string `json:"driver_branches"`
}

// MinDriver is the minimum host driver.
type MinDriver struct {
	Toolkit            string `json:"toolkit"`
	MinorVersionCompat string `json:"minor_version_compat"`
}
