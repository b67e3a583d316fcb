package slim

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/layers"
)

// whyUnreferenced is the removal reason of libraries prune drops; the
// report sums them as the class unreferenced_libs.
const whyUnreferenced = "unreferenced_libs"

// libNameRe matches shared library file names: libfoo.so, libfoo.so.1,
// libfoo.so.1.2.3, libfoo-1.2.so.
var libNameRe = regexp.MustCompile(`\.so(\.[0-9][^/]*)?$`)

// dlopenKeep are libraries programs load with dlopen, by name, which no
// DT_NEEDED shows: always kept when present.
var dlopenKeep = []struct {
	re  *regexp.Regexp
	why string
}{
	{regexp.MustCompile(`^lib(cuda|nvcuvid|nvidia-[a-z0-9_-]+|nvoptix)\.so`), "the NVIDIA driver's user-space libraries (normally injected by the container runtime; libcuda is dlopen'ed by the CUDA runtime)"},
	{regexp.MustCompile(`^libnvrtc(-builtins)?\.so`), "NVRTC is dlopen'ed by torch and CuPy for run-time kernels (and loads its builtins itself)"},
	{regexp.MustCompile(`^libcudnn[a-z_]*\.so`), "cuDNN loads its sub-libraries with dlopen"},
	{regexp.MustCompile(`^libnvJitLink\.so`), "nvJitLink is dlopen'ed for run-time linking"},
	{regexp.MustCompile(`^libcupti\.so`), "CUPTI is dlopen'ed by profilers (torch.profiler)"},
	{regexp.MustCompile(`^libnccl\.so`), "NCCL is dlopen'ed by some frameworks"},
	{regexp.MustCompile(`^(libnss_[a-z0-9_]+|libnsl|libresolv|ld-linux[a-z0-9_-]*|libthread_db)\.so`), "glibc loads NSS modules (and the loader) by name"},
}

// dlopenIfKept are libraries loaded with dlopen by a library that is kept:
// kept when one of the owners is.
var dlopenIfKept = []struct {
	owner, lib *regexp.Regexp
	why        string
}{
	{regexp.MustCompile(`^libcublas\.so`), regexp.MustCompile(`^libcublasLt\.so`), "libcublas is kept and loads libcublasLt"},
	{regexp.MustCompile(`^lib(GL|GLX|EGL|OpenGL|GLESv[12]_CM|GLESv2)\.so`), regexp.MustCompile(`^lib(GLX|EGL)_[A-Za-z0-9]+\.so|^libglapi\.so|^libGLdispatch\.so`), "libglvnd is kept and loads its vendor libraries (GLX/EGL)"},
}

// pluginDirs are directories below a library directory whose objects are
// loaded with dlopen by path, by the owners: kept (and followed) when an
// owner is kept. owner nil: reached only through links (alternatives).
// Other subdirectories are never pruned, and their objects are roots.
var pluginDirs = []struct {
	dirs  []string
	owner *regexp.Regexp
}{
	{[]string{"dri", "gbm"}, regexp.MustCompile(`^lib(GLX_mesa|EGL_mesa|gbm|GL|OSMesa)\.so`)},
	{[]string{"vdpau"}, regexp.MustCompile(`^libvdpau\.so`)},
	{[]string{"gconv"}, regexp.MustCompile(`^libc\.so`)},
	{[]string{"security"}, regexp.MustCompile(`^libpam\.so`)},
	{[]string{"sasl2"}, regexp.MustCompile(`^libsasl2\.so`)},
	{[]string{"engines-3", "ossl-modules"}, regexp.MustCompile(`^libcrypto\.so`)},
	{[]string{"gdk-pixbuf-2.0"}, regexp.MustCompile(`^libgdk_pixbuf-2\.0\.so`)},
	{[]string{"gio"}, regexp.MustCompile(`^libgio-2\.0\.so`)},
	{[]string{"gstreamer-1.0"}, regexp.MustCompile(`^libgstreamer-1\.0\.so`)},
	{[]string{"qt5", "qt6"}, regexp.MustCompile(`^libQt[56]Core\.so`)},
	{[]string{"libgphoto2", "libgphoto2_port"}, regexp.MustCompile(`^libgphoto2(_port)?\.so`)},
	{[]string{"mfx"}, regexp.MustCompile(`^libmfx(hw64)?\.so`)},
	{[]string{"krb5"}, regexp.MustCompile(`^libkrb5\.so`)},
	{[]string{"libmariadb3"}, regexp.MustCompile(`^libmariadb\.so`)},
	{[]string{"ogdi"}, regexp.MustCompile(`^libogdi\.so`)},
	{[]string{"pulseaudio"}, regexp.MustCompile(`^libpulse\.so`)},
	{[]string{"alsa-lib"}, regexp.MustCompile(`^libasound\.so`)},
	{[]string{"pkcs11"}, regexp.MustCompile(`^libp11-kit\.so`)},
	// UCX (under Open MPI, gloo, NCCL's net plugins) loads its transport
	// modules from ucx/ by name and skips any it cannot open.
	{[]string{"ucx"}, regexp.MustCompile(`^libucs\.so`)},
	// Alternatives targets, the driver's directory, and link-time stubs
	// (libcuda.so for -lcuda: never loaded at run time).
	{[]string{"blas", "lapack", "openblas-pthread", "openblas-openmp", "openblas-serial", "atlas", "nvidia", "stubs"}, nil},
}

