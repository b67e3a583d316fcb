package sbom

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/kiln-build/kiln/layers"
)

// maxMeta caps what is read of one metadata file (METADATA,
// os-release); maxStatus of dpkg's status, which lists every package.
const (
	maxMeta   = 1 << 20
	maxStatus = 64 << 20
)

var (
	distInfo = regexp.MustCompile(`(?:^|/)(?:site|dist)-packages/[^/]+\.dist-info/METADATA$`)
	// CUDA libraries whose file name carries the full version.
	cudaLib = regexp.MustCompile(`(?:^|/)lib(cudart|cublas|cublasLt|cudnn|nccl|cufft|curand|cusparse|cusolver|nvrtc|nvJitLink|cupti|nvToolsExt|npp[a-z]*)\.so\.(\d+\.\d+(?:\.\d+)*)$`)
)

// scanner accumulates what an image's files state, whichever way they
// are read (a layer walk, or a build result's file API): one set of
// rules for both.
type scanner struct {
	status []byte
	distro string
	py     []Component
	cuda   map[string]Component
}

func newScanner() *scanner { return &scanner{distro: "debian", cuda: map[string]Component{}} }

// wants says whether the file at p (no leading slash) is read for its
// content: dpkg's status, os-release, a dist-info METADATA. A CUDA
// library is known by its name alone (name).
func (s *scanner) wants(p string) bool {
	return p == "var/lib/dpkg/status" || p == "etc/os-release" || p == "usr/lib/os-release" || distInfo.MatchString(p)
}

// file takes the content of a file wants asked for.
func (s *scanner) file(p string, b []byte) {
	switch {
	case p == "var/lib/dpkg/status":
		s.status = b
	case p == "etc/os-release" || p == "usr/lib/os-release":
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "ID="); ok {
				s.distro = strings.Trim(v, `"'`)
			}
		}
	case distInfo.MatchString(p):
		if c, ok := pythonDist(b, p); ok {
			s.py = append(s.py, c)
		}
	}
}

// name takes a regular file's path: a CUDA library's carries its version.
func (s *scanner) name(p string) {
	if m := cudaLib.FindStringSubmatch(p); m != nil {
		k := m[1] + "@" + m[2]
		if _, ok := s.cuda[k]; !ok {
			s.cuda[k] = Component{Type: TypeLibrary, Name: "lib" + m[1], Version: m[2],
				Properties: []Property{{"kiln:source", "cuda"}, {"kiln:path", "/" + p}}}
		}
	}
}

func (s *scanner) components(arch string) []Component {
	var out []Component
	out = append(out, dpkgPackages(s.status, s.distro, arch)...)
	out = append(out, s.py...)
	for _, c := range s.cuda {
		out = append(out, c)
	}
	return out
}

