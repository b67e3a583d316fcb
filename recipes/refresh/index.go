package refresh

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/wheelindex"
)

// projects are read from every variant index.
var projects = []string{"torch", "torchvision", "torchaudio"}

// listing is what one variant index lists for one project: public version
// → the CPython versions ("3.12") with Linux wheels. Free-threaded builds
// (cp313t) are not counted: kiln builds GIL Pythons.
type listing map[string]map[string]bool

func (r *run) readIndex(ctx context.Context, variant, project string) (listing, error) {
	c := &wheelindex.Client{HTTP: r.o.HTTP, Complete: true}
	idx := wheelindex.JoinURL(r.o.IndexURL, variant)
	// torch on a variant the data already knows must be listed: a 404 or
	// an empty page there is a source that cannot be read, not every
	// release removed ("a source that cannot be read fails the refresh").
	known := project == "torch" && r.o.knowsVariant(variant)
	files, err := c.Files(ctx, idx, project)
	if err != nil {
		if strings.Contains(err.Error(), "(404)") && !known {
			// A variant index without the project (no torchaudio on a new
			// variant yet, or no such variant): nothing is listed.
			return listing{}, nil
		}
		return nil, err
	}
	if known && len(files) == 0 {
		return nil, fmt.Errorf("wheel index %s: the torch page of %s lists no files, though kiln's data has %s wheels; refusing to record them as removed", redactURL(wheelindex.ProjectURL(idx, project)), variant, variant)
	}
	out := listing{}
	for _, f := range files {
		if f.Yanked {
			continue
		}
		w, ok := wheelindex.ParseWheel(f.Filename)
		if !ok || wheelindex.Normalize(w.Name) != project || !strings.Contains(w.Platform, "linux") {
			continue
		}
		pub, local, _ := strings.Cut(w.Version, "+")
		if local != "" && local != variant {
			continue
		}
		if v, err := cuda.ParseVersion(pub); err != nil || len(v) != 3 {
			continue // pre-releases, dev builds
		}
		py, ok := cpython(w.Python, w.ABI)
		if !ok {
			continue
		}
		if out[pub] == nil {
			out[pub] = map[string]bool{}
		}
		out[pub][py] = true
	}
	return out, nil
}

// cpython maps cp312/cp312 to 3.12; cp313/cp313t (free-threaded) is not one.
func cpython(tag, abi string) (string, bool) {
	d, ok := strings.CutPrefix(tag, "cp3")
	if !ok || strings.HasSuffix(abi, "t") || d == "" {
		return "", false
	}
	py := "3." + d
	if _, err := cuda.ParseVersion(py); err != nil {
		return "", false
	}
	return py, true
}

func minorOf(v string) string {
	p := strings.SplitN(v, ".", 3)
	if len(p) < 2 {
		return v
	}
	return p[0] + "." + p[1]
}

func cmpV(a, b string) int {
	va, ea := cuda.ParseVersion(a)
	vb, eb := cuda.ParseVersion(b)
	if ea != nil || eb != nil {
		return strings.Compare(a, b)
	}
	return va.Compare(vb)
}

// pyRange is "MIN-MAX" of a set of CPython versions.
func pyRange(set map[string]bool) string {
	var ps []string
	for p := range set {
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return ""
	}
	slices.SortFunc(ps, cmpV)
	return ps[0] + "-" + ps[len(ps)-1]
}

// torch rebuilds torch.json: releases from the matrix and the indexes,
// existence and versions from the indexes, official status, cuDNN and
// Python from the matrix, everything else from the base.
func (r *run) torch(ctx context.Context, matrix map[string]*matrixRow) (recipes.TorchData, error) {
	base := r.o.Base.Torch
	oldest := base.Releases[0].Minor
	// Variants: every one the base data, the matrix or the caller names.
	vset := map[string]bool{}
	for _, rel := range base.Releases {
		for _, v := range rel.Variants {
			vset[v.Name] = true
		}
	}
	for m, row := range matrix {
		if cmpV(m, oldest) < 0 {
			continue
		}
		for _, c := range append(slices.Clone(row.Stable), row.Experimental...) {
			vset[variantOfCUDA(c.CUDA)] = true
		}
	}
	for _, v := range r.o.Variants {
		vset[v] = true
	}
	var variants []string
	for v := range vset {
		variants = append(variants, v)
	}
	sort.Slice(variants, func(i, j int) bool {
		a, _ := cudaOfVariant(variants[i])
		b, _ := cudaOfVariant(variants[j])
		return cmpV(a, b) < 0
	})
	lists := map[string]map[string]listing{} // variant → project → listing
	for _, v := range variants {
		lists[v] = map[string]listing{}
		for _, p := range projects {
			l, err := r.readIndex(ctx, v, p)
			if err != nil {
				return recipes.TorchData{}, err
			}
			lists[v][p] = l
			r.source(r.projectURL(v, p), fmt.Sprintf("%s wheels (%s)", p, v))
		}
	}
	// Minors: the base's, the matrix's and the indexes' (from the oldest
	// the base knows: kiln has no data older than that to carry over).
	mset := map[string]bool{}
	for _, rel := range base.Releases {
		mset[rel.Minor] = true
	}
	for m := range matrix {
		mset[m] = true
	}
	for _, v := range variants {
		for ver := range lists[v]["torch"] {
			mset[minorOf(ver)] = true
		}
	}
	var minors []string
	for m := range mset {
		if cmpV(m, oldest) >= 0 {
			minors = append(minors, m)
		}
	}
	slices.SortFunc(minors, cmpV)

	out := base
	out.Releases = nil
	out.DataDate = r.date
	for _, m := range minors {
		rel, ok := r.release(m, matrix[m], variants, lists, out.Releases)
		if ok {
			out.Releases = append(out.Releases, rel)
		}
	}
	return out, nil
}

