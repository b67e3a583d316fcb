// Package builder turns a resolved recipe plan into a BuildKit LLB graph for
// a slim two-stage CUDA image (wheels fetched or compiled in a devel stage,
// installed into a runtime stage through a bind mount), the image config that
// goes with it, an equivalent Dockerfile, and a client that solves the graph
// on a real buildkitd and exports or pushes the result.
//
// The plan is first lowered to a small, pure description (stages of steps);
// both the LLB graph and the Dockerfile are rendered from that description,
// so the two cannot drift apart.
//
// Run is a whole build once its flags are read (Flags.Parse makes its
// RunOptions; kiln build is flags, Run, report): the content tag's
// answer (the image already built from the same inputs) or the solve,
// the content tag, the EROFS variant, SBOMs and signatures through
// layers/publish, --check (a hook) and --explain; Report renders it.
package builder

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/wheelkey"
)

// Component names one runtime layer; an app-only change re-pushes only the
// ComponentApp layer, a torch bump leaves ComponentSystem alone.
type Component string

// The runtime image's layers on top of the base, in order.
const (
	ComponentSystem     Component = "system"     // python and apt packages
	ComponentTorch      Component = "torch"      // torch, torchvision, torchaudio
	ComponentExtensions Component = "extensions" // flash-attn, bitsandbytes
	ComponentPip        Component = "pip"        // the recipe's extra pip requirements
	ComponentApp        Component = "app"        // the application's files
)

// Mount kinds a step can use.
const (
	MountCache = "cache" // a persistent BuildKit cache directory
	MountBind  = "bind"  // a read-only bind of another stage's directory
	// MountTools is a read-only bind of the kiln-tools local context: a
	// directory holding the kiln executable (ToolsBinary), which prunes
	// the installed libraries' GPU code in the step that installs them.
	MountTools = "tools"
	// MountDownload is a read-only bind of a file BuildKit downloads and
	// checks against its sha256 before any step sees it (Mount.Download):
	// the relocatable Python's archive.
	MountDownload = "download"
)

// The kiln-tools context: its name, where steps see it, the binary in it.
const (
	ToolsName   = "kiln-tools"
	ToolsTarget = "/kiln-tools"
	ToolsBinary = "kiln"
)

// Mount is a mount of a run step.
type Mount struct {
	Kind   string // MountCache or MountBind
	Target string
	ID     string // cache id (cache) or stage name (bind)
	Source string // path in the stage (bind)
	Locked bool   // cache: one writer at a time (apt)
	// Download is the file of a MountDownload mount (ID names it: the
	// exported Dockerfile's stage).
	Download *Download
}

// Download is a file BuildKit fetches over HTTP (llb.HTTP, a
// Dockerfile's ADD --checksum), one per platform, mounted as File.
type Download struct {
	File  string                  // its name in the mount
	What  string                  // what it is, for progress and the Dockerfile
	Files map[string]DownloadFile // by platform, os/arch
}

// DownloadFile is one platform's URL and sha256 (hex).
type DownloadFile struct {
	URL, SHA256 string
}

// For platform (os/arch[/variant]), if the download has one.
func (d *Download) For(platform string) (DownloadFile, bool) {
	goos, arch, _ := strings.Cut(platform, "/")
	arch, _, _ = strings.Cut(arch, "/")
	f, ok := d.Files[goos+"/"+arch]
	return f, ok
}

// Step is one layer-producing operation.
type Step struct {
	Name        string    // human name, shown in progress
	Component   Component // runtime layer it belongs to ("" in devel)
	Shell       string    // a /bin/sh -c command (run steps)
	Mounts      []Mount
	HostNetwork bool       // fetches from the network (indexes on 127.0.0.1 included)
	Copies      []FileCopy // file steps: files from the build context
	Dirs        []string   // file steps: directories made after the copies (the app's workdir)
	Compile     *Compile   // a wheel compiled from source (nil for other steps)
}

// IsFile reports whether the step is a file operation (copies and
// directories, one layer) rather than a command.
func (s Step) IsFile() bool { return len(s.Copies) > 0 || len(s.Dirs) > 0 }

// FileCopy copies Src (relative to the build context) to Dst.
type FileCopy struct {
	Src, Dst string
}

// Stage is a base image and the steps on it.
type Stage struct {
	Name  string // "devel" or "runtime"
	Base  string
	Env   [][2]string // build-time env, in order
	Steps []Step
}