// rocmModuleRe matches plugin modules for AMD GPUs (ROCm) that
// communication libraries ship beside their CUDA ones (Debian's UCX:
// uct_rocm, ucm_rocm, ucx_perftest_rocm). In an image that carries the CUDA
// runtime they are not kept as plugins of their owner: its GPUs are
// NVIDIA's, where they do nothing, their owner runs without them, and they
// pull in the ROCm stack (HIP, comgr and LLVM: 212 MB in Debian's torch
// image). Something else that needs that stack still keeps it.
var rocmModuleRe = regexp.MustCompile(`^lib(uct|ucm|ucx_perftest)_rocm\.so`)

// gccLibDirRe is gcc's per-version library directory (Debian's
// /usr/lib/gcc/x86_64-linux-gnu/13/).
var gccLibDirRe = regexp.MustCompile(`^usr/(local/)?lib/gcc/[^/]+/[^/]+/`)

// cudartRe matches the CUDA runtime library, the mark of a CUDA image.
var cudartRe = regexp.MustCompile(`^libcudart\.so`)

const whyROCmModule = "a module for AMD GPUs (ROCm) in a CUDA image: its owner skips modules it cannot open"

// PruneReport accounts for prune_libs.
type PruneReport struct {
	Mode string `json:"mode"`
	// SearchDirs are the dynamic linker's directories, in search order
	// (ld.so.conf, LD_LIBRARY_PATH of the image, defaults); libraries
	// directly in them (and in known plugin directories below them) are
	// the candidates.
	SearchDirs     []string `json:"search_dirs"`
	Roots          int      `json:"roots"`
	Candidates     int      `json:"candidates"`
	CandidateBytes int64    `json:"candidate_bytes"`
	Kept           int      `json:"kept"`
	DroppedFiles   int      `json:"dropped_files"`
	DroppedBytes   int64    `json:"dropped_bytes"`
	// Top are the largest dropped libraries, with why.
	Top []RemovedFile `json:"top"`
	// TopKept are the largest candidates kept, with what brought each in
	// (its first referrer in the closure, or a keep-list).
	TopKept []KeptReason `json:"top_kept"`
	// KeptByList are candidates kept only because a keep-list names them.
	KeptByList []KeptReason `json:"kept_by_list"`
	// Unresolved are needed names found nowhere in the image (the host may
	// inject them: libcuda.so.1).
	Unresolved []Unresolved `json:"unresolved"`
	// Unreadable are ELF files whose dynamic section could not be read:
	// kept, their needs unknown.
	Unreadable []string `json:"unreadable"`
	// Disabled says why nothing was pruned, when nothing was.
	Disabled string `json:"disabled,omitempty"`
}

// Unresolved is a DT_NEEDED name no search found.
type Unresolved struct {
	Name     string   `json:"name"`
	NeededBy []string `json:"needed_by"`
}

