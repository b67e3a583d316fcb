package main

// wheels: a PyPI-shaped set of wheels repackaged from Debian trixie's real
// CUDA 12.4 binaries, so that `kiln build` installs CUDA torch through pip
// exactly as it would from PyPI: torch-2.6.0+cu124 (torch/lib holds
// libtorch*, libc10* and every non-CUDA library they link, as auditwheel
// vendors them), one nvidia-*-cu12 wheel per CUDA library family laid out
// as PyPI's (site-packages/nvidia/<lib>/lib), RUNPATHs that find them
// ($ORIGIN/../../nvidia/<lib>/lib), torch's Requires-Dist naming them, and
// the pure-Python dependencies torch imports. cuDNN is the fixture's
// generated stand-in (cuDNN is not available offline), and says so in its
// wheel's metadata.
//
// The wheels are byte-for-byte reproducible: sorted entries, fixed times,
// deflate at a fixed level; RUNPATH and SONAME edits are made by patchelf
// on copies, never on the rootfs.

import (
	"archive/zip"
	"bufio"
	"compress/flate"
	"crypto/sha256"
	"debug/elf"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/layers/blob"
)

const (
	pyTag       = "cp313-cp313-manylinux_2_28_x86_64"
	torchWheelV = "2.6.0+cu124"
	distPkgs    = "usr/lib/python3/dist-packages"
)

// nvidiaWheel is one PyPI nvidia-*-cu12 distribution: the libraries (by
// SONAME) it carries under nvidia/<dir>/lib, at the Debian package's
// upstream version (libnccl2 is 2.22.3 in trixie where PyPI's cu124 torch
// pins 2.21.5).
type nvidiaWheel struct {
	name, dir, version string
	sonames            []string
	standIn            bool
}

var nvidiaWheels = []nvidiaWheel{
	{name: "nvidia-cuda-runtime-cu12", dir: "cuda_runtime", version: "12.4.127", sonames: []string{"libcudart.so.12"}},
	{name: "nvidia-cublas-cu12", dir: "cublas", version: "12.4.5.8", sonames: []string{"libcublas.so.12", "libcublasLt.so.12"}},
	{name: "nvidia-cufft-cu12", dir: "cufft", version: "11.2.1.3", sonames: []string{"libcufft.so.11"}},
	{name: "nvidia-curand-cu12", dir: "curand", version: "10.3.5.147", sonames: []string{"libcurand.so.10"}},
	{name: "nvidia-cusolver-cu12", dir: "cusolver", version: "11.6.1.9", sonames: []string{"libcusolver.so.11"}},
	{name: "nvidia-cusparse-cu12", dir: "cusparse", version: "12.3.1.170", sonames: []string{"libcusparse.so.12"}},
	{name: "nvidia-nccl-cu12", dir: "nccl", version: "2.22.3", sonames: []string{"libnccl.so.2"}},
	{name: "nvidia-cuda-nvrtc-cu12", dir: "cuda_nvrtc", version: "12.4.127", sonames: []string{"libnvrtc.so.12", "libnvrtc-builtins.so.12.4"}},
	{name: "nvidia-nvtx-cu12", dir: "nvtx", version: "12.4.127", sonames: []string{"libnvToolsExt.so.1"}},
	{name: "nvidia-nvjitlink-cu12", dir: "nvjitlink", version: "12.4.127", sonames: []string{"libnvJitLink.so.12"}},
	{name: "nvidia-cudnn-cu12", dir: "cudnn", version: "9.0.0.312+kilnstandin", sonames: []string{"libcudnn.so.9"}, standIn: true},
}

// manylinux: libraries a wheel may take from the system (PEP 600's
// manylinux_2_28 policy), and the driver's libcuda, injected by the host.
var systemLibs = map[string]bool{
	"libc.so.6": true, "libm.so.6": true, "libdl.so.2": true, "librt.so.1": true, "libpthread.so.0": true,
	"ld-linux-x86-64.so.2": true, "libstdc++.so.6": true, "libgcc_s.so.1": true, "libutil.so.1": true,
	"libnsl.so.1": true, "libcrypt.so.1": true, "libresolv.so.2": true, "libcuda.so.1": true,
}