// Layout is the lowered plan: both stages and the probes.
type Layout struct {
	Devel   Stage
	Runtime Stage
	Probes  []string // shell commands run in the runtime image, not exported
}

// NeedsTools reports whether a step mounts the kiln-tools context.
func (l *Layout) NeedsTools() bool {
	for _, st := range []Stage{l.Devel, l.Runtime} {
		for _, step := range st.Steps {
			for _, m := range step.Mounts {
				if m.Kind == MountTools {
					return true
				}
			}
		}
	}
	return false
}

// pruneGPUCode is the shell that prunes the GPU code of what pip installed
// (its purelib and platlib directories) to the plan's fleet, in the step
// that installed it, so the unpruned libraries never reach a layer. Files
// with nothing to prune are not rewritten: a later step that scans torch
// again changes nothing in its layer.
func pruneGPUCode(gc *recipes.PlanGPUCode) string {
	args := []string{ToolsTarget + "/" + ToolsBinary, "fatbin", "prune", "--gpus", strings.Join(gc.Archs, ",")}
	if !gc.KeepPTX {
		args = append(args, "--keep-ptx=false")
	}
	if gc.NVIDIALibs {
		args = append(args, "--prune-nvidia-libs")
	}
	return strings.Join(args, " ") + ` $(python3 -c 'import sysconfig as s; print(*sorted({s.get_path("purelib"), s.get_path("platlib")}))')`
}

const (
	wheelhouse = "/wheelhouse"
	// DefaultPath is the image PATH, as in NVIDIA's CUDA images.
	DefaultPath = "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// DefaultLDLibraryPath is where the NVIDIA container toolkit mounts the driver.
	DefaultLDLibraryPath = "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"
)

var aptMounts = []Mount{
	{Kind: MountCache, Target: "/var/cache/apt", ID: "kiln-apt-cache", Locked: true},
	{Kind: MountCache, Target: "/var/lib/apt/lists", ID: "kiln-apt-lists", Locked: true},
}

// rmBuildLogs removes the files an apt-get install writes whose contents
// depend on when it ran, not on what it installed.
const rmBuildLogs = "rm -f /var/log/dpkg.log /var/log/alternatives.log /var/log/apt/history.log /var/log/apt/term.log /var/log/apt/eipp.log.xz /var/cache/ldconfig/aux-cache"

// Where kiln puts the relocatable Python (python-build-standalone's
// archives hold python/bin/python3...: unpacked in /opt), and where the
// step that unpacks it sees the archive.
const (
	PythonPrefix  = "/opt/python"
	PythonTarget  = "/kiln-python"
	pythonArchive = "cpython.tar.gz"
	// PythonDistName is the exported Dockerfile's stage that downloads it.
	PythonDistName = "python-dist"
)