// pruner computes the dynamic-link closure over the squashed view.
type pruner struct {
	v       *view
	state   map[*rec]uint8
	arch    string
	conf    []string // ld.so.conf dirs, canonical
	env     []string // LD_LIBRARY_PATH of the image
	defs    []string // default dirs
	libDirs map[string]bool
	byName  map[string][]*vnode // kept ELF files by base name and SONAME
	reached map[*rec]bool
	queue   []item
	unres   map[string][]string
	needers map[*rec][]string // content → who needs it (for the report)
	by      map[*rec]string   // content → what first brought it in
}

type item struct {
	n       *vnode // the node as found (its path is $ORIGIN)
	openDir string // the directory it was found in, before symlinks
	rpath   []string
}

// content is the record holding a node's bytes (a hardlink's target).
func content(r *rec) *rec {
	if r != nil && r.kind == kHardlink && r.linkTo != nil {
		return r.linkTo
	}
	return r
}

func (p *pruner) kept(r *rec) bool { return r != nil && p.state[r] == opEmit }

// canon resolves a directory to its path in the view (following symlinked
// directories: lib → usr/lib); "" when absent.
func (p *pruner) canon(dir string) string {
	n := p.v.Resolve(dir)
	if n == nil || !n.IsDir() {
		return ""
	}
	return n.Path()
}

