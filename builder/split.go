package builder

import (
	"archive/zip"
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/kiln-build/kiln/recipes"
	gateway "github.com/moby/buildkit/frontend/gateway/client"
)

// Wheel is one wheel file of a component's wheelhouse and the bytes it
// installs (the sum of its members' uncompressed sizes).
type Wheel struct {
	File  string // file name in the wheelhouse directory
	Bytes int64
}

// SplitWheels packs a component's wheels into install steps of at most
// maxSize installed bytes each, for a runtime layer per step: wheels in
// file-name order, greedily (a wheel larger than maxSize gets a step of
// its own: a wheel is never split). It depends only on the wheel set, so
// the same lock splits the same way; keep names wheels that must stay in
// the last part (a wheel installed and uninstalled in one step). The last
// part is what the component's own pip install (with dependency
// resolution) installs once the others are in; nil when the wheels fit
// in one layer.
func SplitWheels(wheels []Wheel, maxSize int64, keep func(file string) bool) [][]string {
	if maxSize <= 0 {
		return nil
	}
	ws := append([]Wheel(nil), wheels...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].File < ws[j].File })
	var parts [][]string
	var fill int64
	var last []string
	for _, w := range ws {
		if keep != nil && keep(w.File) {
			last = append(last, w.File)
			continue
		}
		if len(parts) == 0 || fill > 0 && fill+w.Bytes > maxSize {
			parts = append(parts, nil)
			fill = 0
		}
		parts[len(parts)-1] = append(parts[len(parts)-1], w.File)
		fill += w.Bytes
	}
	if len(last) > 0 {
		parts = append(parts, last)
	}
	if len(parts) < 2 {
		return nil
	}
	return parts
}

// SplitComponent replaces the runtime install step of comp with one step
// per part: every part but the last installs its wheel files by path with
// --no-deps (their dependencies come in other parts), the last runs the
// component's own install, which resolves against what is installed and
// adds the rest. Each step is a layer, named "runtime: install COMP (i/n)".
func (L *Layout) SplitComponent(comp Component, parts [][]string) error {
	if len(parts) < 2 {
		return nil
	}
	i := -1
	for j, s := range L.Runtime.Steps {
		if s.Component == comp && !s.IsFile() {
			i = j
		}
	}
	if i < 0 {
		return fmt.Errorf("builder: no runtime install step for %s", comp)
	}
	orig := L.Runtime.Steps[i]
	// The GPU-code pruning (gpu_code) ends the component's install; every
	// part prunes what it installed, in its own step.
	var prune string
	if k := strings.Index(orig.Shell, " && "+ToolsTarget+"/"); k >= 0 {
		prune = orig.Shell[k:]
	}
	dir := path.Join(wheelhouse, wheelDir(comp))
	var steps []Step
	for k, files := range parts {
		st := orig
		st.Name = fmt.Sprintf("runtime: install %s (%d/%d)", comp, k+1, len(parts))
		if k < len(parts)-1 {
			q := make([]string, len(files))
			var names []string
			// What the component's own install names keeps its REQUESTED
			// marker: the unsplit install writes it for those (torch).
			named := func(n string) bool {
				for _, v := range []string{n, strings.ReplaceAll(n, "_", "-")} {
					if strings.Contains(orig.Shell, " "+v+"==") || strings.Contains(orig.Shell, "'"+v+"==") {
						return true
					}
				}
				return false
			}
			for j, f := range files {
				// NAME==VERSION from the wheelhouse, not the file's path:
				// pip records a path install as a direct URL
				// (direct_url.json, "torch @ file://..." in pip freeze).
				name, ver, ok := wheelNameVersion(f)
				if !ok {
					return fmt.Errorf("builder: %s in %s is not a wheel file name (NAME-VERSION-...whl)", f, dir)
				}
				q[j] = shq(name + "==" + ver)
				if !named(name) {
					names = append(names, shq(name))
				}
			}
			st.Shell = "python3 -m pip install --no-index --no-deps --no-compile --no-cache-dir --find-links " + dir + " " + strings.Join(q, " ")
			if len(names) > 0 {
				st.Shell += " && python3 -c " + shq(unrequest) + " " + strings.Join(names, " ")
			}
			st.Shell += prune
		}
		steps = append(steps, st)
	}
	L.Runtime.Steps = append(L.Runtime.Steps[:i], append(steps, L.Runtime.Steps[i+1:]...)...)
	return nil
}