var (
	pyVersionRe = regexp.MustCompile(`^3\.[0-9]+$`)
	pyDistRe    = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+[a-z0-9]*$`)
	sha256Re    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// checkPython refuses a plan whose Python values are not what a resolve
// writes: MAJOR.MINOR, and for a standalone one a version, a release, and
// per platform an http(s) URL and a sha256.
func checkPython(p *recipes.Plan) error {
	if !pyVersionRe.MatchString(p.Python) {
		return fmt.Errorf("builder: the plan's python %q is not a Python version (3.X): resolve or lock the recipe again", p.Python)
	}
	if p.PythonSource != recipes.PythonStandalone {
		return nil
	}
	d := p.PythonDist
	if d == nil || len(d.Archives) == 0 || !pyDistRe.MatchString(d.Version) || !strings.HasPrefix(d.Version, p.Python+".") || !regexp.MustCompile(`^[0-9]+$`).MatchString(d.Release) {
		return fmt.Errorf("builder: the plan's python_dist %+v does not pin a CPython %s build: resolve or lock the recipe again", d, p.Python)
	}
	for _, a := range d.Archives {
		u, err := url.Parse(a.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || strings.ContainsAny(a.URL, " \t\n\"'$\\") || !sha256Re.MatchString(a.SHA256) {
			return fmt.Errorf("builder: the plan's Python archive for %s (%q, sha256 %q) is not an http(s) URL with a sha256", a.Platform, a.URL, a.SHA256)
		}
	}
	return nil
}

// pythonMount is the read-only mount of the plan's Python archive.
func pythonMount(p *recipes.Plan) Mount {
	d := &Download{File: pythonArchive, What: fmt.Sprintf("CPython %s (python-build-standalone %s)", p.PythonDist.Version, p.PythonDist.Release), Files: map[string]DownloadFile{}}
	for _, a := range p.PythonDist.Archives {
		d.Files[a.Platform] = DownloadFile{URL: a.URL, SHA256: a.SHA256}
	}
	return Mount{Kind: MountDownload, Target: PythonTarget, ID: PythonDistName, Download: d}
}

// standalone says whether the plan's Python is a relocatable CPython kiln
// downloads (else the base OS's python3, through apt).
func standalone(p *recipes.Plan) bool {
	return p.PythonSource == recipes.PythonStandalone && p.PythonDist != nil
}

// unpackPython unpacks the mounted archive into PythonPrefix, with pip
// from the interpreter's own ensurepip (offline) should an archive lack it.
const unpackPython = "mkdir -p /opt && tar -xzf " + PythonTarget + "/" + pythonArchive + " -C /opt --no-same-owner; " +
	PythonPrefix + "/bin/python3 -m pip --version >/dev/null 2>&1 || " + PythonPrefix + "/bin/python3 -m ensurepip --default-pip >/dev/null"

// pythonLinks makes python, python3 and pip (pip3) run the image's
// Python from /usr/local/bin, which comes first on the PATH: a symlink
// to the interpreter, and a pip that is "python3 -m pip" of it. The OS's
// python3 is the one apt put on the PATH; a relocatable one gets python3
// and python3.X links too.
func pythonLinks(p *recipes.Plan) string {
	sh := []string{"mkdir -p /usr/local/bin"}
	if standalone(p) {
		py := PythonPrefix + "/bin/python3"
		sh = append(sh, "py="+py, "ln -sf "+py+" /usr/local/bin/python3", "ln -sf "+PythonPrefix+"/bin/python"+p.Python+" /usr/local/bin/python"+p.Python)
	} else {
		sh = append(sh, "py=$(command -v python3)")
	}
	sh = append(sh,
		`ln -sf "$py" /usr/local/bin/python`,
		`printf '#!/bin/sh\nexec %s -m pip "$@"\n' "$py" > /usr/local/bin/pip`,
		"chmod 755 /usr/local/bin/pip",
		"ln -sf pip /usr/local/bin/pip3")
	return strings.Join(sh, "; ")
}

// pythonCheck fails the step unless python and python3 run the recipe's
// Python version and pip runs it: in the step that provides it, before
// any wheel is fetched or installed for it.
func pythonCheck(p *recipes.Plan, stage string) string {
	what := p.OS + "'s python3 (apt), which kiln's data says is " + p.Python
	if standalone(p) {
		what = "the python-build-standalone archive of CPython " + p.PythonDist.Version
	}
	code := `import sys; v = "%d.%d" % sys.version_info[:2]; sys.exit(0 if v == sys.argv[1] else "kiln: the recipe names Python %s, but %s in the %s stage runs Python %s (%s), from %s" % (sys.argv[1], sys.argv[2], sys.argv[3], sys.version.split()[0], sys.executable, sys.argv[4]))`
	return `for c in python python3; do "$c" -c ` + shq(code) + " " + shq(p.Python) + ` "$c" ` + stage + " " + shq(what) + "; done; " +
		"pip --version | grep -qF " + shq("(python "+p.Python+")") + ` || { echo "kiln: pip in the ` + stage + ` stage does not run the recipe's Python ` + p.Python + `: $(pip --version 2>&1)" >&2; exit 1; }`
}

var pipCache = Mount{Kind: MountCache, Target: "/root/.cache/pip", ID: "kiln-pip-cache"}

// group is a set of pip packages that become one runtime layer.
type group struct {
	comp Component
	dir  string // wheelhouse subdirectory
	pkgs []recipes.PipPackage
}

func groupFor(name string) Component {
	switch strings.ToLower(strings.ReplaceAll(name, "_", "-")) {
	case "torch", "torchvision", "torchaudio":
		return ComponentTorch
	case "flash-attn", "bitsandbytes", "xformers", "triton":
		return ComponentExtensions
	}
	return ComponentPip
}

func groups(p *recipes.Plan) []group {
	gs := []group{{comp: ComponentTorch, dir: "torch"}, {comp: ComponentExtensions, dir: "extensions"}, {comp: ComponentPip, dir: "pip"}}
	for _, pp := range p.Pip {
		c := groupFor(pp.Name)
		for i := range gs {
			if gs[i].comp == c {
				gs[i].pkgs = append(gs[i].pkgs, pp)
			}
		}
	}
	var out []group
	for _, g := range gs {
		if len(g.pkgs) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// Lower turns a plan into stages of steps. It is deterministic: the same plan
// gives the same layout.
func Lower(p *recipes.Plan) (*Layout, error) {
	if p == nil {
		return nil, fmt.Errorf("builder: no plan")
	}
	if p.BaseImages.Devel == "" || p.BaseImages.Runtime == "" {
		return nil, fmt.Errorf("builder: the plan names no devel/runtime base images")
	}
	env := [][2]string{
		{"PATH", DefaultPath},
		{"DEBIAN_FRONTEND", "noninteractive"},
		{"PIP_BREAK_SYSTEM_PACKAGES", "1"},
		{"PIP_DISABLE_PIP_VERSION_CHECK", "1"},
		{"PYTHONDONTWRITEBYTECODE", "1"},
	}
	// The Python's values reach shell lines and the Dockerfile: a plan
	// read from a lock file is checked here.
	if err := checkPython(p); err != nil {
		return nil, err
	}
	// Every consumer of the layout (LLB, Dockerfile, the runtime base's
	// config lookup, the printed plan) gets the full names.
	devel, err := NormalizeRef(p.BaseImages.Devel)
	if err != nil {
		return nil, fmt.Errorf("builder: devel base: %v", err)
	}
	runtime, err := NormalizeRef(p.BaseImages.Runtime)
	if err != nil {
		return nil, fmt.Errorf("builder: runtime base: %v", err)
	}
	L := &Layout{
		Devel:   Stage{Name: "devel", Base: devel, Env: slices.Clone(env)},
		Runtime: Stage{Name: "runtime", Base: runtime, Env: slices.Clone(env)},
		Probes:  slices.Clone(p.Test),
	}
	fab := p.FlashAttnBuild
	// Devel: the recipe's Python and pip (and a compiler toolchain when
	// something is built from source), checked before any wheel is fetched.
	L.Devel.Steps = append(L.Devel.Steps, develPython(p))
	for _, g := range groups(p) {
		dest := path.Join(wheelhouse, g.dir)
		var cmds []string
		var fromIndex []recipes.PipPackage
		for _, pp := range g.pkgs {
			if pp.Name == "flash-attn" && fab != nil || pp.FromSource() {
				continue
			}
			fromIndex = append(fromIndex, pp)
		}
		if len(fromIndex) > 0 {
			cmds = append(cmds, "python3 -m pip download --only-binary=:all: --dest "+dest+" "+indexFlags(fromIndex)+" "+reqArgs(fromIndex))
		}
		sh := "set -e; mkdir -p " + dest
		if len(cmds) > 0 {
			sh += "; " + strings.Join(cmds, "; ")
		}
		L.Devel.Steps = append(L.Devel.Steps, Step{
			Name:        fmt.Sprintf("devel: wheels for %s", g.comp),
			Shell:       sh,
			Mounts:      []Mount{pipCache},
			HostNetwork: true,
		})
		for _, pp := range g.pkgs {
			switch {
			case pp.Name == "flash-attn" && fab != nil:
				L.Devel.Steps = append(L.Devel.Steps, flashAttnCompile(p, fab, pp, dest))
			case pp.FromSource():
				L.Devel.Steps = append(L.Devel.Steps, sourceCompile(p, pp))
			}
		}
	}

	// Runtime: the recipe's Python (+ its apt packages), then one layer per component.
	L.Runtime.Steps = append(L.Runtime.Steps, runtimeSystem(p))
	var links []string
	shared := sharedCUDARuntime(p)
	for _, g := range groups(p) {
		links = append(links, "--find-links "+path.Join(wheelhouse, g.dir))
		for _, pp := range g.pkgs {
			if pp.FromSource() {
				links = append(links, "--find-links "+sourceWheelDir(pp))
			}
		}
		sh := "python3 -m pip install --no-index --no-compile --no-cache-dir " + strings.Join(links, " ") + " " + reqNames(g.pkgs)
		if shared != "" && g.comp == ComponentTorch {
			// Same step, so the wheel's copy never reaches a layer.
			sh += " && python3 -m pip uninstall -y -q " + shared
		}
		mounts := []Mount{{Kind: MountBind, Target: wheelhouse, ID: "devel", Source: wheelhouse}}
		if p.GPUCode != nil && (g.comp == ComponentTorch || g.comp == ComponentExtensions) {
			sh += " && " + pruneGPUCode(p.GPUCode)
			mounts = append(mounts, Mount{Kind: MountTools, Target: ToolsTarget, ID: ToolsName})
		}
		L.Runtime.Steps = append(L.Runtime.Steps, Step{
			Name:      fmt.Sprintf("runtime: install %s", g.comp),
			Component: g.comp,
			Shell:     sh,
			Mounts:    mounts,
		})
	}
	if p.App != nil {
		st := Step{Name: "runtime: app files", Component: ComponentApp}
		for _, f := range p.App.Files {
			st.Copies = append(st.Copies, FileCopy{Src: f.Src, Dst: f.Dst})
		}
		// The workdir exists in the image, as a Dockerfile's WORKDIR
		// makes it: the export and this graph give the same layers.
		if w := path.Clean(p.App.Workdir); p.App.Workdir != "" && w != "/" {
			st.Dirs = []string{w}
		}
		if st.IsFile() {
			L.Runtime.Steps = append(L.Runtime.Steps, st)
		}
	}
	return L, nil
}

// develPython is the devel stage's first step: the recipe's Python, pip,
// and for source builds the toolchain and build backend; python, python3
// and pip run it, and the step fails unless they run the recipe's version.
func develPython(p *recipes.Plan) Step {
	compiled := len(p.Compiled()) > 0
	sh := []string{"set -e"}
	var mounts []Mount
	network := true
	if standalone(p) {
		// The archive is BuildKit's download: only a source build's
		// toolchain and build backend need the network.
		network = compiled
		mounts = append(mounts, pythonMount(p))
		sh = append(sh, unpackPython)
		if compiled {
			mounts = append(mounts, aptMounts...)
			sh = append(sh, aptInstall([]string{"build-essential", "ninja-build", "git"}))
		}
		sh = append(sh, pythonLinks(p), pythonCheck(p, "devel"))
		if compiled {
			// pip wheel --no-build-isolation builds with the
			// interpreter's own setuptools and wheel, and packaging
			// (FlashAttention's setup.py imports it; setuptools'
			// distutils does before its vendored copy is on the path):
			// from the index of what is compiled when the archive
			// lacks them.
			sh = append(sh, "python3 -c 'import setuptools, wheel, packaging' 2>/dev/null || python3 -m pip install --no-cache-dir "+indexFlags(p.Compiled())+" setuptools wheel packaging")
		}
	} else {
		mounts = aptMounts
		pkgs := []string{"python3", "python3-pip"}
		if compiled {
			// A source build runs pip wheel --no-build-isolation: the build
			// backend (setuptools, wheel) and the toolchain come from Debian,
			// installed even when the base already has pip.
			pkgs = append(pkgs, "python3-dev", "python3-setuptools", "python3-wheel", "build-essential", "ninja-build", "git")
			sh = append(sh, aptInstall(pkgs))
		} else {
			sh = append(sh, aptEnsure(pkgs, "python3 -m pip --version >/dev/null 2>&1"))
		}
		sh = append(sh, pythonLinks(p), pythonCheck(p, "devel"))
	}
	return Step{
		Name:        "devel: python and pip",
		Shell:       strings.Join(sh, "; "),
		Mounts:      mounts,
		HostNetwork: network,
	}
}

// runtimeSystem is the runtime stage's first layer: the recipe's Python
// (python, python3 and pip run it, checked) and its apt packages.
func runtimeSystem(p *recipes.Plan) Step {
	sh := []string{"set -e"}
	var mounts []Mount
	network := len(p.Apt) > 0
	// Debian's python3 postinst byte-compiles the stdlib: caches a runtime
	// image should not carry (Python works without them). The
	// relocatable Python's own are part of its archive.
	clean := "find / -xdev -depth -name __pycache__ -type d -exec rm -rf {} + 2>/dev/null || true"
	if standalone(p) {
		mounts = append(mounts, pythonMount(p))
		sh = append(sh, unpackPython, pythonLinks(p))
		if len(p.Apt) > 0 {
			mounts = append(mounts, aptMounts...)
			sh = append(sh, aptInstall(p.Apt))
		}
		clean = "find / -xdev -depth -name __pycache__ -type d -not -path '" + PythonPrefix + "/*' -exec rm -rf {} + 2>/dev/null || true"
	} else {
		network = true
		mounts = aptMounts
		pkgs := append([]string{"python3", "python3-pip"}, p.Apt...)
		if len(p.Apt) > 0 {
			sh = append(sh, aptInstall(pkgs))
		} else {
			sh = append(sh, aptEnsure(pkgs, "python3 -m pip --version >/dev/null 2>&1"))
		}
		sh = append(sh, pythonLinks(p))
	}
	sh = append(sh, pythonCheck(p, "runtime"), clean,
		// apt's and dpkg's logs record wall-clock times, and ldconfig's
		// aux-cache file times; dating the files does not touch
		// contents, so without this two builds from clean caches differ
		// in this layer.
		rmBuildLogs)
	return Step{
		Name:        "runtime: system packages",
		Component:   ComponentSystem,
		Shell:       strings.Join(sh, "; "),
		Mounts:      mounts,
		HostNetwork: network,
	}
}

// lowerPinned is Lower with each Compile step whose project in.SourceHashes
// names pinned to that source archive's sha256.
func lowerPinned(p *recipes.Plan, in Inputs) (*Layout, error) {
	L, err := Lower(p)
	if err != nil || len(in.SourceHashes) == 0 {
		return L, err
	}
	for i, st := range L.Devel.Steps {
		if c := st.Compile; c != nil && in.SourceHashes[c.Package] != "" {
			L.Devel.Steps[i].Shell = c.pinned(in.SourceHashes[c.Package])
		}
	}
	return L, nil
}

// pinFile is where a pinned compile writes its one-line requirements file.
const pinFile = "/tmp/kiln-source-pin.txt"

// pinned is the compile's shell installing from a requirements file
// that pins the source archive's sha256 (pip's hash-checking mode), in
// place of the requirement argument: built from the same parts as the
// unpinned shell, not cut out of it.
func (c *Compile) pinned(sha256hex string) string {
	line := c.Requirement + " --hash=sha256:" + sha256hex
	return "echo " + shq(line) + " > " + pinFile + "; " + c.head + " --require-hashes -r " + pinFile + c.tail
}

// Compile marks the step that compiles a wheel from source: with a
// wheel cache, a build that finds the wheel there replaces the step with
// a copy of the fetched file (Inputs.CachedWheels), and one that compiles
// it exports the wheel from the step's result and pushes it.
type Compile struct {
	Package string // the project: flash-attn
	Dir     string // the wheelhouse directory the wheel is written to
	Glob    string // the wheel's file name pattern in Dir
	// Requirement is what the step's pip wheel compiles (flash-attn==2.7.4):
	// the last word of its shell.
	Requirement string
	// head is the step's shell without its last word, the requirement
	// (pinned puts a hash-checked requirements file there); tail what
	// follows it (dropBuildDeps, or nothing).
	head, tail string
}

// flashAttnCompile is the step that compiles FlashAttention from source
// into dest, against the torch in the torch wheelhouse: a step of its
// own, so that nothing else is in it when a cached wheel replaces it.
func flashAttnCompile(p *recipes.Plan, fab *recipes.FABuild, fa recipes.PipPackage, dest string) Step {
	var flags string
	for _, f := range fab.PipFlags {
		if f != "--no-build-isolation" && f != "--no-deps" {
			flags += shq(f) + " "
		}
	}
	return compileStep(p, fa, flashAttnEnv(fab), flags, dest, "flash_attn-*.whl")
}

// compileStep is the devel step that compiles pp into a wheel in dest
// (pip wheel --no-deps --no-build-isolation, flags before --wheel-dir,
// env before pip), torch installed first when the plan has it and
// uninstalled after (dropBuildDeps). pp's quoted requirement is the pip
// wheel's last word; Compile.pinned puts a hash-checked requirements
// file in its place.
func compileStep(p *recipes.Plan, pp recipes.PipPackage, env []string, flags, dest, glob string) Step {
	if standalone(p) {
		// python-build-standalone's sysconfig names the compilers it was
		// built with (CC 'clang -pthread', CXX 'clang++ -pthread', and
		// linkers starting with them); the devel image has the system's
		// cc and c++, and setuptools takes these from the environment.
		env = append([]string{"CC=cc", "CXX=c++", "LDSHARED='cc -shared'", "LDCXXSHARED='c++ -shared'"}, env...)
	}
	sh := "set -e; mkdir -p " + dest
	var tail string
	if tp := torchPkgs(p); len(tp) > 0 {
		sh += "; python3 -m pip list --format=freeze > " + buildDepsBefore +
			"; python3 -m pip install --no-index --find-links " + path.Join(wheelhouse, "torch") + " " + reqArgs(tp)
		tail = "; " + dropBuildDeps
	}
	sh += "; " + strings.Join(env, " ") + " python3 -m pip wheel --no-deps --no-build-isolation " + flags + "--wheel-dir " + dest + " " + indexFlags([]recipes.PipPackage{pp})
	return Step{
		Name:        "devel: compile " + pp.Name,
		Shell:       sh + " " + shq(pp.Requirement) + tail,
		Mounts:      []Mount{pipCache, {Kind: MountCache, Target: "/root/.cache/ccache", ID: "kiln-ccache"}},
		HostNetwork: true,
		Compile:     &Compile{Package: pp.Name, Dir: dest, Glob: glob, Requirement: pp.Requirement, head: sh, tail: tail},
	}
}

// buildDepsBefore is where a compile that installs torch to build
// against notes what was installed before it (pip list --format=freeze).
const buildDepsBefore = "/tmp/kiln-build-deps-before.txt"

// dropBuildDeps uninstalls, once the wheel is built, what the compile
// installed to build it (torch and its dependencies: every distribution
// not in buildDepsBefore), so the step's snapshot holds the wheel, not a
// second torch: files made and removed within one step leave nothing in
// its layer, and BuildKit keeps ~3.6 GB less per compiled extension of
// the CUDA stack. The wheel is what the runtime stage installs; no later
// devel step imports torch without installing it first. Python itself
// computes the difference (a base without apt may lack grep, sed or
// xargs); nothing new installed (torch in the base already) uninstalls
// nothing.
const dropBuildDeps = "python3 -m pip list --format=freeze | python3 -c " +
	`'import sys; old = set(open(sys.argv[1]).read().split()); new = [l.split("==")[0] for l in sys.stdin.read().split() if l not in old]; new and print("\n".join(new))' ` +
	buildDepsBefore + " > " + buildDepsDrop + "; if [ -s " + buildDepsDrop + " ]; then python3 -m pip uninstall -y -q -r " + buildDepsDrop +
	"; fi; rm -f " + buildDepsBefore + " " + buildDepsDrop

// buildDepsDrop is the list dropBuildDeps uninstalls.
const buildDepsDrop = "/tmp/kiln-build-deps-drop.txt"

// sourceWheelDir is where a pip_from_source requirement's wheel is
// compiled to: a directory of its own, so the step's one *.whl is the
// compiled wheel whatever its file name's spelling of the project.
func sourceWheelDir(pp recipes.PipPackage) string {
	return path.Join(wheelhouse, "src", wheelkey.NormalizeName(pp.Name))
}

// sourceCompile compiles a pip_from_source requirement from its source
// archive into a wheel, in the devel stage: pip wheel --no-binary, with
// the devel image's setuptools and wheel (no build isolation: an offline
// index need not serve build backends) and torch installed first when
// the plan has it (torch extensions import it to build), for the plan's
// GPU architectures.
func sourceCompile(p *recipes.Plan, pp recipes.PipPackage) Step {
	return compileStep(p, pp, sourceEnv(p), "--no-binary "+shq(pp.Name)+" ", sourceWheelDir(pp), "*.whl")
}

// sourceEnv is a pip_from_source compile's environment, KEY=VALUE words:
// the link strips symbol tables and debug sections (they carry pip's
// random build directory, so two builds from clean caches would differ),
// and torch's extension builder compiles for the plan's architectures.
func sourceEnv(p *recipes.Plan) []string {
	env := []string{"LDFLAGS=-Wl,--strip-all"}
	if len(p.CUDAArchs) > 0 {
		env = append(env, "TORCH_CUDA_ARCH_LIST="+shq(strings.Join(p.CUDAArchs, ";")))
	}
	return env
}

// flashAttnEnv is the source build's environment, KEY=VALUE words
// (values quoted for the shell), in a fixed order.
func flashAttnEnv(fab *recipes.FABuild) []string {
	keys := make([]string, 0, len(fab.Env))
	for k := range fab.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	envs := []string{"FLASH_ATTN_CUDA_ARCHS=" + shq(fab.CUDAArchs), fmt.Sprintf("MAX_JOBS=%d", fab.MaxJobs)}
	if _, ok := fab.Env["LDFLAGS"]; !ok {
		// nvcc hands the host compiler temporary files named after its
		// pid (tmpxft_<pid>_..._x.cudafe1.cpp), which land as FILE
		// symbols in the library's .symtab: two builds from clean caches
		// would differ there alone. A runtime needs only .dynsym, so the
		// link strips the symbol table (the fat binary is unaffected).
		envs = append(envs, "LDFLAGS=-Wl,--strip-all")
	}
	if fab.NvccThreads > 0 {
		envs = append(envs, fmt.Sprintf("NVCC_THREADS=%d", fab.NvccThreads))
	}
	for _, k := range keys {
		if k == "FLASH_ATTN_CUDA_ARCHS" || k == "MAX_JOBS" || k == "NVCC_THREADS" {
			continue
		}
		envs = append(envs, k+"="+shq(fab.Env[k]))
	}
	return envs
}

// sharedCUDARuntime names the nvidia-cuda-runtime wheel to leave out of a
// runtime image whose base already carries the same CUDA runtime: an
// nvidia/cuda -base image ships libcudart (NVIDIA's -base is cudart and the
// compat package), and torch's cuXY wheels depend on nvidia-cuda-runtime-cuX
// with the same libcudart.so.X, so the image would carry CUDA twice
// (forbid_duplicate_cuda_libs). When the base's CUDA major.minor is the
// torch variant's, the base's copy serves torch (found through the default
// library path once the wheel's RUNPATH directory is gone), and the wheel
// is uninstalled in the step that installs it. Otherwise (another minor
// version, or a -runtime base whose libraries the wheels duplicate anyway)
// nothing is removed.
func sharedCUDARuntime(p *recipes.Plan) string {
	if p.RuntimeFlavor != "base" || p.TorchCUDAVariant == nil {
		return ""
	}
	parts := strings.SplitN(p.CUDA, ".", 3)
	if len(parts) < 2 || *p.TorchCUDAVariant != "cu"+parts[0]+parts[1] {
		return ""
	}
	return "nvidia-cuda-runtime-cu" + parts[0]
}

func torchPkgs(p *recipes.Plan) []recipes.PipPackage {
	var out []recipes.PipPackage
	for _, pp := range p.Pip {
		if groupFor(pp.Name) == ComponentTorch {
			out = append(out, pp)
		}
	}
	return out
}

// aptEnsure installs pkgs unless check already succeeds.
func aptEnsure(pkgs []string, check string) string {
	return "if ! { " + check + "; }; then " + aptInstall(pkgs) + "; fi"
}

func aptInstall(pkgs []string) string {
	q := make([]string, len(pkgs))
	for i, p := range pkgs {
		q[i] = shq(p)
	}
	return "apt-get update -qq && apt-get install -y -qq --no-install-recommends " + strings.Join(q, " ")
}

func reqArgs(pkgs []recipes.PipPackage) string {
	var out []string
	for _, pp := range pkgs {
		r := pp.Requirement
		if pp.URL != "" {
			r = pp.URL
		}
		out = append(out, shq(r))
	}
	return strings.Join(out, " ")
}

// reqNames is the requirements without URLs (installs from the wheelhouse).
func reqNames(pkgs []recipes.PipPackage) string {
	var out []string
	for _, pp := range pkgs {
		out = append(out, shq(pp.Requirement))
	}
	return strings.Join(out, " ")
}

// indexFlags picks --index-url/--extra-index-url/--trusted-host for pkgs.
func indexFlags(pkgs []recipes.PipPackage) string {
	var idx []string
	for _, pp := range pkgs {
		if pp.IndexURL != "" && pp.URL == "" && !slices.Contains(idx, pp.IndexURL) {
			idx = append(idx, pp.IndexURL)
		}
	}
	var f []string
	var hosts []string
	for i, u := range idx {
		if i == 0 {
			f = append(f, "--index-url "+shq(u))
		} else {
			f = append(f, "--extra-index-url "+shq(u))
		}
		if pu, err := url.Parse(u); err == nil && pu.Scheme == "http" && !slices.Contains(hosts, pu.Hostname()) {
			hosts = append(hosts, pu.Hostname())
		}
	}
	for _, h := range hosts {
		f = append(f, "--trusted-host "+shq(h))
	}
	return strings.Join(f, " ")
}

// shq quotes s for /bin/sh when it needs it.
func shq(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.,/:=+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
