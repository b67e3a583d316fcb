package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log"
	"maps"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/kiln-build/kiln/cuda"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The catalog's recipes name NVIDIA's images on Ubuntu (and Debian 12 for
// CUDA 11.8). Offline, the fixtures stand in for them under their real
// names, built from the same Debian trixie layers as the debian13 images
// (the CUDA libraries inside are Debian's 12.4.1 whatever the tag says),
// with what kiln's builds depend on in NVIDIA's: no Python, NVIDIA's
// environment and label per version (../shared/reference/real-bases.md
// §1.2), the /usr/local/cuda-X.Y layout behind /usr/local/cuda and the
// alternatives links, /etc/ld.so.conf.d/nvidia.conf, the license file at
// /, the runtime and devel flavours' entrypoint script, and Ubuntu 24.04's
// user 1000 (ubuntu). They are pushed to the registry only: no test walks
// them as fixtures of analysis.
type nvStandIn struct {
	cuda, os string
	cudart   string // NV_CUDA_CUDART_VERSION
	path     string // PATH's NVIDIA part, before the OS's
	ldPath   string // LD_LIBRARY_PATH
	ldConf   []string
	// flavours: base, runtime, devel, as the catalog names them.
	flavours []string
	// chain is the suffix of the base chain's layers when not trixie's:
	// "-bookworm" for Debian 12 (its apt's Python is 3.11, its CUDA 11.8
	// Debian's), used when scripts/fixtures.sh bookworm built it.
	chain string
}

var nvStandIns = []nvStandIn{
	{cuda: "12.8.1", os: "ubuntu24.04", cudart: "12.8.90-1", path: "/usr/local/cuda/bin", ldPath: "/usr/local/cuda/lib64",
		ldConf: []string{"/usr/local/cuda/lib64"}, flavours: []string{"base", "runtime", "devel"}},
	// 13.0.3: no Dockerfile in the reference; 13.0.0's shape (§1.2).
	{cuda: "13.0.3", os: "ubuntu24.04", cudart: "13.0.96-1", path: "/usr/local/nvidia/bin:/usr/local/cuda/bin", ldPath: "/usr/local/nvidia/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64",
		ldConf: []string{"/usr/local/cuda/lib64"}, flavours: []string{"base", "runtime", "devel"}},
	{cuda: "12.4.1", os: "ubuntu22.04", cudart: "12.4.127-1", path: "/usr/local/nvidia/bin:/usr/local/cuda/bin", ldPath: "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
		ldConf: []string{"/usr/local/nvidia/lib", "/usr/local/nvidia/lib64"}, flavours: []string{"base", "runtime", "devel"}},
	{cuda: "11.8.0", os: "debian12", cudart: "11.8.89-1", path: "/usr/local/nvidia/bin:/usr/local/cuda/bin", ldPath: "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
		ldConf: []string{"/usr/local/nvidia/lib", "/usr/local/nvidia/lib64"}, flavours: []string{"base", "runtime", "devel"}, chain: "-bookworm"},
}

func (s nvStandIn) majorMinor() string {
	p := strings.Split(s.cuda, ".")
	return p[0] + "." + p[1]
}

func (s nvStandIn) ref(flavour string) string {
	return "nvidia/cuda:" + s.cuda + "-" + flavour + "-" + s.os
}

// standInLayers are the generated layers of one stand-in: the NVIDIA
// layout (every flavour) and the entrypoint (runtime and devel).
type standInLayers struct {
	layout, entrypoint v1.Layer
}