// ScanImage reads img's filesystem (its layers applied in order,
// whiteouts honoured) and returns the components its files state: dpkg
// packages, Python distributions, CUDA libraries. The distro, from
// /etc/os-release, names the deb purls' namespace.
func ScanImage(img v1.Image) ([]Component, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("sbom: config: %v", err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	s := newScanner()
	err = layers.WalkTar(context.Background(), rc, func(e *layers.Entry, body io.Reader) error {
		if !e.IsRegular() || e.Escapes {
			return nil
		}
		p := e.Path
		if s.wants(p) {
			limit := int64(maxMeta)
			if p == "var/lib/dpkg/status" {
				limit = maxStatus
			}
			b, err := io.ReadAll(io.LimitReader(body, limit))
			if err != nil {
				return fmt.Errorf("%s: %v", p, err)
			}
			s.file(p, b)
			return nil
		}
		s.name(p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sbom: reading the image's files: %v", err)
	}
	return s.components(cfg.Architecture), nil
}

// Files is a read-only view of a filesystem that is not a tar stream:
// a BuildKit result, before it is an image. Paths are absolute.
type Files interface {
	// ReadFile returns at most limit bytes of the file at path.
	ReadFile(ctx context.Context, path string, limit int) ([]byte, error)
	// ReadDir lists a directory: names, and which are directories (a
	// symbolic link is neither followed nor a directory).
	ReadDir(ctx context.Context, path string) ([]DirEntry, error)
}

// DirEntry is one name ReadDir lists.
type DirEntry struct {
	Name    string
	Dir     bool
	Regular bool
}

// scanRoots are where ScanFiles looks, without walking the whole tree
// (a CUDA image holds tens of thousands of files, each a round trip):
// the dpkg and os-release files, Python's package directories, and the
// library directories CUDA is installed in.
var scanRoots = struct {
	files, pyParents, libDirs []string
}{
	files:     []string{"/var/lib/dpkg/status", "/etc/os-release", "/usr/lib/os-release"},
	pyParents: []string{"/usr/lib", "/usr/local/lib", "/opt/conda/lib"},
	libDirs:   []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/targets/sbsa-linux/lib"},
}

// ScanFiles is ScanImage over f: the same components, found where a
// Debian- or conda-based CUDA image keeps them. A file or directory that
// is absent is skipped; any other error fails the scan.
func ScanFiles(ctx context.Context, f Files, arch string) ([]Component, error) {
	s := newScanner()
	read := func(p string) error {
		limit := maxMeta
		if p == "/var/lib/dpkg/status" {
			limit = maxStatus
		}
		b, err := f.ReadFile(ctx, p, limit)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sbom: %s: %w", p, err)
		}
		s.file(strings.TrimPrefix(p, "/"), b)
		return nil
	}
	list := func(p string) ([]DirEntry, error) {
		es, err := f.ReadDir(ctx, p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("sbom: %s: %w", p, err)
		}
		return es, nil
	}
	for _, p := range scanRoots.files {
		if err := read(p); err != nil {
			return nil, err
		}
	}
	libDirs := append([]string(nil), scanRoots.libDirs...)
	for _, parent := range scanRoots.pyParents {
		es, err := list(parent)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if !e.Dir || !strings.HasPrefix(e.Name, "python3") {
				continue
			}
			for _, sub := range []string{"dist-packages", "site-packages"} {
				dir := path.Join(parent, e.Name, sub)
				pkgs, err := list(dir)
				if err != nil {
					return nil, err
				}
				for _, d := range pkgs {
					if d.Dir && strings.HasSuffix(d.Name, ".dist-info") {
						if err := read(path.Join(dir, d.Name, "METADATA")); err != nil {
							return nil, err
						}
					}
					if d.Dir && (d.Name == "nvidia" || d.Name == "torch") {
						// PyPI's CUDA wheels (nvidia/<lib>/lib) and torch's own lib.
						if d.Name == "torch" {
							libDirs = append(libDirs, path.Join(dir, "torch", "lib"))
							continue
						}
						subs, err := list(path.Join(dir, "nvidia"))
						if err != nil {
							return nil, err
						}
						for _, n := range subs {
							if n.Dir {
								libDirs = append(libDirs, path.Join(dir, "nvidia", n.Name, "lib"))
							}
						}
					}
				}
			}
		}
	}
	for _, dir := range libDirs {
		es, err := list(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if e.Regular {
				s.name(strings.TrimPrefix(path.Join(dir, e.Name), "/"))
			}
		}
	}
	return s.components(arch), nil
}

// dpkgPackages parses dpkg's status file: installed packages only.
func dpkgPackages(status []byte, distro, arch string) []Component {
	var out []Component
	for _, stanza := range bytes.Split(status, []byte("\n\n")) {
		f := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(stanza))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if l == "" || l[0] == ' ' || l[0] == '\t' {
				continue
			}
			if k, v, ok := strings.Cut(l, ":"); ok {
				f[k] = strings.TrimSpace(v)
			}
		}
		if f["Package"] == "" || !strings.HasSuffix(f["Status"], " installed") {
			continue
		}
		a := f["Architecture"]
		if a == "" {
			a = arch
		}
		purl := fmt.Sprintf("pkg:deb/%s/%s@%s?arch=%s", url.PathEscape(distro), url.PathEscape(f["Package"]), url.PathEscape(f["Version"]), url.QueryEscape(a))
		c := Component{Type: TypeLibrary, Name: f["Package"], Version: f["Version"], PURL: purl,
			Properties: []Property{{"kiln:source", "dpkg"}}}
		if s := f["Source"]; s != "" {
			c.Properties = append(c.Properties, Property{"kiln:dpkg:source", s})
		}
		out = append(out, c)
	}
	return out
}

// pythonDist reads Name and Version from a .dist-info/METADATA header.
func pythonDist(b []byte, p string) (Component, bool) {
	var n, v string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimRight(l, "\r")
		if l == "" {
			break
		}
		if x, ok := strings.CutPrefix(l, "Name: "); ok && n == "" {
			n = strings.TrimSpace(x)
		} else if x, ok := strings.CutPrefix(l, "Version: "); ok && v == "" {
			v = strings.TrimSpace(x)
		}
	}
	if n == "" || v == "" {
		return Component{}, false
	}
	return Component{Type: TypeLibrary, Name: n, Version: v, PURL: PyPIPURL(n, v),
		Properties: []Property{{"kiln:source", "python"}, {"kiln:path", "/" + strings.TrimSuffix(p, "/METADATA")}}}, true
}

// PyPIPURL is the package URL of a Python distribution: the PEP 503
// normalized name and the version, each percent-encoded as one segment
// (a "/" in a hostile METADATA name or a "+" local version label
// cannot change the purl's structure).
func PyPIPURL(name, version string) string {
	norm := strings.ToLower(pypiNormRe.ReplaceAllString(name, "-"))
	return "pkg:pypi/" + purlSegment(norm) + "@" + purlSegment(version)
}

var pypiNormRe = regexp.MustCompile(`[-_.]+`)

// purlSegment percent-encodes s as a purl segment: url.PathEscape, which
// keeps "+" (a purl reads it literally but many tools as a space).
func purlSegment(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), "+", "%2B")
}
