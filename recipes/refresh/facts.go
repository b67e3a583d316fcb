package refresh

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"github.com/kiln-build/kiln/recipes"
)

// A fact is one reviewable statement of the refreshed data: its value and
// the live source that decides it. Both the base and the refreshed data
// are reduced to facts and the diff is taken between them, so a refresh
// against sources that agree with the base has no changes, whatever the
// two say about where they got their values.
type fact struct {
	key, value, url string
	note            string
}

func (r *run) facts(td recipes.TorchData, im recipes.ImageData) map[string]fact {
	out := map[string]fact{}
	add := func(f fact) { out[f.key] = f }
	idx := func(project string) string { return redactURL(r.o.IndexURL) + "/<variant>/" + project + "/" }
	for _, rel := range td.Releases {
		add(fact{key: "torch " + rel.Minor + " patches", value: strings.Join(rel.Patches, ", "), url: idx("torch")})
		py := rel.PythonMin + "-" + rel.PythonMax
		if rel.PythonExperimental != "" {
			py += " (" + rel.PythonExperimental + " experimental)"
		}
		add(fact{key: "torch " + rel.Minor + " Python", value: py, url: redactURL(r.o.MatrixURL)})
		for _, v := range rel.Variants {
			var val, note string
			switch {
			case v.Unofficial:
				val = "unofficial (on the index, not in PyTorch's release matrix)"
				note = "not offered by default; a recipe can name it with torch.variant"
			case v.Stable:
				val = "stable"
			default:
				val = "experimental"
			}
			if !v.Unofficial {
				cudnn := v.CuDNN
				if cudnn == "" {
					cudnn = "unknown"
				}
				val += ", cuDNN " + cudnn
			}
			add(fact{key: "torch " + rel.Minor + "+" + v.Name, value: val, url: r.projectURL(v.Name, "torch") + "; " + redactURL(r.o.MatrixURL), note: note})
		}
		tv := rel.TorchvisionMinor + ", wheels for Python " + rel.TorchvisionPython
		if rel.TorchvisionPython == "" {
			tv = rel.TorchvisionMinor + ", no wheels listed"
		}
		add(fact{key: "torchvision for torch " + rel.Minor, value: tv, url: idx("torchvision")})
		ta := "torchaudio = torch's version"
		if rel.TorchaudioUnsettled {
			ta = "unsettled (no torchaudio of the newest torch patch)"
		}
		add(fact{key: "torchaudio for torch " + rel.Minor, value: ta, url: idx("torchaudio")})
	}
	for _, t := range im.Tags {
		val := "published, no cuDNN variant"
		if t.CuDNNToken != "" {
			val = "published, cuDNN variant -" + t.CuDNNToken + "-"
		}
		f := fact{key: "nvidia/cuda:" + t.CUDA, value: val, url: r.listURL}
		if !r.knownCUDA(t.CUDA) {
			f.note = "kiln's driver table has no CUDA " + minorOf(t.CUDA) + " row: the resolver refuses it until kiln's data has one"
		}
		add(f)
	}
	return out
}

// diff lists the facts added, removed and changed from old to cur, in a
// stable order (versions compared as numbers).
func (r *run) diff(old, cur map[string]fact) []recipes.DataChange {
	var out []recipes.DataChange
	for k, n := range cur {
		o, ok := old[k]
		switch {
		case !ok:
			out = append(out, recipes.DataChange{Kind: recipes.ChangeAdded, Fact: k, New: n.value, Note: n.note, Source: n.url, Date: r.date})
		case o.value != n.value:
			out = append(out, recipes.DataChange{Kind: recipes.ChangeChanged, Fact: k, Old: o.value, New: n.value, Note: n.note, Source: n.url, Date: r.date})
		}
	}
	for k, o := range old {
		if _, ok := cur[k]; !ok {
			out = append(out, recipes.DataChange{Kind: recipes.ChangeRemoved, Fact: k, Old: o.value, Note: "no longer listed by the source", Source: o.url, Date: r.date})
		}
	}
	slices.SortFunc(out, func(a, b recipes.DataChange) int { return naturalCompare(a.Fact, b.Fact) })
	return out
}

// naturalCompare orders "torch 2.9" before "torch 2.10".
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da != "" && db != "" {
			if len(da) != len(db) {
				return len(da) - len(db)
			}
			if c := strings.Compare(da, db); c != 0 {
				return c
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func leadingDigits(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsDigit(r) })
	if i < 0 {
		return s
	}
	return s[:i]
}

// Summary counts a diff's changes by kind.
func Summary(changes []recipes.DataChange) map[string]int {
	s := map[string]int{recipes.ChangeAdded: 0, recipes.ChangeRemoved: 0, recipes.ChangeChanged: 0}
	for _, c := range changes {
		s[c.Kind]++
	}
	return s
}

// WriteDiff writes the reviewed diff for people: one change per entry,
// + added, - removed, ~ changed, each with its source and the date read.
func WriteDiff(w io.Writer, f *recipes.DataFile) error {
	s := Summary(f.Changes)
	if _, err := fmt.Fprintf(w, "kiln compat refresh: %d added, %d removed, %d changed against data %s (sources read %s)\n", s[recipes.ChangeAdded], s[recipes.ChangeRemoved], s[recipes.ChangeChanged], f.BaseDataVersion, f.Torch.DataDate); err != nil {
		return err
	}
	for _, c := range f.Changes {
		var line string
		switch c.Kind {
		case recipes.ChangeAdded:
			line = fmt.Sprintf("+ %s: %s", c.Fact, c.New)
		case recipes.ChangeRemoved:
			line = fmt.Sprintf("- %s: %s", c.Fact, c.Old)
		default:
			line = fmt.Sprintf("~ %s: %s -> %s", c.Fact, c.Old, c.New)
		}
		fmt.Fprintf(w, "%s\n    source: %s (%s)\n", line, c.Source, c.Date)
		if c.Note != "" {
			fmt.Fprintf(w, "    note: %s\n", c.Note)
		}
	}
	return nil
}
