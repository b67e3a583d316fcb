package sbom

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/kiln-build/kiln/layers"
)

// maxMeta caps what is read of one metadata file (dpkg status, METADATA).
const maxMeta = 1 << 20

var (
	distInfo = regexp.MustCompile(`(?:^|/)(?:site|dist)-packages/[^/]+\.dist-info/METADATA$`)
	// CUDA libraries whose file name carries the full version.
	cudaLib = regexp.MustCompile(`(?:^|/)lib(cudart|cublas|cublasLt|cudnn|nccl|cufft|curand|cusparse|cusolver|nvrtc|nvJitLink|cupti|nvToolsExt|npp[a-z]*)\.so\.(\d+\.\d+(?:\.\d+)*)$`)
)

// ScanImage reads img's filesystem (its layers applied in order,
// whiteouts honoured) and returns the components its files state: dpkg
// packages, Python distributions, CUDA libraries. The distro, from
// /etc/os-release, names the deb purls' namespace.
func ScanImage(img v1.Image) ([]Component, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("sbom: config: %v", err)
	}
	arch := cfg.Architecture
	rc := mutate.Extract(img)
	defer rc.Close()
	var status []byte
	distro := "debian"
	var py []Component
	cuda := map[string]Component{}
	err = layers.WalkTar(rc, func(e *layers.Entry, body io.Reader) error {
		if !e.IsRegular() || e.Escapes {
			return nil
		}
		p := e.Path
		switch {
		case p == "var/lib/dpkg/status":
			b, err := io.ReadAll(io.LimitReader(body, 64<<20))
			if err != nil {
				return fmt.Errorf("%s: %v", p, err)
			}
			status = b
		case p == "etc/os-release" || p == "usr/lib/os-release":
			b, _ := io.ReadAll(io.LimitReader(body, maxMeta))
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "ID="); ok {
					distro = strings.Trim(v, `"'`)
				}
			}
		case distInfo.MatchString(p):
			b, err := io.ReadAll(io.LimitReader(body, maxMeta))
			if err != nil {
				return fmt.Errorf("%s: %v", p, err)
			}
			if c, ok := pythonDist(b, p); ok {
				py = append(py, c)
			}
		default:
			if m := cudaLib.FindStringSubmatch(p); m != nil {
				k := m[1] + "@" + m[2]
				if _, ok := cuda[k]; !ok {
					cuda[k] = Component{Type: TypeLibrary, Name: "lib" + m[1], Version: m[2],
						Properties: []Property{{"kiln:source", "cuda"}, {"kiln:path", "/" + p}}}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sbom: reading the image's files: %v", err)
	}
	var out []Component
	out = append(out, dpkgPackages(status, distro, arch)...)
	out = append(out, py...)
	for _, c := range cuda {
		out = append(out, c)
	}
	return out, nil
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
	norm := strings.ToLower(regexp.MustCompile(`[-_.]+`).ReplaceAllString(n, "-"))
	return Component{Type: TypeLibrary, Name: n, Version: v, PURL: "pkg:pypi/" + norm + "@" + url.PathEscape(v),
		Properties: []Property{{"kiln:source", "python"}, {"kiln:path", "/" + strings.TrimSuffix(p, "/METADATA")}}}, true
}