// buildStandIns assembles every stand-in flavour over the fixtures' layers
// (base, cudart, runtime, devel: gzip blobs, as the debian13 images).
func buildStandIns(layers map[string]v1.Layer, createdBy map[string]string, epoch time.Time) (map[string]v1.Image, error) {
	passwd, err := readFile(layers["base"], "etc/passwd")
	if err != nil {
		return nil, err
	}
	group, err := readFile(layers["base"], "etc/group")
	if err != nil {
		return nil, err
	}
	out := map[string]v1.Image{}
	for _, s := range nvStandIns {
		layers, createdBy, passwd, group := layers, createdBy, passwd, group
		if _, ok := layers["base"+s.chain]; s.chain != "" && ok {
			layers, createdBy = maps.Clone(layers), maps.Clone(createdBy)
			for _, n := range []string{"base", "cudart", "runtime", "devel"} {
				layers[n], createdBy[n] = layers[n+s.chain], createdBy[n+s.chain]
			}
			if passwd, err = readFile(layers["base"], "etc/passwd"); err != nil {
				return nil, err
			}
			if group, err = readFile(layers["base"], "etc/group"); err != nil {
				return nil, err
			}
		} else if s.chain != "" {
			log.Printf("%s: from trixie's layers (its apt installs Python 3.13, not Debian 12's 3.11); scripts/fixtures.sh bookworm makes it from Debian 12's", s.ref("base"))
		}
		req, _, ok := cuda.ImageRequireCUDA(s.cuda)
		if !ok {
			return nil, fmt.Errorf("compatibility data has no NVIDIA_REQUIRE_CUDA for %s", s.cuda)
		}
		gen, err := s.layers(passwd, group, epoch)
		if err != nil {
			return nil, err
		}
		all := maps.Clone(layers)
		all["nvlayout"], all["nventrypoint"] = gen.layout, gen.entrypoint
		cb := maps.Clone(createdBy)
		cb["nvlayout"] = "RUN /bin/sh -c kiln-fixtures nvidia-layout " + s.cuda + " # buildkit"
		cb["nventrypoint"] = "COPY nvidia_entrypoint.sh entrypoint.d/ /opt/nvidia/ # buildkit"
		base := []step{
			{layer: "base"},
			{cmd: []string{"/bin/bash"}, createdBy: `CMD ["/bin/bash"]`},
			{labels: map[string]string{"maintainer": "NVIDIA CORPORATION <cudatools@nvidia.com>"},
				createdBy: `LABEL maintainer=NVIDIA CORPORATION <cudatools@nvidia.com>`},
			env("NVARCH=x86_64"),
			env("NVIDIA_REQUIRE_CUDA=" + req.String()),
			env("NV_CUDA_CUDART_VERSION=" + s.cudart),
			env("CUDA_VERSION=" + s.cuda),
			{layer: "cudart"},
			{layer: "nvlayout"},
			env("PATH=" + s.path + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
			env("LD_LIBRARY_PATH=" + s.ldPath),
			env("NVIDIA_VISIBLE_DEVICES=all"),
			env("NVIDIA_DRIVER_CAPABILITIES=compute,utility"),
		}
		runtime := append(append([]step{}, base...),
			env("NV_CUDA_LIB_VERSION="+s.cuda+"-1"),
			step{layer: "runtime"},
			env("NVIDIA_PRODUCT_NAME=CUDA"),
			step{layer: "nventrypoint"},
			step{entrypoint: []string{"/opt/nvidia/nvidia_entrypoint.sh"}, createdBy: `ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh"]`},
		)
		devel := append(append([]step{}, runtime...),
			step{layer: "devel"},
			env("LIBRARY_PATH=/usr/local/cuda/lib64/stubs"),
		)
		for _, f := range s.flavours {
			steps := map[string][]step{"base": base, "runtime": runtime, "devel": devel}[f]
			d := imageDef{name: f + "-" + s.cuda + "-" + s.os, steps: steps, compression: Gzip, registryRef: s.ref(f)}
			var ls []v1.Layer
			for _, n := range d.layerNames() {
				ls = append(ls, all[n])
			}
			img, err := assemble(d, ls, cb, epoch)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.ref(f), err)
			}
			out[s.ref(f)] = img
		}
	}
	return out, nil
}

