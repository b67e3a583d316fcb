package main

import (
	"archive/tar"
	"path"
	"strings"
)

// FileRec is one regular-file tar entry of interest.
type FileRec struct {
	Path string `json:"p"`
	Size int64  `json:"s"`
}

// LayerStats accounts for one layer's tar entries (see the counting rule in
// testdata/fixtures/README.md: every TypeReg entry counts its size once,
// hardlink entries count 0, whiteouts count 0).
type LayerStats struct {
	Entries      int       `json:"entries"`
	RegularFiles int       `json:"regular_files"`
	RegularBytes int64     `json:"regular_bytes"`
	Hardlinks    int       `json:"hardlinks"`
	Symlinks     int       `json:"symlinks"`
	Interesting  []FileRec `json:"interesting"`
	Whiteouts    []string  `json:"whiteouts"`
	OpaqueDirs   []string  `json:"opaque_dirs"`
	PycacheDirs  []string  `json:"pycache_dirs"`
}

func NewLayerStats() *LayerStats { return &LayerStats{} }

// interesting reports whether a regular file's path matters for expected.json.
func interesting(p string) bool {
	base := path.Base(p)
	switch {
	case strings.HasPrefix(p, "var/lib/apt/lists/"),
		strings.HasPrefix(p, "var/cache/apt/archives/"),
		strings.HasPrefix(p, "root/.cache/pip/"),
		strings.HasSuffix(p, ".a"),
		strings.HasSuffix(p, ".safetensors"),
		base == "nvcc",
		strings.Contains("/"+p, "/include/"):
		return true
	}
	return false
}

// Add is the TarOptions.OnEntry callback.
func (s *LayerStats) Add(e Entry) {
	s.Entries++
	switch {
	case e.Opaque:
		s.OpaqueDirs = append(s.OpaqueDirs, e.Deleted)
		return
	case e.Deleted != "":
		s.Whiteouts = append(s.Whiteouts, e.Deleted)
		return
	}
	switch e.Typeflag {
	case tar.TypeReg:
		s.RegularFiles++
		s.RegularBytes += e.Size
		if interesting(e.Name) {
			s.Interesting = append(s.Interesting, FileRec{e.Name, e.Size})
		}
	case tar.TypeLink:
		s.Hardlinks++
	case tar.TypeSymlink:
		s.Symlinks++
	case tar.TypeDir:
		if path.Base(e.Name) == "__pycache__" {
			s.PycacheDirs = append(s.PycacheDirs, e.Name)
		}
	}
}

// deletedBy reports whether path p, present in some layer, is removed by
// the whiteouts / opaque markers of a later layer s.
func (s *LayerStats) deletedBy(p string) bool {
	for _, w := range s.Whiteouts {
		if p == w || strings.HasPrefix(p, w+"/") {
			return true
		}
	}
	for _, o := range s.OpaqueDirs {
		if strings.HasPrefix(p, o+"/") {
			return true
		}
	}
	return false
}