// unrequest undoes the one trace a split step leaves that the component's
// own install would not: pip marks the distributions named on its command
// line REQUESTED (a file in the .dist-info, and its line in RECORD), while
// the unsplit install pulls them in as dependencies. Removing both makes
// the installed files byte for byte those of the unsplit install. RECORD
// is rewritten as bytes: pip writes it with CRLF line ends.
const unrequest = `import sys, pathlib, importlib.metadata as m
for n in sys.argv[1:]:
    p = pathlib.Path(m.distribution(n)._path)
    r = p / "REQUESTED"
    if r.exists():
        r.unlink()
        rec = p / "RECORD"
        drop = (p.name + "/REQUESTED,").encode()
        rec.write_bytes(b"".join(l for l in rec.read_bytes().splitlines(True) if not l.startswith(drop)))`

// wheelNameVersion reads a wheel file name (PEP 427:
// NAME-VERSION[-BUILD]-PY-ABI-PLATFORM.whl).
func wheelNameVersion(file string) (string, string, bool) {
	parts := strings.Split(strings.TrimSuffix(file, ".whl"), "-")
	if !strings.HasSuffix(file, ".whl") || len(parts) < 5 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// wheelDir is the wheelhouse subdirectory of a component.
func wheelDir(c Component) string {
	switch c {
	case ComponentTorch:
		return "torch"
	case ComponentExtensions:
		return "extensions"
	}
	return "pip"
}

// SplitComponents are the components whose install may be split: the
// wheel groups (system packages and the app are one layer each).
var SplitComponents = []Component{ComponentTorch, ComponentExtensions, ComponentPip}

// readWheels lists the wheels of a component in a solved devel stage, with
// the bytes each installs, read from the zip central directory (a few
// reads at the end of each file; nothing is extracted).
func readWheels(ctx context.Context, ref gateway.Reference, comp Component) ([]Wheel, error) {
	dir := path.Join(wheelhouse, wheelDir(comp))
	ents, err := ref.ReadDir(ctx, gateway.ReadDirRequest{Path: dir, IncludePattern: "*.whl"})
	if err != nil {
		return nil, fmt.Errorf("listing %s in the devel stage: %w", dir, err)
	}
	var out []Wheel
	for _, e := range ents {
		name := path.Base(e.Path)
		file := path.Join(dir, name)
		zr, err := zip.NewReader(&refReaderAt{ctx: ctx, ref: ref, file: file}, e.Size)
		if err != nil {
			return nil, fmt.Errorf("wheel %s: %w", file, err)
		}
		w := Wheel{File: name}
		for _, f := range zr.File {
			w.Bytes += int64(f.UncompressedSize64)
		}
		out = append(out, w)
	}
	return out, nil
}

// refReaderAt reads a file of a solved reference by ranges.
type refReaderAt struct {
	ctx  context.Context
	ref  gateway.Reference
	file string
}

func (r *refReaderAt) ReadAt(p []byte, off int64) (int, error) {
	b, err := r.ref.ReadFile(r.ctx, gateway.ReadRequest{Filename: r.file, Range: &gateway.FileRange{Offset: int(off), Length: len(p)}})
	if err != nil {
		return 0, err
	}
	n := copy(p, b)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// splitGraph builds g's devel stage, reads its wheelhouse and returns the
// graph with each component whose wheels install more than maxSize split
// into several install layers. The devel stage is solved again by the
// runtime's bind mount: from the cache.
func splitGraph(ctx context.Context, c gateway.Client, p *recipes.Plan, in Inputs, g *Graph, maxSize int64) (*Graph, error) {
	def, err := g.Marshal(ctx, g.Devel)
	if err != nil {
		return nil, err
	}
	r, err := c.Solve(ctx, gateway.SolveRequest{Definition: def.ToPB(), Evaluate: true})
	if err != nil {
		return nil, err
	}
	ref, err := r.SingleRef()
	if err != nil {
		return nil, err
	}
	L := *g.Layout
	L.Runtime.Steps = slices.Clone(L.Runtime.Steps)
	shared := sharedCUDARuntime(p)
	keep := func(file string) bool {
		// Installed and uninstalled in the component's own step, so that
		// no layer carries it.
		return shared != "" && strings.HasPrefix(strings.ToLower(file), strings.ReplaceAll(shared, "-", "_")+"-")
	}
	for _, comp := range SplitComponents {
		if !slices.ContainsFunc(L.Runtime.Steps, func(s Step) bool { return s.Component == comp }) {
			continue
		}
		ws, err := readWheels(ctx, ref, comp)
		if err != nil {
			return nil, err
		}
		if err := L.SplitComponent(comp, SplitWheels(ws, maxSize, keep)); err != nil {
			return nil, err
		}
	}
	return graphFor(&L, p, in, g.Platform), nil
}