// pyDist is a pure-Python (or small-extension) dependency repackaged from
// dist-packages: its top-level modules and what it requires.
type pyDist struct {
	name     string   // distribution name
	modules  []string // top-level packages or module files in dist-packages
	requires []string
}

var pyDists = []pyDist{
	{name: "typing_extensions", modules: []string{"typing_extensions.py"}},
	{name: "mpmath", modules: []string{"mpmath"}},
	{name: "sympy", modules: []string{"sympy", "isympy.py"}, requires: []string{"mpmath>=1.1.0,<1.4"}},
	{name: "filelock", modules: []string{"filelock"}},
	{name: "fsspec", modules: []string{"fsspec"}},
	{name: "networkx", modules: []string{"networkx"}},
	{name: "MarkupSafe", modules: []string{"markupsafe"}},
	{name: "jinja2", modules: []string{"jinja2"}, requires: []string{"MarkupSafe>=2.0"}},
}

// wheelEntry is one file of a wheel: its bytes come from src (a file on
// disk) or data.
type wheelEntry struct {
	name string
	src  string
	data []byte
	mode fs.FileMode
}

type wheelsGen struct {
	root, out, work string
	epoch           time.Time
	libDirs         []string
}

// GenWheels writes the wheels and a SHA256SUMS file into out.
func GenWheels(root, out string, epoch time.Time) error {
	if _, err := exec.LookPath("patchelf"); err != nil {
		return fmt.Errorf("wheels: patchelf not found (apt-get install patchelf)")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(out, ".work-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	g := &wheelsGen{root: root, out: out, work: work, epoch: epoch}
	g.libDirs = g.searchPath()
	var sums []string
	add := func(fn string, err error) error {
		if err != nil {
			return err
		}
		h, err := blob.FileDigest(filepath.Join(out, fn))
		b := h.Hex
		if err != nil {
			return err
		}
		sums = append(sums, b+"  "+fn)
		log.Printf("wheel %s", fn)
		return nil
	}
	usedNvidia, err := g.torchWheel(add)
	if err != nil {
		return err
	}
	for _, w := range nvidiaWheels {
		if !usedNvidia[w.name] {
			continue
		}
		if err := add(g.nvidiaWheel(w)); err != nil {
			return err
		}
	}
	for _, d := range pyDists {
		if err := add(g.pyWheel(d)); err != nil {
			return err
		}
	}
	sort.Slice(sums, func(i, j int) bool { return sums[i][66:] < sums[j][66:] })
	return atomicfile.WriteFile(filepath.Join(out, "SHA256SUMS"), []byte(strings.Join(sums, "\n")+"\n"), 0o644)
}

// searchPath is the dynamic linker's: the multiarch dirs, then ld.so.conf.d.
func (g *wheelsGen) searchPath() []string {
	dirs := []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib", "usr/lib"}
	confs, _ := filepath.Glob(filepath.Join(g.root, "etc/ld.so.conf.d/*.conf"))
	sort.Strings(confs)
	for _, c := range confs {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "/") {
				dirs = append(dirs, strings.TrimPrefix(l, "/"))
			}
		}
	}
	return dirs
}