// projectURL is a project page's URL as kiln prints and records it (no
// credentials); readIndex reads from the configured URL itself.
func (r *run) projectURL(variant, project string) string {
	return redactURL(wheelindex.ProjectURL(r.o.IndexURL+"/"+variant, project))
}

// knowsVariant says whether the base data has torch wheels for variant.
func (o *Options) knowsVariant(variant string) bool {
	for _, rel := range o.Base.Torch.Releases {
		if findVariant(&rel, variant) != nil {
			return true
		}
	}
	return false
}

func (o *Options) baseRelease(minor string) *recipes.TorchRelease {
	for i := range o.Base.Torch.Releases {
		if o.Base.Torch.Releases[i].Minor == minor {
			return &o.Base.Torch.Releases[i]
		}
	}
	return nil
}

func findVariant(rel *recipes.TorchRelease, name string) *recipes.TorchVariant {
	if rel == nil {
		return nil
	}
	for i := range rel.Variants {
		if rel.Variants[i].Name == name {
			return &rel.Variants[i]
		}
	}
	return nil
}

// release builds one torch minor; false when no index lists wheels for it.
func (r *run) release(m string, mrow *matrixRow, variants []string, lists map[string]map[string]listing, done []recipes.TorchRelease) (recipes.TorchRelease, bool) {
	b := r.o.baseRelease(m)
	var rel recipes.TorchRelease
	if b != nil {
		rel = *b
		rel.Variants = nil
	} else {
		rel = recipes.TorchRelease{Minor: m}
	}
	patches := map[string]bool{}
	var patchSrc []string
	torchPy := map[string]bool{}
	for _, v := range variants {
		found := false
		for ver, pys := range lists[v]["torch"] {
			if minorOf(ver) != m {
				continue
			}
			patches[ver], found = true, true
			for p := range pys {
				torchPy[p] = true
			}
		}
		if !found {
			continue
		}
		patchSrc = append(patchSrc, r.projectURL(v, "torch"))
		rel.Variants = append(rel.Variants, r.variant(m, v, mrow, b, done))
	}
	if len(patches) == 0 {
		return rel, false
	}
	rel.Patches = nil
	for p := range patches {
		rel.Patches = append(rel.Patches, p)
	}
	slices.SortFunc(rel.Patches, cmpV)
	rel.PatchesSource = "torch wheels listed by " + strings.Join(patchSrc, ", ") + " (read " + r.date + ")"
	rel.PatchesConfidence = cuda.ConfA

	switch {
	case mrow != nil:
		rel.PythonMin, rel.PythonMax, rel.PythonExperimental = mrow.PythonMin, mrow.PythonMax, mrow.PythonExperimental
		rel.Source = "PyTorch release matrix " + r.read(r.o.MatrixURL) + "; wheels listed by the per-variant indexes under " + redactURL(r.o.IndexURL)
		rel.Confidence = cuda.ConfA
	case b == nil:
		// Not in the matrix and new to kiln: Python from the wheels' tags.
		rng := pyRange(torchPy)
		rel.PythonMin, rel.PythonMax, _ = strings.Cut(rng, "-")
		rel.Source = "not in the PyTorch release matrix " + r.read(r.o.MatrixURL) + "; Python from the cp tags of the wheels under " + redactURL(r.o.IndexURL)
		rel.Confidence = cuda.ConfC
	}
	if b == nil {
		// What no live source says: copied from the newest older release.
		if len(done) > 0 {
			prev := done[len(done)-1]
			rel.ABISource, rel.ABIConfidence = "copied from torch "+prev.Minor+" ("+prev.ABISource+")", cuda.ConfC
			rel.ArchsSource = "copied from torch " + prev.Minor + " (" + prev.ArchsSource + ")"
		}
	}

	// torchvision: the minor the pairing rule names, its Python range from
	// the cp tags of its wheels on this release's variant indexes.
	tvMinor := fmt.Sprintf("0.%d", minorNumber(m)+15)
	rel.TorchvisionMinor = tvMinor
	tvPy := map[string]bool{}
	var tvSrc []string
	taVersions := map[string]bool{}
	var taSrc []string
	for _, tv := range rel.Variants {
		for ver, pys := range lists[tv.Name]["torchvision"] {
			if minorOf(ver) == tvMinor {
				for p := range pys {
					tvPy[p] = true
				}
				if !slices.Contains(tvSrc, r.projectURL(tv.Name, "torchvision")) {
					tvSrc = append(tvSrc, r.projectURL(tv.Name, "torchvision"))
				}
			}
		}
		taSrc = append(taSrc, r.projectURL(tv.Name, "torchaudio"))
		for ver := range lists[tv.Name]["torchaudio"] {
			if minorOf(ver) == m {
				taVersions[ver] = true
			}
		}
	}
	if rng := pyRange(tvPy); rng != "" {
		rel.TorchvisionPython = rng
		rel.TorchvisionPythonSource = "cp tags of torchvision " + tvMinor + " wheels listed by " + strings.Join(tvSrc, ", ") + " (read " + r.date + ")"
		rel.TorchvisionPythonConfidence = cuda.ConfA
	} else {
		rel.TorchvisionPython, rel.TorchvisionPythonSource, rel.TorchvisionPythonConfidence = "", "", ""
	}
	// torchaudio: paired (= torch's version) when an index lists the
	// torchaudio of the newest torch patch, the one the resolver pins;
	// unsettled otherwise (torchaudio wheels require their exact torch).
	newest := rel.Patches[len(rel.Patches)-1]
	rel.TorchaudioUnsettled = !taVersions[newest]
	if !rel.TorchaudioUnsettled {
		rel.TorchaudioSource, rel.TorchaudioConfidence = "", ""
	} else {
		var have []string
		for v := range taVersions {
			have = append(have, v)
		}
		slices.SortFunc(have, cmpV)
		listed := "none of torch " + m
		if len(have) > 0 {
			listed = strings.Join(have, ", ")
		}
		rel.TorchaudioSource = "no torchaudio " + newest + " listed by " + strings.Join(taSrc, ", ") + " (read " + r.date + "; torchaudio listed: " + listed + ")"
		rel.TorchaudioConfidence = cuda.ConfA
	}
	return rel, true
}

