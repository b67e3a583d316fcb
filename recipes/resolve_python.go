package recipes

import (
	"fmt"
	"strings"

	"github.com/kiln-build/kiln/cuda"
)

// The resolver's Python step: the interpreter the image runs.

func pyMinor(p string) int {
	v := cuda.MustVersion(p)
	if len(v) < 2 {
		return 0
	}
	return v[1]
}

func (s *resolver) pythonStep() error {
	r := s.r
	lo, hi := "3.8", "3.14"
	if s.torch != nil {
		lo, hi = s.torch.PythonMin, s.torch.PythonMax
	}
	if r.Python != "" {
		if s.torch != nil {
			p := pyMinor(r.Python)
			switch {
			case p >= pyMinor(lo) && p <= pyMinor(hi):
			case s.torch.PythonExperimental != "" && r.Python == s.torch.PythonExperimental:
				s.warn("Python %s is experimental for torch %s", r.Python, s.torch.Minor)
			default:
				return refuse("python", []string{fmt.Sprintf("python: %q", hi)}, "torch %s supports Python %s-%s, not %s", s.torch.Minor, lo, hi, r.Python)
			}
			s.fact(fmt.Sprintf("torch %s supports Python %s-%s", s.torch.Minor, lo, hi), s.torch.Source, s.torch.Confidence)
		}
		s.plan.Python = r.Python
		return nil
	}
	if s.torch == nil {
		if of := s.osFlavor(s.osName()); of != nil && of.Python != "" {
			s.plan.Python = of.Python
			return nil
		}
	}
	// Newest Python that torch (and torchvision's wheels and a prebuilt
	// FlashAttention wheel, when asked for) supports.
	p := hi
	if s.torch != nil && s.torch.TorchvisionPython != "" && r.Torch.Torchvision == "true" {
		tv := s.torch.TorchvisionPython
		if _, tvHi, _ := strings.Cut(tv, "-"); pyMinor(tvHi) < pyMinor(p) {
			s.warn("Python %s chosen instead of %s: torchvision %s ships wheels for Python %s", tvHi, p, s.torch.TorchvisionMinor, tv)
			p = tvHi
		}
	}
	if r.FlashAttn != nil && pyMinor(p) > 13 {
		p = "3.13"
		s.warn("Python %s chosen instead of %s: no FlashAttention release kiln knows ships wheels for Python > 3.13", p, hi)
	}
	// A Python kiln can put in the image: the OS's python3 or a pinned
	// relocatable build.
	if q := s.providable(p, lo); q != "" && q != p {
		s.warn("Python %s chosen instead of %s: kiln has no pinned build of Python %s and %s ships %s", q, p, p, s.osName(), osPython(s.osFlavor(s.osName())))
		p = q
	}
	s.plan.Python = p
	if s.torch != nil {
		s.fact(fmt.Sprintf("torch %s supports Python %s-%s", s.torch.Minor, lo, hi), s.torch.Source, s.torch.Confidence)
	}
	return nil
}