// resolve follows symlinks of p (an image path, no leading slash) inside
// root, absolute targets meaning root-relative, and returns the host path
// of the regular file it names.
func (g *wheelsGen) resolve(p string) (string, error) {
	cur := path.Clean(p)
	for i := 0; i < 40; i++ {
		// resolve parents first: walk components
		parts := strings.Split(cur, "/")
		resolved := ""
		changed := false
		for j, part := range parts {
			next := path.Join(resolved, part)
			fi, err := os.Lstat(filepath.Join(g.root, next))
			if err != nil {
				return "", err
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				t, err := os.Readlink(filepath.Join(g.root, next))
				if err != nil {
					return "", err
				}
				if strings.HasPrefix(t, "/") {
					next = strings.TrimPrefix(path.Clean(t), "/")
				} else {
					next = path.Join(resolved, t)
				}
				cur = path.Join(append([]string{next}, parts[j+1:]...)...)
				changed = true
				break
			}
			resolved = next
		}
		if !changed {
			return filepath.Join(g.root, cur), nil
		}
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", p)
}

func (g *wheelsGen) findLib(soname string) (string, error) {
	for _, d := range g.libDirs {
		if p, err := g.resolve(path.Join(d, soname)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("wheels: %s not found in the rootfs's library path %v", soname, g.libDirs)
}

func elfNeeded(p string) ([]string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	return f.DynString(elf.DT_NEEDED)
}

func elfRunpath(p string) (string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	rp, err := f.DynString(elf.DT_RUNPATH)
	return strings.Join(rp, ":"), err
}

func isELF(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var m [4]byte
	_, err = io.ReadFull(f, m[:])
	return err == nil && string(m[:]) == "\x7fELF"
}

// torchOwn reports whether soname is one of torch's own libraries, and the
// unversioned name PyPI's wheel gives it (libtorch_cuda.so.2.6 ->
// libtorch_cuda.so).
var torchOwnRe = regexp.MustCompile(`^(lib(?:torch[a-z_]*|c10[a-z_]*|caffe2_nvrtc|shm))\.so\.2\.6$`)

func nvidiaFor(soname string) (nvidiaWheel, bool) {
	for _, w := range nvidiaWheels {
		if slices.Contains(w.sonames, soname) {
			return w, true
		}
	}
	return nvidiaWheel{}, false
}

func (g *wheelsGen) torchWheel(add func(string, error) error) (map[string]bool, error) {
	pkgRoot := filepath.Join(g.root, distPkgs)
	var entries []wheelEntry
	var elfs []string // staged ELF files (wheel paths) to patch
	stage := filepath.Join(g.work, "torch")
	// The Python packages. torch/lib's links to /usr/lib are replaced by the
	// libraries themselves below; torch/bin keeps only torch_shm_manager
	// (Debian's libtorch-cuda-test puts C++ test programs there).
	for _, top := range []string{"torch", "torchgen", "functorch"} {
		base := filepath.Join(pkgRoot, top)
		if _, err := os.Stat(base); err != nil {
			continue
		}
		err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(pkgRoot, p)
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				if d.Name() == "__pycache__" {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasPrefix(rel, "torch/lib/") {
				return nil
			}
			if strings.HasPrefix(rel, "torch/bin/") && rel != "torch/bin/torch_shm_manager" {
				return nil
			}
			src, err := g.resolve(path.Join(distPkgs, rel))
			if errors.Is(err, fs.ErrNotExist) {
				// A link into a -dev package that is not installed
				// (torch/include -> /usr/include/ATen): PyPI's wheel
				// ships headers; a runtime needs none.
				return nil
			}
			if err != nil {
				return err
			}
			fi, err := os.Stat(src)
			if err != nil {
				return err
			}
			if fi.IsDir() {
				// torch/test -> /usr/lib/libtorch-cuda-test: Debian's C++
				// tests, not part of PyPI's wheel.
				return nil
			}
			e := wheelEntry{name: rel, src: src, mode: fi.Mode().Perm()}
			if isELF(src) {
				dst := filepath.Join(stage, rel)
				if err := copyFile(src, dst); err != nil {
					return err
				}
				e.src = dst
				elfs = append(elfs, rel)
			}
			entries = append(entries, e)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	// torch's own libraries under their unversioned names, then the
	// closure of what they and the extension modules link.
	ownLibs, err := filepath.Glob(filepath.Join(g.root, "usr/lib/x86_64-linux-gnu", "lib*.so.2.6"))
	if err != nil {
		return nil, err
	}
	renames := map[string]string{} // versioned soname -> unversioned
	ownRels := map[string]bool{}   // torch/lib paths of torch's own libraries
	for _, p := range ownLibs {
		so := filepath.Base(p)
		m := torchOwnRe.FindStringSubmatch(so)
		if m == nil {
			continue
		}
		renames[so] = m[1] + ".so"
		src, err := g.resolve(path.Join("usr/lib/x86_64-linux-gnu", so))
		if err != nil {
			return nil, err
		}
		rel := "torch/lib/" + m[1] + ".so"
		if err := copyFile(src, filepath.Join(stage, rel)); err != nil {
			return nil, err
		}
		entries = append(entries, wheelEntry{name: rel, src: filepath.Join(stage, rel), mode: 0o755})
		elfs = append(elfs, rel)
		ownRels[rel] = true
	}
	if len(renames) == 0 {
		return nil, fmt.Errorf("wheels: no libtorch*.so.2.6 under %s/usr/lib/x86_64-linux-gnu (is python3-torch-cuda installed?)", g.root)
	}
	queue := slices.Clone(elfs)
	vendored := map[string]bool{}
	usedNvidia := map[string]bool{}
	for len(queue) > 0 {
		rel := queue[0]
		queue = queue[1:]
		need, err := elfNeeded(filepath.Join(stage, rel))
		if err != nil {
			return nil, err
		}
		for _, so := range need {
			switch {
			case renames[so] != "" || systemLibs[so] || vendored[so]:
			case strings.HasPrefix(so, "libpython3"):
			default:
				if w, ok := nvidiaFor(so); ok {
					usedNvidia[w.name] = true
					continue
				}
				src, err := g.findLib(so)
				if err != nil {
					return nil, fmt.Errorf("%s needs %s: %w", rel, so, err)
				}
				vendored[so] = true
				vr := "torch/lib/" + so
				if err := copyFile(src, filepath.Join(stage, vr)); err != nil {
					return nil, err
				}
				entries = append(entries, wheelEntry{name: vr, src: filepath.Join(stage, vr), mode: 0o755})
				elfs = append(elfs, vr)
				queue = append(queue, vr)
			}
		}
	}
	// nvrtc loads its builtins by name; the nvidia wheels' own
	// dependencies (cusolver -> cublas, cusparse, nvJitLink) come along.
	for changed := true; changed; {
		changed = false
		for _, w := range nvidiaWheels {
			if !usedNvidia[w.name] {
				continue
			}
			for _, so := range w.sonames {
				p, err := g.findLib(so)
				if err != nil {
					return nil, err
				}
				need, err := elfNeeded(p)
				if err != nil {
					return nil, err
				}
				for _, n := range need {
					if d, ok := nvidiaFor(n); ok && !usedNvidia[d.name] {
						usedNvidia[d.name] = true
						changed = true
					}
				}
			}
		}
	}
	var rpathDirs []string
	for _, w := range nvidiaWheels {
		if usedNvidia[w.name] {
			rpathDirs = append(rpathDirs, w.dir)
		}
	}
	for _, rel := range elfs {
		// $ORIGIN-relative paths from the file's own directory to torch/lib
		// and each nvidia/<lib>/lib (torch/_C -> lib, functorch/_C ->
		// ../torch/lib, torch/lib/x -> ../../nvidia/cublas/lib).
		dir := path.Dir(rel)
		from := func(target string) string {
			r, err := filepath.Rel(dir, target)
			if err != nil {
				panic(err) // both are clean relative paths inside the wheel
			}
			return "$ORIGIN/" + filepath.ToSlash(r)
		}
		rp := []string{"$ORIGIN"}
		if dir != "torch/lib" {
			rp = append(rp, from("torch/lib"))
		}
		for _, d := range rpathDirs {
			rp = append(rp, from("nvidia/"+d+"/lib"))
		}
		// One edit per patchelf run: patchelf 0.14 (bookworm) writes a
		// wrong RUNPATH when --set-rpath and --replace-needed share a run.
		p := filepath.Join(stage, rel)
		need, _ := elfNeeded(p)
		for _, n := range need {
			if u := renames[n]; u != "" {
				if err := patchelf(p, "--replace-needed", n, u); err != nil {
					return nil, err
				}
			}
		}
		if ownRels[rel] {
			if err := patchelf(p, "--set-soname", path.Base(rel)); err != nil {
				return nil, err
			}
		}
		if err := patchelf(p, "--set-rpath", strings.Join(rp, ":")); err != nil {
			return nil, err
		}
		if got, err := elfRunpath(p); err != nil || got != strings.Join(rp, ":") {
			return nil, fmt.Errorf("patchelf: %s has RUNPATH %q, want %q (%v)", rel, got, strings.Join(rp, ":"), err)
		}
	}
	reqs := []string{"filelock", "typing-extensions>=4.10.0", "sympy>=1.13.1", "networkx", "jinja2", "fsspec"}
	for _, w := range nvidiaWheels {
		if usedNvidia[w.name] {
			v, _, _ := strings.Cut(w.version, "+")
			reqs = append(reqs, w.name+"=="+v)
		}
	}
	meta := metadata("torch", torchWheelV, ">=3.9.0", reqs,
		"Tensors and Dynamic neural networks in Python with strong GPU acceleration",
		"kiln fixture: Debian trixie's python3-torch-cuda 2.6.0+dfsg (a real CUDA 12.4 build: SASS sm_50..sm_90, PTX compute_90) repackaged as PyPI lays out torch+cu124; non-CUDA libraries vendored in torch/lib, CUDA libraries from the nvidia-*-cu12 wheels named below. No triton wheel (not packaged offline).")
	fn := wheelName("torch", torchWheelV, pyTag)
	return usedNvidia, add(fn, g.writeWheel(fn, "torch", torchWheelV, pyTag, meta, entries))
}

func (g *wheelsGen) nvidiaWheel(w nvidiaWheel) (string, error) {
	tag := "py3-none-manylinux2014_x86_64"
	stage := filepath.Join(g.work, w.name)
	entries := []wheelEntry{
		{name: "nvidia/__init__.py", data: nil, mode: 0o644},
		{name: "nvidia/" + w.dir + "/__init__.py", data: nil, mode: 0o644},
		{name: "nvidia/" + w.dir + "/lib/__init__.py", data: nil, mode: 0o644},
	}
	for _, so := range w.sonames {
		src, err := g.findLib(so)
		if err != nil {
			return "", err
		}
		rel := "nvidia/" + w.dir + "/lib/" + so
		dst := filepath.Join(stage, rel)
		if err := copyFile(src, dst); err != nil {
			return "", err
		}
		need, err := elfNeeded(dst)
		if err != nil {
			return "", err
		}
		rp := []string{"$ORIGIN"}
		for _, n := range need {
			if d, ok := nvidiaFor(n); ok && d.dir != w.dir {
				rp = append(rp, "$ORIGIN/../../"+d.dir+"/lib")
			}
		}
		if err := patchelf(dst, "--set-rpath", strings.Join(rp, ":")); err != nil {
			return "", err
		}
		entries = append(entries, wheelEntry{name: rel, src: dst, mode: 0o755})
	}
	summary := "CUDA library " + strings.TrimSuffix(strings.TrimPrefix(w.name, "nvidia-"), "-cu12")
	desc := "kiln fixture: the library from Debian trixie's CUDA 12.4.1 packages, laid out as NVIDIA's PyPI wheel."
	if w.standIn {
		summary = "kiln STAND-IN for cuDNN 9 (not NVIDIA cuDNN)"
		desc = "kiln fixture STAND-IN: a generated libcudnn.so.9 exporting the symbols torch imports; every call fails but cudnnGetVersion/cudnnGetProperty. NVIDIA cuDNN is not available offline."
	}
	fn := wheelName(w.name, w.version, tag)
	return fn, g.writeWheel(fn, w.name, w.version, tag, metadata(w.name, w.version, ">=3", nil, summary, desc), entries)
}

func (g *wheelsGen) pyWheel(d pyDist) (string, error) {
	pkgRoot := filepath.Join(g.root, distPkgs)
	version := ""
	for _, suf := range []string{".dist-info", ".egg-info"} {
		m, _ := filepath.Glob(filepath.Join(pkgRoot, d.name+"-*"+suf))
		if len(m) == 0 {
			// Debian names some by their import name (MarkupSafe-2.1.5.egg-info).
			m, _ = filepath.Glob(filepath.Join(pkgRoot, strings.ReplaceAll(d.name, "-", "_")+"-*"+suf))
		}
		if len(m) > 0 {
			b := strings.TrimSuffix(filepath.Base(m[0]), suf)
			version = b[strings.LastIndex(b, "-")+1:]
			break
		}
	}
	if version == "" {
		return "", fmt.Errorf("wheels: no dist-info or egg-info for %s in %s", d.name, pkgRoot)
	}
	tag := "py3-none-any"
	var entries []wheelEntry
	for _, mod := range d.modules {
		base := filepath.Join(pkgRoot, mod)
		err := filepath.WalkDir(base, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.IsDir() {
				if de.Name() == "__pycache__" {
					return filepath.SkipDir
				}
				return nil
			}
			rel, _ := filepath.Rel(pkgRoot, p)
			src, err := g.resolve(path.Join(distPkgs, filepath.ToSlash(rel)))
			if err != nil {
				return err
			}
			if strings.HasSuffix(p, ".so") {
				tag = pyTag
			}
			fi, err := os.Stat(src)
			if err != nil {
				return err
			}
			entries = append(entries, wheelEntry{name: filepath.ToSlash(rel), src: src, mode: fi.Mode().Perm()})
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	fn := wheelName(d.name, version, tag)
	return fn, g.writeWheel(fn, d.name, version, tag, metadata(d.name, version, ">=3.8", d.requires, d.name, "kiln fixture: repackaged from Debian trixie's python3 package."), entries)
}

func metadata(name, version, requiresPython string, requires []string, summary, desc string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: %s\n", name, version, summary, requiresPython)
	for _, r := range requires {
		fmt.Fprintf(&b, "Requires-Dist: %s\n", r)
	}
	fmt.Fprintf(&b, "\n%s\n", desc)
	return []byte(b.String())
}

func wheelName(name, version, tag string) string {
	return fmt.Sprintf("%s-%s-%s.whl", strings.ReplaceAll(name, "-", "_"), version, tag)
}

// writeWheel writes a deterministic wheel: entries sorted, times fixed,
// dist-info (METADATA, WHEEL, top_level.txt, RECORD) last.
func (g *wheelsGen) writeWheel(fn, name, version, tag string, meta []byte, entries []wheelEntry) error {
	dist := strings.ReplaceAll(name, "-", "_") + "-" + version + ".dist-info"
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	tops := map[string]bool{}
	for _, e := range entries {
		t, _, _ := strings.Cut(e.name, "/")
		tops[strings.TrimSuffix(t, ".py")] = true
	}
	topList := make([]string, 0, len(tops))
	for t := range tops {
		topList = append(topList, t)
	}
	sort.Strings(topList)
	purelib := "false"
	if strings.HasSuffix(tag, "-none-any") {
		purelib = "true"
	}
	entries = append(entries,
		wheelEntry{name: dist + "/METADATA", data: meta, mode: 0o644},
		wheelEntry{name: dist + "/WHEEL", data: []byte(fmt.Sprintf("Wheel-Version: 1.0\nGenerator: kiln-fixturegen\nRoot-Is-Purelib: %s\nTag: %s\n", purelib, tag)), mode: 0o644},
		wheelEntry{name: dist + "/top_level.txt", data: []byte(strings.Join(topList, "\n") + "\n"), mode: 0o644},
	)
	f, err := atomicfile.Create(filepath.Join(g.out, fn), 0o644)
	if err != nil {
		return err
	}
	defer f.Abort()
	bw := bufio.NewWriterSize(f, 1<<20)
	z := zip.NewWriter(bw)
	z.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, 6) })
	var record strings.Builder
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: g.epoch.UTC()}
		h.SetMode(e.mode)
		w, err := z.CreateHeader(h)
		if err != nil {
			return err
		}
		sh := sha256.New()
		var n int64
		if e.src != "" {
			src, err := os.Open(e.src)
			if err != nil {
				return err
			}
			n, err = io.Copy(io.MultiWriter(w, sh), src)
			src.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", e.src, err)
			}
		} else {
			w.Write(e.data)
			sh.Write(e.data)
			n = int64(len(e.data))
		}
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", e.name, base64.RawURLEncoding.EncodeToString(sh.Sum(nil)), n)
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", dist)
	h := &zip.FileHeader{Name: dist + "/RECORD", Method: zip.Deflate, Modified: g.epoch.UTC()}
	h.SetMode(0o644)
	w, err := z.CreateHeader(h)
	if err != nil {
		return err
	}
	io.WriteString(w, record.String())
	if err := z.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Commit()
}

func patchelf(p string, args ...string) error {
	out, err := exec.Command("patchelf", append(args, p)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("patchelf %s %s: %v: %s", strings.Join(args, " "), p, err, out)
	}
	return nil
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return atomicfile.Copy(src, dst, 0o755)
}