// layers generates the stand-in's own layers.
func (s nvStandIn) layers(passwd, group []byte, epoch time.Time) (standInLayers, error) {
	mm := s.majorMinor()
	major := strings.SplitN(mm, ".", 2)[0]
	dir := "usr/local/cuda-" + mm
	files := []tarFile{
		// CUDA X.Y's tree, over Debian's files (libraries in the
		// multiarch directory, nvcc in /usr/bin in the devel layer).
		{name: dir + "/", mode: 0o755},
		{name: dir + "/bin", link: "/usr/bin"},
		{name: dir + "/include", link: "/usr/include"},
		{name: dir + "/lib64", link: "/usr/lib/x86_64-linux-gnu"},
		{name: dir + "/targets/", mode: 0o755},
		{name: dir + "/targets/x86_64-linux", link: ".."},
		{name: "etc/alternatives/cuda", link: "/" + dir},
		{name: "etc/alternatives/cuda-" + major, link: "/" + dir},
		{name: "usr/local/cuda", link: "/etc/alternatives/cuda"},
		{name: "usr/local/cuda-" + major, link: "/etc/alternatives/cuda-" + major},
		{name: "etc/ld.so.conf.d/nvidia.conf", mode: 0o644, data: []byte(strings.Join(s.ldConf, "\n") + "\n")},
		{name: "NGC-DL-CONTAINER-LICENSE", mode: 0o644, data: []byte("kiln stand-in of NVIDIA's NGC-DL-CONTAINER-LICENSE (the file NVIDIA's images carry at /); not NVIDIA's text.\n")},
	}
	if s.os == "ubuntu24.04" {
		// Ubuntu 24.04's image has the user ubuntu (1000): a user's
		// useradd -u 1000 fails there.
		files = append(files,
			tarFile{name: "etc/passwd", mode: 0o644, data: append(bytes.TrimRight(passwd, "\n"), []byte("\nubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash\n")...)},
			tarFile{name: "etc/group", mode: 0o644, data: append(bytes.TrimRight(group, "\n"), []byte("\nubuntu:x:1000:\n")...)},
			tarFile{name: "home/ubuntu/", mode: 0o750, uid: 1000, gid: 1000},
		)
	}
	layout, err := tarLayer(files, epoch)
	if err != nil {
		return standInLayers{}, err
	}
	ep, err := tarLayer([]tarFile{
		{name: "opt/nvidia/", mode: 0o755},
		{name: "opt/nvidia/entrypoint.d/", mode: 0o755},
		{name: "opt/nvidia/entrypoint.d/10-banner.sh", mode: 0o644, data: []byte(`_banner_file="${NVIDIA_PRODUCT_NAME}"
echo "$(printf '%*s' ${#_banner_file} | tr ' ' '=')" | sed 's/^/====/;s/$/====/'
echo "== ${NVIDIA_PRODUCT_NAME} =="
echo "$(printf '%*s' ${#_banner_file} | tr ' ' '=')" | sed 's/^/====/;s/$/====/'
`)},
		{name: "opt/nvidia/entrypoint.d/12-banner.sh", mode: 0o644, data: []byte("echo\necho \"CUDA Version ${CUDA_VERSION}\"\n")},
		{name: "opt/nvidia/entrypoint.d/15-container-copyright.txt", mode: 0o644, data: []byte("\nkiln stand-in of NVIDIA's container banner; not NVIDIA's text.\n")},
		{name: "opt/nvidia/entrypoint.d/50-gpu-driver-check.sh", mode: 0o644, data: []byte(`if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 ' || ! { [ -e /dev/nvidiactl ] || [ -e /dev/dxg ] || [ -e /dev/nvgpu ]; }; then
  echo
  echo "WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available."
  echo "   Use the NVIDIA Container Toolkit to start this container with GPU support; see"
  echo "   https://docs.nvidia.com/datacenter/cloud-native/ ."
  export NVIDIA_CPU_ONLY=1
fi
`)},
		// As NVIDIA's: the parts in order (.txt shown, .sh sourced), an
		// empty line, then the command or bash.
		{name: "opt/nvidia/nvidia_entrypoint.sh", mode: 0o755, data: []byte(`#!/bin/bash
# kiln stand-in of NVIDIA's /opt/nvidia/nvidia_entrypoint.sh (same behaviour).
set -e
shopt -s nullglob extglob
for _file in /opt/nvidia/entrypoint.d/*@(.txt|.sh); do
  case "${_file}" in
    *.txt) cat "${_file}" ;;
    *.sh) source "${_file}" ;;
  esac
done
echo
if [[ $# -eq 0 ]]; then
  exec /bin/bash
else
  exec "$@"
fi
`)},
	}, epoch)
	if err != nil {
		return standInLayers{}, err
	}
	return standInLayers{layout: layout, entrypoint: ep}, nil
}

type tarFile struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte
	link     string
}

// tarLayer is a small gzip layer of files (parents first, as written),
// with every time at epoch and root's ownership unless said.
func tarLayer(files []tarFile, epoch time.Time) (v1.Layer, error) {
	sort.SliceStable(files, func(i, j int) bool {
		return strings.TrimSuffix(files[i].name, "/") < strings.TrimSuffix(files[j].name, "/")
	})
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	dirs := map[string]bool{}
	var mkdirs func(d string) error
	mkdirs = func(d string) error {
		if d == "." || d == "/" || dirs[d] {
			return nil
		}
		if err := mkdirs(path.Dir(d)); err != nil {
			return err
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX})
	}
	for _, f := range files {
		name := strings.TrimSuffix(f.name, "/")
		if err := mkdirs(path.Dir(name)); err != nil {
			return nil, err
		}
		h := &tar.Header{Name: name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case strings.HasSuffix(f.name, "/"):
			if dirs[name] {
				continue
			}
			dirs[name] = true
			h.Name, h.Typeflag = name+"/", tar.TypeDir
		case f.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, tarball.WithMediaType(types.OCILayer))
}

// readFile reads name from a layer's tar.
func readFile(l v1.Layer, name string) ([]byte, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("the base layer has no /%s", name)
		}
		if err != nil {
			return nil, err
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			return io.ReadAll(tr)
		}
	}
}
