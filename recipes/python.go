package recipes

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/kiln-build/kiln/cuda"
)

// Where the image's Python comes from (Plan.PythonSource).
const (
	// PythonOS is the base OS's python3 and python3-pip, through apt: the
	// OS ships the recipe's Python version.
	PythonOS = "os"
	// PythonStandalone is a relocatable CPython from python-build-standalone
	// (what uv installs), fetched by BuildKit and checked against the
	// sha256 in kiln's data (Plan.PythonDist).
	PythonStandalone = "standalone"
)

// PythonMirrorEnv names the environment variable that points the Python
// download at a mirror (as --python-mirror and python_mirror do).
const PythonMirrorEnv = "KILN_PYTHON_MIRROR"

// PythonBuild is one CPython version kiln can provide: a
// python-build-standalone release and the sha256 of its archive per
// target triple (x86_64-unknown-linux-gnu).
type PythonBuild struct {
	Version    string            `json:"version"` // 3.11.16
	Release    string            `json:"release"` // 20260814
	SHA256     map[string]string `json:"sha256"`
	Source     string            `json:"source"`
	Confidence string            `json:"confidence"`
}

// pythonData is python.json: the relocatable CPython builds kiln provides
// when the base OS's python3 is not the recipe's version.
type pythonData struct {
	DataVersion  string        `json:"data_version"`
	DataDate     string        `json:"data_date"`
	DataDateNote string        `json:"data_date_note,omitempty"`
	DownloadURL  string        `json:"download_url"`
	DownloadNote string        `json:"download_url_note,omitempty"`
	Archive      string        `json:"archive"` // install_only_stripped
	Releases     []PythonBuild `json:"releases"`
}

// PythonDist is the relocatable CPython a plan installs: its version,
// its python-build-standalone release and one archive per platform.
// It is part of the plan, so kiln.lock records every URL and sha256.
type PythonDist struct {
	Version  string          `json:"version"`
	Release  string          `json:"release"`
	Archives []PythonArchive `json:"archives"`
}

// PythonArchive is the python-build-standalone archive of one platform.
type PythonArchive struct {
	Platform string `json:"platform"` // linux/amd64
	File     string `json:"file"`     // cpython-3.11.16+20260814-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz
	URL      string `json:"url"`
	SHA256   string `json:"sha256"`
}

// Archive is the dist's archive for platform (os/arch; a variant is
// ignored), if the plan has one.
func (d *PythonDist) Archive(platform string) (PythonArchive, bool) {
	parts := strings.Split(platform, "/")
	if len(parts) >= 2 {
		platform = parts[0] + "/" + parts[1]
	}
	for _, a := range d.Archives {
		if a.Platform == platform {
			return a, true
		}
	}
	return PythonArchive{}, false
}

// pythonTriple is python-build-standalone's target triple for a platform
// (os/arch[/variant]); "" when it publishes no glibc build kiln uses.
func pythonTriple(platform string) string {
	goos, arch, _ := strings.Cut(platform, "/")
	arch, _, _ = strings.Cut(arch, "/")
	switch goos + "/" + arch {
	case "linux/amd64":
		return "x86_64-unknown-linux-gnu"
	case "linux/arm64":
		return "aarch64-unknown-linux-gnu"
	}
	return ""
}

// PythonBuilds are the CPython versions kiln can provide as relocatable
// builds, newest last.
func (db *DB) PythonBuilds() []PythonBuild { return db.Python.Releases }

// pythonBuild is the build of major.minor mm.
func (db *DB) pythonBuild(mm string) *PythonBuild {
	for i := range db.Python.Releases {
		if cuda.MajorMinor(db.Python.Releases[i].Version) == mm {
			return &db.Python.Releases[i]
		}
	}
	return nil
}

// WithPythonMirror points the Python download at mirror: a URL that
// replaces python-build-standalone's release download prefix
// (https://github.com/astral-sh/python-build-standalone/releases/download),
// as uv's UV_PYTHON_INSTALL_MIRROR does. The mirror must serve the same
// archives: their sha256s are kiln's. "" keeps the recipe's python_mirror.
func WithPythonMirror(mirror string) ResolveOption {
	return func(c *resolveConfig) {
		if mirror != "" {
			c.pythonMirror = mirror
		}
	}
}

// pythonMirror is the download prefix the plan's Python comes from.
func (s *resolver) pythonMirror() string {
	for _, m := range []string{s.cfg.pythonMirror, s.r.PythonMirror} {
		if m != "" {
			return strings.TrimSuffix(m, "/")
		}
	}
	return strings.TrimSuffix(s.db.Python.DownloadURL, "/")
}