func triplet(arch string) string {
	switch arch {
	case "arm64":
		return "aarch64-linux-gnu"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	case "s390x":
		return "s390x-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// readConf reads ld.so.conf and what it includes (glibc: "include GLOB",
// relative patterns relative to the including file's directory).
func (p *pruner) readConf(file string, depth int, seen map[string]bool) []string {
	if depth > 8 || seen[file] {
		return nil
	}
	seen[file] = true
	n := p.v.Resolve(file)
	if n == nil || n.Value() == nil || content(n.Value()).text == nil {
		return nil
	}
	var dirs []string
	for _, line := range strings.Split(string(content(n.Value()).text), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "include":
			for _, g := range f[1:] {
				if !strings.HasPrefix(g, "/") {
					g = path.Join("/", path.Dir(file), g)
				}
				dir, pat := path.Split(strings.TrimPrefix(path.Clean(g), "/"))
				dn := p.v.Resolve(strings.TrimSuffix(dir, "/"))
				if dn == nil || !dn.IsDir() {
					continue
				}
				for _, c := range dn.Children() {
					if ok, _ := path.Match(pat, c.Name()); ok {
						dirs = append(dirs, p.readConf(path.Join(dn.Path(), c.Name()), depth+1, seen)...)
					}
				}
			}
		case f[0] == "hwcap":
		default:
			for _, d := range strings.Split(line, ":") {
				if d = strings.TrimSpace(d); strings.HasPrefix(d, "/") {
					dirs = append(dirs, d)
				}
			}
		}
	}
	return dirs
}

func (p *pruner) canonAll(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if c := p.canon(d); c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// expand substitutes the dynamic string tokens of a RUNPATH/RPATH entry:
// $ORIGIN (both the directory the object was found in and the one it
// really lives in, when a symlink led there: either may be what the loader
// uses), $LIB and $PLATFORM.
func (p *pruner) expand(entry string, it item) []string {
	origins := []string{"/" + path.Dir(it.n.Path())}
	if it.openDir != "" && "/"+it.openDir != origins[0] {
		origins = append(origins, "/"+it.openDir)
	}
	libs := []string{"lib64", "lib/" + triplet(p.arch), "lib"}
	plat := strings.SplitN(triplet(p.arch), "-", 2)[0]
	var out []string
	for _, o := range origins {
		for _, l := range libs {
			e := entry
			for _, tok := range []struct{ k, v string }{{"$ORIGIN", o}, {"${ORIGIN}", o}, {"$LIB", l}, {"${LIB}", l}, {"$PLATFORM", plat}, {"${PLATFORM}", plat}} {
				e = strings.ReplaceAll(e, tok.k, tok.v)
			}
			if strings.HasPrefix(e, "/") && !slices.Contains(out, e) {
				out = append(out, e)
			}
		}
	}
	return out
}

// lookup finds name as the loader would, first match wins; a name found
// nowhere on the search path is matched by file name or SONAME anywhere in
// the image (a loader path set at run time, a missing alternatives link):
// all such matches are kept.
func (p *pruner) lookup(name string, it item) []*vnode {
	info := content(it.n.Value()).elf
	if strings.Contains(name, "/") {
		if n := p.v.Resolve("/" + name); n != nil && !n.IsDir() && p.kept(content(n.Value())) {
			return []*vnode{n}
		}
		return nil
	}
	var dirs []string
	if len(info.runpath) == 0 {
		for _, e := range append(slices.Clone(info.rpath), it.rpath...) {
			dirs = append(dirs, p.expand(e, it)...)
		}
	}
	dirs = append(dirs, p.env...)
	for _, e := range info.runpath {
		dirs = append(dirs, p.expand(e, it)...)
	}
	dirs = append(dirs, p.conf...)
	dirs = append(dirs, p.defs...)
	for _, d := range dirs {
		n := p.v.Resolve(d + "/" + name)
		if n != nil && !n.IsDir() && n.Value() != nil && p.kept(content(n.Value())) && content(n.Value()).elf != nil {
			return []*vnode{n}
		}
	}
	return p.byName[name]
}

// reach adds a node's content to the closure; by says why.
func (p *pruner) reach(n *vnode, openDir string, rpath []string, by string) {
	c := content(n.Value())
	if c == nil || p.reached[c] {
		return
	}
	p.reached[c] = true
	p.by[c] = by
	if c.elf != nil {
		p.queue = append(p.queue, item{n: n, openDir: openDir, rpath: rpath})
	}
}

// run follows DT_NEEDED (and PT_INTERP) from everything queued.
func (p *pruner) run() {
	for len(p.queue) > 0 {
		it := p.queue[0]
		p.queue = p.queue[1:]
		info := content(it.n.Value()).elf
		if info.err != "" {
			continue
		}
		var inherited []string
		if len(info.runpath) == 0 {
			// DT_RPATH applies to what this object loads, and to what
			// those load in turn (unless they have a DT_RUNPATH).
			for _, e := range info.rpath {
				inherited = append(inherited, p.expand(e, it)...)
			}
			inherited = append(inherited, it.rpath...)
		}
		names := slices.Clone(info.needed)
		if info.interp != "" {
			names = append(names, info.interp)
		}
		for _, name := range names {
			found := p.lookup(name, it)
			if len(found) == 0 {
				p.unres[name] = append(p.unres[name], "/"+it.n.Path())
				continue
			}
			for _, n := range found {
				dir := ""
				if !strings.Contains(name, "/") {
					dir = path.Dir(n.Path())
				}
				p.reach(n, dir, inherited, "needed by /"+it.n.Path())
			}
		}
	}
}

// candidateOf says whether a kept library node may be pruned, and through
// which plugin directory rule (-1: directly in a search directory).
func (p *pruner) candidateOf(n *vnode) (bool, int) {
	full := n.Path()
	dir := path.Dir(full)
	if p.libDirs[dir] {
		return true, -1
	}
	// The deepest search directory above it.
	for d := path.Dir(dir); d != "." && d != "/"; d = path.Dir(d) {
		if p.libDirs[d] {
			rel := strings.TrimPrefix(full, d+"/")
			first := strings.SplitN(rel, "/", 2)[0]
			for i, pd := range pluginDirs {
				if slices.Contains(pd.dirs, first) {
					return true, i
				}
			}
			return false, 0
		}
	}
	return false, 0
}

var pythonLibRe = regexp.MustCompile(`^(usr/|usr/local/|opt/conda/)?lib/python[23][^/]*/`)

// prune drops unreferenced libraries from state, in phases: the search
// directories (LD_LIBRARY_PATH, ld.so.conf, the defaults), every kept ELF
// file sorted into candidates (libraries in those directories) and roots,
// the roots' needs followed (with libraries loaded by name and plugin
// directories of kept owners) until nothing changes, and the candidates
// nothing reached dropped, each with who needed it. It returns the
// report.
func (pl *plan) prune(img *layers.Image, v *view, pol *Policy, state map[*rec]uint8, hits []*jitHit, workdir string) *PruneReport {
	rep := &PruneReport{Mode: string(pol.PruneLibs), Top: []RemovedFile{}, TopKept: []KeptReason{}, KeptByList: []KeptReason{}, Unresolved: []Unresolved{}, Unreadable: []string{}}
	p := &pruner{v: v, state: state, arch: img.Platform.Architecture, byName: map[string][]*vnode{}, reached: map[*rec]bool{},
		unres: map[string][]string{}, needers: map[*rec][]string{}, libDirs: map[string]bool{}, by: map[*rec]string{}}
	var env []string
	if img.Config != nil {
		env = img.Config.Config.Env
	}
	p.searchDirs(env, rep)
	ix := p.index(pol, hits, workdir, rep)
	cudaImage := false
	for name := range p.byName {
		cudaImage = cudaImage || cudartRe.MatchString(name)
	}
	// rocmModule: a plugin its owner does not keep (rocmModuleRe).
	rocmModule := func(cd pruneCand) bool {
		return cudaImage && cd.plugin >= 0 && rocmModuleRe.MatchString(cd.n.Name())
	}
	// The image's own program.
	if img.Config != nil {
		if prog := entryProgram(img.Config.Config.Entrypoint, img.Config.Config.Cmd); prog != "" {
			if n := p.findProgram(prog, env); n != nil {
				ix.roots = append(ix.roots, n)
			}
		}
	}
	rep.Roots += len(ix.roots)
	for _, n := range ix.roots {
		p.reach(n, "", nil, "root")
	}
	p.follow(ix.cands, rocmModule, rep)
	pl.dropUnreached(p, ix, rocmModule, rep)
	return rep
}

// searchDirs sets the linker's search directories: LD_LIBRARY_PATH from
// the image's env, ld.so.conf, then the defaults.
func (p *pruner) searchDirs(env []string, rep *PruneReport) {
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == "LD_LIBRARY_PATH" {
			p.env = p.canonAll(splitPath(val))
		}
	}
	p.conf = p.canonAll(p.readConf("etc/ld.so.conf", 0, map[string]bool{}))
	t := triplet(p.arch)
	p.defs = p.canonAll([]string{"/lib/" + t, "/usr/lib/" + t, "/lib64", "/usr/lib64", "/lib", "/usr/lib"})
	for _, d := range slices.Concat(p.env, p.conf, p.defs) {
		p.libDirs[d] = true
		if !slices.Contains(rep.SearchDirs, "/"+d) {
			rep.SearchDirs = append(rep.SearchDirs, "/"+d)
		}
	}
}

// pruneCand is a library prune may drop; plugin is its pluginDirs index
// (-1 when it lies directly in a search directory).
type pruneCand struct {
	n      *vnode
	plugin int
}

// pruneIndex is every kept ELF file sorted: the candidates (isCand their
// content records) and the roots, already reached for links into the
// search directories from outside them.
type pruneIndex struct {
	cands  []pruneCand
	isCand map[*rec]bool
	roots  []*vnode
}

// index walks every kept file: ELF objects indexed by name, libraries
// sorted into candidates and roots.
func (p *pruner) index(pol *Policy, hits []*jitHit, workdir string, rep *PruneReport) *pruneIndex {
	v := p.v
	ix := &pruneIndex{isCand: map[*rec]bool{}}
	type linkRoot struct{ link, target *vnode }
	var linkRoots []linkRoot
	v.Root().Walk(func(n *vnode) {
		r := n.Value()
		if r != nil && r.kind == kSymlink && p.kept(r) {
			// A link from outside the linker's directories to a library
			// (torch/lib/libtorch_global_deps.so → /usr/lib/...) is a
			// path someone opens: the library is a root. Links inside
			// them (SONAME and dev links) are not.
			// Links in gcc's own directory (libasan.so → libasan.so.8)
			// are link-time names for gcc -lNAME: once no run-time
			// compiler is kept they root nothing, and what a program
			// loads it needs by SONAME.
			if ok, _ := p.candidateOf(n); !ok && !(len(hits) == 0 && gccLibDirRe.MatchString(n.Path())) {
				if t := v.Resolve(n.Path()); t != nil && !t.IsDir() && t.Value() != nil && p.kept(content(t.Value())) && content(t.Value()).elf != nil {
					linkRoots = append(linkRoots, linkRoot{n, t})
				}
			}
			return
		}
		if r == nil || n.IsDir() || (r.kind != kFile && r.kind != kHardlink) || !p.kept(r) {
			return
		}
		c := content(r)
		if c == nil || c.elf == nil {
			return
		}
		full := n.Path()
		if c.elf.err != "" {
			rep.Unreadable = append(rep.Unreadable, "/"+full+": "+c.elf.err)
			return // kept, needs unknown
		}
		p.byName[n.Name()] = append(p.byName[n.Name()], n)
		if c.elf.soname != "" && c.elf.soname != n.Name() {
			p.byName[c.elf.soname] = append(p.byName[c.elf.soname], n)
		}
		ok, plugin := false, 0
		if libNameRe.MatchString(n.Name()) && c.elf.interp == "" && pythonPackage(full) == "" && !pythonLibRe.MatchString(full) &&
			!(workdir != "" && strings.HasPrefix(full, workdir+"/")) && !strings.HasPrefix(full, "app/") {
			ok, plugin = p.candidateOf(n)
		}
		if ok && len(hits) > 0 && (c.class == classify.ClassCUDALibs || classify.InCUDARoot(full)) {
			// A run-time kernel compiler links against these.
			ok = false
		}
		if ok {
			if g, m := matchAny(pol.KeepLibs, full); m || matchBase(pol.KeepLibs, n.Name()) {
				if g == "" {
					g, _ = matchBaseGlob(pol.KeepLibs, n.Name())
				}
				rep.KeptByList = append(rep.KeptByList, KeptReason{Path: "/" + full, Files: 1, Bytes: c.size, Reason: "keep_libs " + g})
				ok = false
			}
		}
		if ok {
			for _, k := range dlopenKeep {
				if k.re.MatchString(n.Name()) {
					rep.KeptByList = append(rep.KeptByList, KeptReason{Path: "/" + full, Files: 1, Bytes: c.size, Reason: k.why})
					ok = false
					break
				}
			}
		}
		if ok {
			ix.cands = append(ix.cands, pruneCand{n, plugin})
			ix.isCand[c] = true
			rep.Candidates++
			rep.CandidateBytes += c.size
			return
		}
		ix.roots = append(ix.roots, n)
	})
	// A file reached both as a candidate name and a root name is a root.
	for _, n := range ix.roots {
		delete(ix.isCand, content(n.Value()))
	}
	for _, lr := range linkRoots {
		c := content(lr.target.Value())
		delete(ix.isCand, c)
		if !p.reached[c] {
			p.reach(lr.target, path.Dir(lr.link.Path()), nil, "linked from /"+lr.link.Path())
			rep.Roots++
		}
	}
	return ix
}

// follow reaches what the roots need, then the libraries loaded by name
// or plugin directories of kept owners join, until nothing changes.
func (p *pruner) follow(cands []pruneCand, rocmModule func(pruneCand) bool, rep *PruneReport) {
	for {
		p.run()
		added := false
		keptNames := map[string]bool{}
		for c := range p.reached {
			keptNames[path.Base(c.path)] = true
			if c.elf != nil && c.elf.soname != "" {
				keptNames[c.elf.soname] = true
			}
		}
		owned := func(re *regexp.Regexp) bool {
			for name := range keptNames {
				if re.MatchString(name) {
					return true
				}
			}
			return false
		}
		for _, cd := range cands {
			c := content(cd.n.Value())
			if p.reached[c] {
				continue
			}
			why := ""
			if cd.plugin >= 0 && pluginDirs[cd.plugin].owner != nil && owned(pluginDirs[cd.plugin].owner) && !rocmModule(cd) {
				why = "plugin directory of a kept library (" + pluginDirs[cd.plugin].owner.String() + ")"
			}
			for _, k := range dlopenIfKept {
				if why == "" && k.lib.MatchString(cd.n.Name()) && owned(k.owner) {
					why = k.why
				}
			}
			if why != "" {
				rep.KeptByList = append(rep.KeptByList, KeptReason{Path: "/" + cd.n.Path(), Files: 1, Bytes: c.size, Reason: why})
				p.reach(cd.n, "", nil, why)
				added = true
			}
		}
		if !added {
			break
		}
	}

}

// dropUnreached drops the candidates nothing reached, each with why (who
// among the dropped needed it), and fills the report's tops and what was
// left unresolved.
func (pl *plan) dropUnreached(p *pruner, ix *pruneIndex, rocmModule func(pruneCand) bool, rep *PruneReport) {
	cands, isCand, state := ix.cands, ix.isCand, p.state
	// Who, among the dropped, needs each dropped library (the report's why).
	for _, cd := range cands {
		c := content(cd.n.Value())
		if p.reached[c] || c.elf == nil {
			continue
		}
		for _, name := range c.elf.needed {
			for _, n := range p.lookup(name, item{n: cd.n}) {
				if t := content(n.Value()); t != nil && !p.reached[t] {
					p.needers[t] = append(p.needers[t], path.Base(cd.n.Path()))
				}
			}
		}
	}

	var dropped []RemovedFile
	var keptC []KeptReason
	for _, cd := range cands {
		r := cd.n.Value()
		c := content(r)
		if p.reached[c] || !isCand[c] {
			if p.reached[c] && r.kind == kFile {
				rep.Kept++
				keptC = append(keptC, KeptReason{Path: "/" + r.path, Files: 1, Bytes: r.size, Reason: p.by[c]})
			}
			continue
		}
		why := "no referrer: nothing kept needs it (DT_NEEDED) and no keep-list names it"
		if rocmModule(cd) {
			why = whyROCmModule
		} else if ns := p.needers[c]; len(ns) > 0 {
			sort.Strings(ns)
			ns = slices.Compact(ns)
			if len(ns) > 3 {
				ns = append(ns[:3], fmt.Sprintf("%d more", len(ns)-3))
			}
			why = "needed only by unreferenced " + strings.Join(ns, ", ")
		}
		state[r] = opSkip
		pl.remove(r, whyUnreferenced+" ("+why+")")
		if r.kind == kFile {
			rep.DroppedFiles++
			rep.DroppedBytes += r.size
			dropped = append(dropped, RemovedFile{Path: "/" + r.path, Bytes: r.size, Layer: r.layer, Class: r.class, Why: why})
		}
	}
	sort.SliceStable(dropped, func(a, b int) bool {
		if dropped[a].Bytes != dropped[b].Bytes {
			return dropped[a].Bytes > dropped[b].Bytes
		}
		return dropped[a].Path < dropped[b].Path
	})
	rep.Top = append(rep.Top, dropped[:min(len(dropped), 20)]...)
	sort.SliceStable(keptC, func(a, b int) bool {
		if keptC[a].Bytes != keptC[b].Bytes {
			return keptC[a].Bytes > keptC[b].Bytes
		}
		return keptC[a].Path < keptC[b].Path
	})
	rep.TopKept = append(rep.TopKept, keptC[:min(len(keptC), 20)]...)
	names := make([]string, 0, len(p.unres))
	for n := range p.unres {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		by := p.unres[n]
		sort.Strings(by)
		by = slices.Compact(by)
		rep.Unresolved = append(rep.Unresolved, Unresolved{Name: n, NeededBy: by[:min(len(by), 5)]})
	}
}

func matchBase(globs []string, base string) bool {
	_, ok := matchBaseGlob(globs, base)
	return ok
}

// matchBaseGlob matches globs without a slash against a file name.
func matchBaseGlob(globs []string, base string) (string, bool) {
	for _, g := range globs {
		if !strings.Contains(g, "/") {
			if ok, _ := path.Match(g, base); ok {
				return g, true
			}
		}
	}
	return "", false
}

// entryProgram is the program the image runs: Entrypoint[0], else Cmd[0].
func entryProgram(ep, cmd []string) string {
	if len(ep) > 0 {
		return ep[0]
	}
	if len(cmd) > 0 {
		return cmd[0]
	}
	return ""
}

// findProgram resolves a program name as a shell would, through PATH.
func (p *pruner) findProgram(prog string, env []string) *vnode {
	if strings.Contains(prog, "/") {
		if n := p.v.Resolve("/" + prog); n != nil && !n.IsDir() && n.Value() != nil {
			return n
		}
		return nil
	}
	pathVar := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == "PATH" {
			pathVar = val
		}
	}
	for _, d := range splitPath(pathVar) {
		if n := p.v.Resolve(d + "/" + prog); n != nil && !n.IsDir() && n.Value() != nil {
			return n
		}
	}
	return nil
}

// isLdSoConf reports whether p is the dynamic linker's configuration.
func isLdSoConf(p string) bool {
	return p == "etc/ld.so.conf" || strings.HasPrefix(p, "etc/ld.so.conf.d/")
}
