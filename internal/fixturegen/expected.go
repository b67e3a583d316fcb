package main

import (
	"bufio"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Expected is the ground truth written to expected.json.
type Expected struct {
	SourceDateEpoch int64                     `json:"source_date_epoch"`
	CountingRule    string                    `json:"counting_rule"`
	Images          map[string]*ExpectedImage `json:"images"`
	App             *AppTruth                 `json:"app"`
}

type ExpectedImage struct {
	OCIRef         string          `json:"oci_ref"`
	RegistryRef    string          `json:"registry_ref"`
	Archive        string          `json:"archive,omitempty"`
	ArchiveTag     string          `json:"archive_tag,omitempty"`
	ManifestDigest string          `json:"manifest_digest"`
	ConfigDigest   string          `json:"config_digest"`
	LayerMediaType string          `json:"layer_media_type"`
	LayerCount     int             `json:"layer_count"`
	Layers         []ExpectedLayer `json:"layers"`
}

type ExpectedLayer struct {
	Index            int    `json:"index"`
	Name             string `json:"name"`
	Digest           string `json:"digest"`
	DiffID           string `json:"diff_id"`
	Size             int64  `json:"size"`
	UncompressedSize int64  `json:"uncompressed_size"`
	RegularFiles     int    `json:"regular_files"`
	RegularBytes     int64  `json:"regular_bytes"`
	Whiteouts        int    `json:"whiteouts"`
	OpaqueDirs       int    `json:"opaque_dirs"`
	CreatedBy        string `json:"created_by"`
}

type PathBytes struct {
	Path       string `json:"path"`
	Bytes      int64  `json:"bytes"`
	LayerIndex int    `json:"layer_index"`
}

type Aggregate struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

type AppTruth struct {
	Weights  PathBytes `json:"weights"`
	PipCache struct {
		Path       string `json:"path"`
		LayerIndex int    `json:"layer_index"`
		Aggregate
	} `json:"pip_cache"`
	Nvcc       []PathBytes `json:"nvcc"`
	StaticLibs struct {
		Aggregate
		CUDA    Aggregate        `json:"cuda"`
		ByLayer map[string]int64 `json:"bytes_by_layer"`
	} `json:"static_libs"`
	CUDAHeaders struct {
		LayerIndex  int      `json:"layer_index"`
		IncludeDirs []string `json:"include_dirs"`
		Aggregate
	} `json:"cuda_headers"`
	AptInTorchLayer struct {
		LayerIndex     int       `json:"layer_index"`
		Lists          Aggregate `json:"lists"`
		Archives       Aggregate `json:"archives"`
		TotalBytes     int64     `json:"total_bytes"`
		DeletedBytes   int64     `json:"deleted_bytes"`
		DeletedByLayer int       `json:"deleted_by_layer_index"`
		RemainingBytes int64     `json:"remaining_bytes"`
	} `json:"apt_in_torch_layer"`
	PycacheDirs      []string `json:"pycache_dirs_app"`
	PycacheDirsTotal int      `json:"pycache_dirs_total"`
}

const countingRule = "Sizes are sums of tar header sizes of regular-file entries (TypeReg) in the layer tars: " +
	"a file hardlinked N times inside one layer is counted once (later names are hardlink entries of size 0); " +
	"symlinks, directories and whiteouts count 0. Layer indexes are 0-based positions in the manifest. " +
	"'deleted' bytes are files of that layer hidden by a whiteout (or opaque dir) in a later layer."

// cudaOwned returns the image paths (no leading slash) of files owned by
// packages built from the nvidia-cuda-toolkit source, read from the dpkg
// database inside rootfs.
func cudaOwned(rootfs string) (map[string]bool, error) {
	f, err := os.Open(filepath.Join(rootfs, "var/lib/dpkg/status"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pkgs []string
	var pkg, arch string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Package: "):
			pkg = strings.TrimPrefix(line, "Package: ")
		case strings.HasPrefix(line, "Architecture: "):
			arch = strings.TrimPrefix(line, "Architecture: ")
		case strings.HasPrefix(line, "Source: nvidia-cuda-toolkit"):
			pkgs = append(pkgs, pkg+"\x00"+arch)
		}
	}
	owned := map[string]bool{}
	for _, pa := range pkgs {
		p, a, _ := strings.Cut(pa, "\x00")
		var b []byte
		for _, name := range []string{p + ":" + a + ".list", p + ".list"} {
			if b, err = os.ReadFile(filepath.Join(rootfs, "var/lib/dpkg/info", name)); err == nil {
				break
			}
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimPrefix(l, "/"); l != "" && l != "." {
				owned[l] = true
			}
		}
	}
	return owned, sc.Err()
}

// appTruth derives the planted-waste ground truth from per-layer stats.
func appTruth(names []string, stats []*LayerStats, develRootfs string) (*AppTruth, error) {
	t := &AppTruth{}
	idx := map[string]int{}
	for i, n := range names {
		idx[n] = i
	}
	t.StaticLibs.ByLayer = map[string]int64{}
	owned, err := cudaOwned(develRootfs)
	if err != nil {
		return nil, err
	}
	includeDirs := map[string]bool{}
	for i, s := range stats {
		for _, f := range s.Interesting {
			base := path.Base(f.Path)
			switch {
			case strings.HasSuffix(f.Path, ".safetensors") && f.Path == "app/models/model.safetensors":
				t.Weights = PathBytes{"/" + f.Path, f.Size, i}
			case strings.HasPrefix(f.Path, "root/.cache/pip/"):
				t.PipCache.Files++
				t.PipCache.Bytes += f.Size
				t.PipCache.LayerIndex = i
			}
			if base == "nvcc" {
				t.Nvcc = append(t.Nvcc, PathBytes{"/" + f.Path, f.Size, i})
			}
			if strings.HasSuffix(f.Path, ".a") {
				t.StaticLibs.Files++
				t.StaticLibs.Bytes += f.Size
				t.StaticLibs.ByLayer[names[i]] += f.Size
				if owned[f.Path] && names[i] == "devel" {
					t.StaticLibs.CUDA.Files++
					t.StaticLibs.CUDA.Bytes += f.Size
				}
			}
			if names[i] == "devel" && owned[f.Path] && strings.Contains("/"+f.Path, "/include/") {
				t.CUDAHeaders.Files++
				t.CUDAHeaders.Bytes += f.Size
				j := strings.Index("/"+f.Path, "/include/")
				includeDirs["/"+f.Path[:j+len("include")]] = true
			}
		}
		t.PycacheDirsTotal += len(s.PycacheDirs)
		for _, d := range s.PycacheDirs {
			if strings.HasPrefix(d, "app/") {
				t.PycacheDirs = append(t.PycacheDirs, "/"+d)
			}
		}
	}
	t.PipCache.Path = "/root/.cache/pip"
	t.CUDAHeaders.LayerIndex = idx["devel"]
	for d := range includeDirs {
		t.CUDAHeaders.IncludeDirs = append(t.CUDAHeaders.IncludeDirs, d)
	}
	sort.Strings(t.CUDAHeaders.IncludeDirs)

	ti := idx["torch"]
	a := &t.AptInTorchLayer
	a.LayerIndex = ti
	a.DeletedByLayer = -1
	for _, f := range stats[ti].Interesting {
		var agg *Aggregate
		switch {
		case strings.HasPrefix(f.Path, "var/lib/apt/lists/"):
			agg = &a.Lists
		case strings.HasPrefix(f.Path, "var/cache/apt/archives/"):
			agg = &a.Archives
		default:
			continue
		}
		agg.Files++
		agg.Bytes += f.Size
		a.TotalBytes += f.Size
		for j := ti + 1; j < len(stats); j++ {
			if stats[j].deletedBy(f.Path) {
				a.DeletedBytes += f.Size
				a.DeletedByLayer = j
				break
			}
		}
	}
	a.RemainingBytes = a.TotalBytes - a.DeletedBytes
	return t, nil
}