// PythonMirrorFromEnv is $KILN_PYTHON_MIRROR, checked: an http(s) or
// file URL, or "".
func PythonMirrorFromEnv() (string, error) {
	m := os.Getenv(PythonMirrorEnv)
	if m == "" {
		return "", nil
	}
	if err := CheckPythonMirror(m); err != nil {
		return "", fmt.Errorf("%s: %v", PythonMirrorEnv, err)
	}
	return m, nil
}

// CheckPythonMirror checks a Python mirror URL (python_mirror,
// --python-mirror, $KILN_PYTHON_MIRROR).
func CheckPythonMirror(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an http(s) URL that replaces https://github.com/astral-sh/python-build-standalone/releases/download", s)
	}
	return nil
}

// pythonProvider decides where the image's Python comes from, once the
// OS and the platforms are known: the OS's python3 when it is the
// recipe's version, else a relocatable CPython kiln has a pinned build
// of, for every platform; else the recipe is refused, never left for pip
// to discover.
func (s *resolver) pythonProvider() error {
	p := s.plan
	of := s.osFlavor(p.OS)
	if of != nil && of.Python != "" && of.Python == p.Python {
		p.PythonSource = PythonOS
		s.fact(fmt.Sprintf("%s ships Python %s (python3 from apt)", p.OS, of.Python), of.Source, pythonConfidence(of))
		return nil
	}
	b := s.db.pythonBuild(p.Python)
	var missing []string
	if b != nil {
		for _, pl := range p.Platforms {
			if t := pythonTriple(pl); t == "" || b.SHA256[t] == "" {
				missing = append(missing, pl)
			}
		}
	}
	if b == nil || len(missing) > 0 {
		return s.noPython(of, b, missing)
	}
	dist := &PythonDist{Version: b.Version, Release: b.Release}
	prefix := s.pythonMirror()
	for _, pl := range p.Platforms {
		parts := strings.SplitN(pl, "/", 3)
		t := pythonTriple(pl)
		file := fmt.Sprintf("cpython-%s+%s-%s-%s.tar.gz", b.Version, b.Release, t, s.db.Python.Archive)
		dist.Archives = append(dist.Archives, PythonArchive{
			Platform: parts[0] + "/" + parts[1],
			File:     file,
			URL:      prefix + "/" + b.Release + "/" + strings.ReplaceAll(file, "+", "%2B"),
			SHA256:   b.SHA256[t],
		})
	}
	p.PythonSource, p.PythonDist = PythonStandalone, dist
	ships := "no python3 kiln knows of"
	if of != nil && of.Python != "" {
		ships = "Python " + of.Python
	}
	s.fact(fmt.Sprintf("CPython %s relocatable build (python-build-standalone %s, %s): %s ships %s", b.Version, b.Release, s.db.Python.Archive, p.OS, ships), b.Source, b.Confidence)
	return nil
}

func pythonConfidence(of *OSFlavor) string {
	if of.PythonConfidence != "" {
		return of.PythonConfidence
	}
	return of.Confidence
}

// noPython refuses a Python version kiln cannot put in the image: the
// base OS ships another one and kiln has no pinned relocatable build of
// it (for some platform).
func (s *resolver) noPython(of *OSFlavor, b *PythonBuild, missing []string) error {
	p := s.plan
	var alts []string
	var have []string
	for _, x := range s.db.Python.Releases {
		have = append(have, cuda.MajorMinor(x.Version))
	}
	if of != nil && of.Python != "" && s.pythonFitsTorch(of.Python) {
		alts = append(alts, fmt.Sprintf("python: %q (the Python %s ships)", of.Python, p.OS))
	}
	for _, o := range s.db.Images.OS {
		if o.Python == p.Python && o.Name != p.OS && !o.Unofficial && s.osFitsCUDA(&o) {
			alts = append(alts, fmt.Sprintf("os: %s (ships Python %s)", o.Name, o.Python))
		}
	}
	if b != nil {
		// The version is known, a platform is not.
		alts = append(alts, "platforms: [linux/amd64] or [linux/arm64] (python-build-standalone's glibc builds)")
		return refuse("python", alts, "kiln has no Python %s build for %s: %s ships %s and python-build-standalone publishes glibc builds for linux/amd64 and linux/arm64 only", p.Python, strings.Join(missing, ", "), p.OS, osPython(of))
	}
	var fits []string
	for _, h := range have {
		if s.pythonFitsTorch(h) {
			fits = append(fits, h)
		}
	}
	if len(fits) > 0 {
		alts = append(alts, fmt.Sprintf("python: %q (kiln provides Python %s on any base)", fits[len(fits)-1], strings.Join(fits, ", ")))
	}
	return refuse("python", alts, "kiln cannot provide Python %s on %s: the OS ships %s and kiln has no pinned relocatable build of %s (it has %s)", p.Python, p.OS, osPython(of), p.Python, strings.Join(have, ", "))
}