func minorNumber(m string) int {
	v, err := cuda.ParseVersion(m)
	if err != nil || len(v) < 2 {
		return 0
	}
	return v[1]
}

// variant builds one variant row of torch minor m that the index lists.
func (r *run) variant(m, name string, mrow *matrixRow, b *recipes.TorchRelease, done []recipes.TorchRelease) recipes.TorchVariant {
	cudaVer, _ := cudaOfVariant(name)
	bv := findVariant(b, name)
	var v recipes.TorchVariant
	if bv != nil {
		v = *bv
	} else {
		v = recipes.TorchVariant{Name: name, CUDA: cudaVer}
		// Archs and ABI no live source carries: from the newest older
		// release with this variant (or, for the ABI, any variant).
		for i := len(done) - 1; i >= 0; i-- {
			if pv := findVariant(&done[i], name); pv != nil {
				v.Archs, v.ArchsConfidence, v.CXX11ABI = pv.Archs, cuda.ConfC, pv.CXX11ABI
				break
			}
		}
		if v.Archs == "" {
			v.ArchsConfidence = cuda.ConfUnverified
			if len(done) > 0 && len(done[len(done)-1].Variants) > 0 {
				v.CXX11ABI = done[len(done)-1].Variants[0].CXX11ABI
			}
		}
	}
	v.Source, v.Confidence = "listed by "+r.read(r.projectURL(name, "torch")), cuda.ConfA
	switch {
	case mrow != nil:
		if c, stable, ok := mrow.find(cudaVer); ok {
			v.Stable, v.Unofficial = stable, false
			if c.CuDNN != "" {
				v.CuDNN = c.CuDNN
			}
		} else {
			v.Stable, v.Unofficial = false, true
			v.Source += "; not in the PyTorch release matrix " + r.read(r.o.MatrixURL)
		}
	case bv == nil:
		// Neither the matrix nor kiln's data lists it.
		v.Stable, v.Unofficial = false, true
		v.Source += "; torch " + m + " is not in the PyTorch release matrix " + r.read(r.o.MatrixURL)
	}
	return v
}
