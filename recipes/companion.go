package recipes

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kiln-build/kiln/cuda"
)

// torchvision and torchaudio are paired with torch by rule (torchvision
// minor = torch minor + 15, torchaudio = torch's version), but their wheels
// are their own: torchvision 0.20 has no cp313 wheels although torch 2.5
// has, and no torchaudio was announced for torch 2.12. A plan that would
// pin a wheel that does not exist fails at pip time, minutes into a build;
// companionStep refuses it at resolve time instead.

// wheelArch is the wheel platform tag suffix of an OCI platform.
func wheelArch(platform string) string {
	return map[string]string{"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[platform]
}

func (s *resolver) companionStep() error {
	if s.tvar == nil {
		return nil
	}
	t := s.r.Torch
	v, err := s.torchvision(t.Torchvision)
	if err != nil {
		return err
	}
	if v != "" {
		s.plan.Torchvision = strp(v)
	}
	a, err := s.torchaudio(t.Torchaudio)
	if err != nil {
		return err
	}
	if a != "" {
		s.plan.Torchaudio = strp(a)
	}
	for _, name := range []string{"torchvision", "torchaudio"} {
		if (name == "torchvision" && v == "") || (name == "torchaudio" && a == "") {
			continue
		}
		for _, p := range s.plan.Platforms {
			if p != DefaultPlatform {
				s.fact(fmt.Sprintf("%s %s wheels for %s", name, map[string]string{"torchvision": v, "torchaudio": a}[name], p), "not in kiln's data; kiln lock checks the wheel index", cuda.ConfUnverified)
			}
		}
	}
	return nil
}

func wants(v string) bool { return v != "" && v != "false" }

// torchvision resolves the torchvision pin and checks that its wheels
// cover the plan's Python.
func (s *resolver) torchvision(want string) (string, error) {
	if !wants(want) {
		return "", nil
	}
	tv := cuda.MustVersion(s.tver)
	patch := 0
	if len(tv) > 2 {
		patch = tv[2]
	}
	paired := fmt.Sprintf("0.%d.%d", tv[1]+15, patch)
	s.fact(fmt.Sprintf("torchvision %s pairs with torch %s", paired, s.tver), "pytorch/vision README table; pytorch.org previous-versions (torchvision minor = torch minor + 15)", cuda.ConfA)
	pin := paired
	if want != "true" && want != paired {
		s.warn("torchvision %s requested; torch %s pairs with torchvision %s", want, s.tver, paired)
		pin = want
	}
	// The Python range of the torchvision minor pinned (a requested
	// version may belong to another torch release's row).
	rel := s.torch
	if cuda.MajorMinor(pin) != rel.TorchvisionMinor {
		rel = nil
		for i := range s.db.Torch.Releases {
			if s.db.Torch.Releases[i].TorchvisionMinor == cuda.MajorMinor(pin) {
				rel = &s.db.Torch.Releases[i]
			}
		}
	}
	if rel == nil || rel.TorchvisionPython == "" {
		s.fact(fmt.Sprintf("torchvision %s wheels for Python %s", pin, s.plan.Python), "not in kiln's data; kiln lock checks the wheel index", cuda.ConfUnverified)
		return pin, nil
	}
	rng := rel.TorchvisionPython
	if !pyInRange(s.plan.Python, rng) {
		return "", refuse("torch.torchvision", s.torchvisionAlternatives(pin), "torchvision %s has no cp%s wheels (its wheels are for Python %s); the build would fail at pip install", cuda.MajorMinor(pin), cpTag(s.plan.Python), rng)
	}
	s.fact(fmt.Sprintf("torchvision %s ships wheels for Python %s", rel.TorchvisionMinor, rng), rel.TorchvisionPythonSource, rel.TorchvisionPythonConfidence)
	return pin, nil
}

func cpTag(py string) string { return strings.ReplaceAll(py, ".", "") }

// torchvisionAlternatives: the oldest newer torch whose torchvision has
// wheels for the plan's Python (and that supports it itself), the newest
// Python the pinned torchvision has wheels for, or no torchvision.
func (s *resolver) torchvisionAlternatives(pin string) []string {
	var alts []string
	py := s.plan.Python
	for i := range s.db.Torch.Releases {
		o := &s.db.Torch.Releases[i]
		if cuda.CompareVersions(o.Minor, s.torch.Minor) <= 0 || o.TorchvisionPython == "" {
			continue
		}
		if pyInRange(py, o.TorchvisionPython) && pyMinor(py) >= pyMinor(o.PythonMin) && (pyMinor(py) <= pyMinor(o.PythonMax) || py == o.PythonExperimental) {
			alts = append(alts, fmt.Sprintf("torch ≥ %s (torchvision %s is the first with cp%s wheels)", o.Minor, o.TorchvisionMinor, cpTag(py)))
			break
		}
	}
	for i := range s.db.Torch.Releases {
		o := &s.db.Torch.Releases[i]
		if o.TorchvisionMinor != cuda.MajorMinor(pin) || o.TorchvisionPython == "" {
			continue
		}
		_, hi, _ := strings.Cut(o.TorchvisionPython, "-")
		hi = pyClamp(hi, s.torch.PythonMax)
		if pyMinor(hi) >= pyMinor(s.torch.PythonMin) && hi != py {
			alts = append(alts, fmt.Sprintf("python: %q", hi))
		}
		break
	}
	return append(alts, "torchvision: false")
}

// pyClamp is the lower of two CPython versions.
func pyClamp(a, b string) string {
	if pyMinor(b) < pyMinor(a) {
		return b
	}
	return a
}

// torchaudio resolves the torchaudio pin. Where the pairing is unsettled
// (no torchaudio release known for this torch), kiln does not make one up:
// torchaudio: true is refused, an explicit version is used with a warning.
func (s *resolver) torchaudio(want string) (string, error) {
	if !wants(want) {
		return "", nil
	}
	rel := s.torch
	if rel.TorchaudioUnsettled {
		s.fact(fmt.Sprintf("torchaudio for torch %s: no paired release known", rel.Minor), rel.TorchaudioSource, rel.TorchaudioConfidence)
		if want == "true" {
			var alts []string
			alts = append(alts, "torchaudio: false")
			alts = append(alts, fmt.Sprintf("torchaudio: VERSION, a version you have checked on %s/%s/torchaudio/", s.db.Torch.IndexURL, s.tvar.Name))
			for i := len(s.db.Torch.Releases) - 1; i >= 0; i-- {
				o := &s.db.Torch.Releases[i]
				if cuda.CompareVersions(o.Minor, rel.Minor) < 0 && !o.TorchaudioUnsettled && o.official(s.tvar.Name) != nil {
					alts = append(alts, fmt.Sprintf("torch %s (torchaudio %s)", o.Minor, o.Patches[len(o.Patches)-1]))
					break
				}
			}
			return "", refuse("torch.torchaudio", alts, "no torchaudio release is known to pair with torch %s (none was announced); kiln will not name a torchaudio version that may not exist", rel.Minor)
		}
		s.warn("torchaudio %s for torch %s: kiln has no pairing data (no torchaudio release was announced for torch %s); kiln lock checks the wheel exists", want, s.tver, rel.Minor)
		return want, nil
	}
	paired := s.tver
	s.fact(fmt.Sprintf("torchaudio %s pairs with torch %s", paired, s.tver), "pytorch.org previous-versions (torchaudio = torch version)", cuda.ConfA)
	if want != "true" && want != paired {
		s.warn("torchaudio %s requested; torch %s pairs with torchaudio %s", want, s.tver, paired)
		paired = want
	}
	// kiln has no torchaudio Python data: flag the one case where it
	// matters, a Python torch itself supports only experimentally.
	if s.plan.Python == rel.PythonExperimental {
		s.warn("kiln has no data on torchaudio cp%s wheels (Python %s is experimental for torch %s); kiln lock checks the wheel index", cpTag(s.plan.Python), s.plan.Python, rel.Minor)
	}
	return paired, nil
}

// platformsKnown reports, for a wheel family with platform data, whether
// every plan platform is covered; missing names the first that is not.
func platformsKnown(have []string, plan []string) (missing string, ok bool) {
	for _, p := range plan {
		if !slices.Contains(have, wheelArch(p)) {
			return p, false
		}
	}
	return "", true
}