func osPython(of *OSFlavor) string {
	if of == nil || of.Python == "" {
		return "no python3 kiln knows of"
	}
	return "Python " + of.Python
}

// providable is the newest Python from lo to hi that kiln can put in the
// image on the recipe's OS ("" when none is).
func (s *resolver) providable(hi, lo string) string {
	of := s.osFlavor(s.osName())
	for m := pyMinor(hi); m >= pyMinor(lo); m-- {
		mm := fmt.Sprintf("3.%d", m)
		if of != nil && of.Python == mm || s.db.pythonBuild(mm) != nil {
			return mm
		}
	}
	return ""
}

// pythonFitsTorch says whether the plan's torch supports Python mm.
func (s *resolver) pythonFitsTorch(mm string) bool {
	if s.torch == nil {
		return true
	}
	p := pyMinor(mm)
	return p >= pyMinor(s.torch.PythonMin) && p <= pyMinor(s.torch.PythonMax) || mm == s.torch.PythonExperimental
}

// osFitsCUDA says whether nvidia/cuda publishes o's images for the plan's CUDA.
func (s *resolver) osFitsCUDA(o *OSFlavor) bool {
	if o.FirstCUDA != "" && cuda.CompareVersions(s.plan.CUDA, o.FirstCUDA) < 0 {
		return false
	}
	return o.LastCUDA == "" || cuda.CompareVersions(cuda.MajorMinor(s.plan.CUDA), o.LastCUDA) <= 0
}

// pythonNames are the commands kiln makes resolve to the image's Python:
// python, python3, python3.X, pip, pip3.
func pythonNames(version string) []string {
	return []string{"python", "python3", "python" + cuda.MajorMinor(version), "pip", "pip3"}
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// validate checks python.json's fields (kiln's own, or a data file's
// python section); the error names the field.
func (d *pythonData) validate() error {
	if err := CheckPythonMirror(d.DownloadURL); err != nil {
		return fmt.Errorf("download_url: %v", err)
	}
	if d.Archive == "" {
		return fmt.Errorf("archive: missing (install_only_stripped, as python-build-standalone names its archives)")
	}
	if len(d.Releases) == 0 {
		return fmt.Errorf("releases: empty")
	}
	for i, r := range d.Releases {
		at := fmt.Sprintf("releases[%d]", i)
		if v, err := cuda.ParseVersion(r.Version); err != nil || len(v) != 3 {
			return fmt.Errorf("%s.version: %q: want X.Y.Z", at, r.Version)
		}
		if r.Release == "" || strings.Trim(r.Release, "0123456789") != "" {
			return fmt.Errorf("%s.release: %q: want the release's date tag, such as 20260814", at, r.Release)
		}
		if len(r.SHA256) == 0 {
			return fmt.Errorf("%s.sha256: empty (Python %s)", at, r.Version)
		}
		for triple, h := range r.SHA256 {
			if triple != pythonTriple("linux/amd64") && triple != pythonTriple("linux/arm64") {
				return fmt.Errorf("%s.sha256: %q: want x86_64-unknown-linux-gnu or aarch64-unknown-linux-gnu", at, triple)
			}
			if !sha256Hex.MatchString(h) {
				return fmt.Errorf("%s.sha256.%s: %q: want 64 lowercase hex digits", at, triple, h)
			}
		}
	}
	return nil
}

// WheelIndexEnv names the environment variable that lists the wheel
// indexes (PEP 503/691) kiln resolves and installs wheels from,
// comma-separated, as --wheel-index does (an internal proxy of
// download.pytorch.org and PyPI, for a host without the internet).
const WheelIndexEnv = "KILN_WHEEL_INDEX"

// WheelIndexSetting is what an unreachable wheel index's error says
// points kiln at it.
const WheelIndexSetting = "--wheel-index, $" + WheelIndexEnv + " or the recipe's wheel_indexes"

// WheelIndexesFromEnv is $KILN_WHEEL_INDEX, each URL checked; nil when
// unset.
func WheelIndexesFromEnv() ([]string, error) {
	var out []string
	for _, u := range strings.Split(os.Getenv(WheelIndexEnv), ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if err := checkURL(u); err != nil {
			return nil, fmt.Errorf("$%s: %v", WheelIndexEnv, err)
		}
		out = append(out, u)
	}
	return out, nil
}
