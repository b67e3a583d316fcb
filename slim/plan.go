package slim

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/fatbin"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/overlay"
)

// Output layers, in the order they are stacked: what changes least first.
const (
	bucketOS = iota
	bucketCUDA
	bucketPython
	bucketApp
	numBuckets
)

var bucketNames = [numBuckets]string{"os", "cuda", "python", "app"}

// ops say what the second pass does with a source entry.
const (
	opSkip        = iota
	opEmit        // copy the entry (a hardlink keeps its link to a.link)
	opMaterialize // write a hardlink as a regular file with a.src's content
	opSymlink     // replace a duplicate library with a symlink to a.link
	opDivert      // hand the content to the Diverter
)

type action struct {
	op uint8
	// bucket is the output layer the entry goes to: an index into
	// plan.layerNames (a group, or one of the layers a group was split
	// into), not a group.
	bucket uint16
	stash  bool // keep the content on disk for a materialized hardlink
	link   string
	src    *rec
	fat    *fatbin.Plan // fat-binary pruning applied while copying
}

// Why a visible file left the image (report reasons).
const (
	whySuperseded = "superseded"
	whyClass      = "class"
	whyGlob       = "remove"
	whyDiverted   = "diverted"
	whyWeights    = "weights dropped"
	whyDedupe     = "duplicate CUDA library"
	whyDangling   = "symlink to a removed file"
)

// plan is the squashed filesystem plus a decision per source entry.
type plan struct {
	actions  [][]*action // [layer][ord]
	report   *Report
	removed  []RemovedFile
	stashIDs map[*rec]int
	// layerNames names the output layers, in stacking order: a group's
	// name ("cuda"), or "cuda-1", "cuda-2", ... when MaxLayerSize split it.
	layerNames []string
}

// layerKinds are the kinds of layers recognised from their history, for
// placing application files last.
func isCopyLayer(createdBy string) bool {
	s := strings.TrimSpace(strings.TrimPrefix(createdBy, "/bin/sh -c #(nop)"))
	return strings.HasPrefix(s, "COPY ") || strings.HasPrefix(s, "ADD ") && !strings.HasPrefix(s, "ADD file:")
}

func bucketFor(p string, r *rec, appLayer []bool, workdir string) int {
	base := path.Base(p)
	switch {
	case workdir != "" && (p == workdir || strings.HasPrefix(p, workdir+"/")), p == "app" || strings.HasPrefix(p, "app/"):
		return bucketApp
	case r != nil && r.class == classify.ClassCUDALibs, classify.IsCUDALibName(base), classify.InCUDARoot(p),
		strings.HasPrefix(p, "usr/local/cuda"), strings.Contains(p, "-packages/nvidia/"):
		return bucketCUDA
	case pythonPackage(p) != "", strings.HasPrefix(p, "usr/lib/python3"), strings.HasPrefix(p, "usr/local/lib/python3"), strings.HasPrefix(p, "opt/conda/lib/python3"):
		return bucketPython
	case r != nil && r.layer > 0 && r.layer < len(appLayer) && appLayer[r.layer]:
		return bucketApp
	}
	return bucketOS
}

// systemDirs are working directories that are not an application's own.
var systemDirs = map[string]bool{"": true, "usr": true, "usr/local": true, "opt": true, "root": true, "home": true, "tmp": true, "var": true, "etc": true, "srv": true, "workspace": false}

// makePlan squashes the scans and applies the policy, in the phases below:
// the layers added up (what each hides is removed), the run-time kernel
// compilers found, each visible entry kept, dropped or diverted, the
// weights' neighbours diverted with them, libraries nothing links pruned,
// CUDA libraries installed twice deduplicated, symlinks left dangling
// dropped, the output layers grouped and split, and each record's action.
func makePlan(img *layers.Image, scans []*layerScan, opt *Options) (*plan, error) {
	pol := opt.Policy
	rep := newReport(img, opt)
	pl := &plan{report: rep, stashIDs: map[*rec]int{}}
	v, err := pl.squash(scans)
	if err != nil {
		return nil, err
	}
	workdir := ""
	if img.Config != nil {
		workdir, _ = layers.CleanPath(img.Config.Config.WorkingDir)
		if systemDirs[workdir] {
			workdir = ""
		}
	}
	hits, keepForJIT, err := pl.jit(v, opt)
	if err != nil {
		return nil, err
	}
	state := pl.decide(v, opt, hits, keepForJIT)
	if md, ok := opt.Divert.(MountDiverter); ok && pol.Weights == WeightsDivert {
		if err := pl.divertBeside(v, md, state); err != nil {
			return nil, err
		}
	}
	// Libraries nothing links: after the policy's drops (a program it
	// removed needs nothing), before the dedupe (whose keeper must stay).
	if pol.Prunes() {
		rep.Prune = pl.prune(img, v, pol, state, hits, workdir)
		if n := len(rep.Prune.Unreadable); n > 0 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("prune_libs: %d ELF files could not be read (kept; what they need is unknown): %s", n, strings.Join(rep.Prune.Unreadable[:min(n, 3)], "; ")))
		}
	}
	symlinkTo := map[*rec]string{}
	if pol.DedupeCUDALibs {
		if symlinkTo, err = pl.dedupeCUDALibs(v, state); err != nil {
			return nil, err
		}
	}
	pl.dropDangling(v, state)
	appLayer := make([]bool, len(img.Layers))
	for i, l := range img.Layers {
		appLayer[i] = isCopyLayer(l.CreatedBy)
	}
	out, names, err := groupLayers(v, state, appLayer, workdir, opt.MaxLayerSize)
	if err != nil {
		return nil, err
	}
	pl.layerNames = names
	pl.act(v, state, out, symlinkTo)
	pl.gpuCode(scans, opt)
	rep.finishPlan(pl.removed)
	return pl, nil
}

// squash adds the scanned layers up into the final filesystem, sizing
// pl.actions for each layer's records and removing (whySuperseded) each
// file a later layer hides.
func (pl *plan) squash(scans []*layerScan) (*view, error) {
	rep := pl.report
	pl.actions = make([][]*action, len(scans))
	v := overlay.New[*rec]()
	for i, s := range scans {
		pl.actions[i] = make([]*action, len(s.recs)+1)
		for _, r := range s.recs {
			if r.ord >= len(pl.actions[i]) {
				grown := make([]*action, r.ord+1)
				copy(grown, pl.actions[i])
				pl.actions[i] = grown
			}
			if r.kind == kFile {
				rep.before(r)
			}
		}
		rep.SourceLayers[i].UncompressedSize = s.stats.UncompressedSize
		if err := apply(v, s.recs, func(r *rec) {
			if r.kind == kFile {
				pl.remove(r, whySuperseded)
			}
		}); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// jit finds the run-time kernel compilers in the final filesystem and,
// when the policy drops the compiler or headers they need, applies its
// jit rule: refuse (a JITError, or a warning with --force), or keep what
// they need (keepForJIT).
func (pl *plan) jit(v *view, opt *Options) (hits []*jitHit, keepForJIT bool, err error) {
	pol, rep := opt.Policy, pl.report
	seen := map[string]bool{}
	v.Root().Walk(func(n *vnode) {
		if r := n.Value(); r != nil && r.jit != nil && !seen[r.jit.pkg] {
			seen[r.jit.pkg] = true
			hits = append(hits, r.jit)
		}
	})
	if len(hits) == 0 || !(pol.drops(classify.ClassDevTools) || pol.drops(classify.ClassHeaders)) {
		return hits, false, nil
	}
	for _, h := range hits {
		rep.JIT = append(rep.JIT, JITPackage{Package: h.pkg, What: h.what, Needs: h.needs})
	}
	switch {
	case pol.JIT == JITRefuse && !opt.Force:
		var names []string
		for _, h := range hits {
			names = append(names, fmt.Sprintf("%s (%s; needs %s)", h.pkg, h.what, h.needs))
		}
		return nil, false, &JITError{Packages: rep.JIT, msg: fmt.Sprintf("policy %s drops the CUDA compiler and headers, but the image has packages that compile kernels at run time: %s; set jit: keep in the policy to keep them, or pass --force to drop them anyway", pol.Name, strings.Join(names, "; "))}
	case pol.JIT == JITRefuse:
		rep.Warnings = append(rep.Warnings, "--force: dropping nvcc and headers although "+jitNames(hits)+" compile kernels at run time; they will fail when they do")
		return hits, false, nil
	}
	return hits, true, nil
}

// decide gives each visible entry its operation (the returned state):
// kept, dropped by class or glob, or diverted into the weights volume.
func (pl *plan) decide(v *view, opt *Options, hits []*jitHit, keepForJIT bool) map[*rec]uint8 {
	pol, rep := opt.Policy, pl.report
	state := map[*rec]uint8{} // final op for visible records
	v.Root().Walk(func(n *vnode) {
		r := n.Value()
		if r == nil || n == v.Root() {
			return
		}
		p := r.path
		op := uint8(opEmit)
		why := ""
		class := r.class
		if r.kind == kHardlink && r.linkTo != nil && r.linkTo.class == classify.ClassWeights {
			class = classify.ClassWeights
		}
		if r.kind != kDir {
			switch {
			case matchKeep(pol, p):
				rep.keptGlob(r)
			case class == classify.ClassWeights:
				switch {
				case pol.Weights == WeightsDrop:
					op, why = opSkip, whyWeights
				case pol.Weights == WeightsDivert && opt.Divert != nil && r.kind == kFile:
					op, why = opDivert, whyDiverted
				case pol.Weights == WeightsDivert && opt.Divert != nil:
					op, why = opSkip, whyDiverted // a hardlink to a diverted file
				default:
					rep.keptWeights(r, pol)
				}
			case pol.drops(class) && keepForJIT && (class == classify.ClassDevTools || class == classify.ClassHeaders):
				rep.keptJIT(r, class, hits)
			case pol.drops(class):
				op, why = opSkip, whyClass
			default:
				if g, ok := matchAny(pol.Remove, p); ok {
					op, why = opSkip, whyGlob+" "+g
				}
			}
		}
		state[r] = op
		if op != opEmit {
			pl.remove(r, why)
		}
	})
	return state
}

// dedupeCUDALibs keeps one copy of each CUDA library installed both by
// the system and by a wheel: the system copy stays, the wheel's becomes a
// symlink to it (relative, so it works wherever the root is mounted). It
// returns each such record's link target.
func (pl *plan) dedupeCUDALibs(v *view, state map[*rec]uint8) (map[*rec]string, error) {
	symlinkTo := map[*rec]string{}
	groups := map[string][]*rec{}
	v.Root().Walk(func(n *vnode) {
		if r := n.Value(); r != nil && r.kind == kFile && r.hasSum && state[r] == opEmit {
			so := classify.Soname(path.Base(r.path))
			groups[so] = append(groups[so], r)
		}
	})
	sonames := make([]string, 0, len(groups))
	for so := range groups {
		sonames = append(sonames, so)
	}
	sort.Strings(sonames)
	for _, so := range sonames {
		var sys, py []*rec
		for _, c := range groups[so] {
			if pythonPackage(c.path) != "" {
				py = append(py, c)
			} else {
				sys = append(sys, c)
			}
		}
		if len(sys) == 0 || len(py) == 0 {
			continue
		}
		keeper := sys[0]
		for _, c := range py {
			if c.sum != keeper.sum {
				// Different builds: swapping one for the other could
				// break whoever was linked against it.
				for _, s := range sys[1:] {
					if s.sum == c.sum {
						keeper = s
					}
				}
			}
			if c.sum != keeper.sum {
				pl.report.Kept = append(pl.report.Kept, KeptReason{Path: "/" + c.path, Bytes: c.size, Reason: fmt.Sprintf("%s is installed twice but /%s has different content: both copies kept", so, keeper.path)})
				continue
			}
			rel, err := relLink(c.path, keeper.path)
			if err != nil {
				return nil, err
			}
			symlinkTo[c] = rel
			state[c] = opSymlink
			pl.remove(c, whyDedupe+" (→ /"+keeper.path+")")
		}
	}
	return symlinkTo, nil
}

// dropDangling removes the symlinks whose target this policy removed,
// which would dangle (nvcc's /usr/bin link, libcudart_static.so pointers,
// ...), repeating until nothing changes: links can point at links.
func (pl *plan) dropDangling(v *view, state map[*rec]uint8) {
	for changed := true; changed; {
		changed = false
		v.Root().Walk(func(n *vnode) {
			r := n.Value()
			if r == nil || r.kind != kSymlink || state[r] != opEmit {
				return
			}
			t := v.Resolve(n.Path())
			if t == nil || t.Value() == nil || t.IsDir() {
				return // dangling in the source already, or a directory: leave it
			}
			// A diverted target comes back at its path with the volume.
			if state[t.Value()] == opSkip {
				state[r] = opSkip
				pl.remove(r, whyDangling+" (/"+t.Value().path+")")
				changed = true
			}
		})
	}
}

// groupLayers puts files in buckets by path and directories at the lowest
// bucket of what they hold (so they exist before anything is written into
// them), then splits each bucket under maxLayer: each node's output layer,
// and the layers' names.
func groupLayers(v *view, state map[*rec]uint8, appLayer []bool, workdir string, maxLayer int64) (map[*vnode]int, []string, error) {
	bucket := map[*vnode]int{}
	var assign func(n *vnode) int
	assign = func(n *vnode) int {
		own := bucketFor(n.Path(), n.Value(), appLayer, workdir)
		b := numBuckets
		for _, c := range n.Children() {
			b = min(b, assign(c))
		}
		if !n.IsDir() || own < b {
			b = own
		}
		bucket[n] = b
		return b
	}
	assign(v.Root())
	return splitGroups(v, bucket, state, maxLayer)
}

// act records each visible record's action in its output layer out[n].
// Hardlinks keep the link when the target is emitted unchanged in the same
// output layer; otherwise the content itself is written (materialized).
func (pl *plan) act(v *view, state map[*rec]uint8, out map[*vnode]int, symlinkTo map[*rec]string) {
	rep := pl.report
	v.Root().Walk(func(n *vnode) {
		r := n.Value()
		if r == nil || n == v.Root() {
			return
		}
		b := uint16(out[n])
		op := state[r]
		a := &action{op: op, bucket: b}
		switch op {
		case opSkip:
			return
		case opSymlink:
			a.link = symlinkTo[r]
		case opEmit:
			if r.kind == kHardlink {
				t := r.linkTo
				tn := v.Lookup(t.path)
				if tn != nil && tn.Value() == t && state[t] == opEmit && out[tn] == int(b) && t.kind == kFile {
					a.link = t.path
				} else if t.kind == kFile {
					a.op, a.src = opMaterialize, t
					pl.stash(t)
					rep.Materialized++
				} else {
					a.link = t.path
				}
			}
		}
		if prev := pl.actions[r.layer][r.ord]; prev != nil && prev.stash {
			a.stash = true
		}
		pl.actions[r.layer][r.ord] = a
		if r.kind == kFile || a.op == opMaterialize {
			rep.after(r, a)
		}
	})
}

func matchKeep(pol *Policy, p string) bool {
	_, ok := matchAny(pol.Keep, p)
	return ok
}

func jitNames(hits []*jitHit) string {
	var s []string
	for _, h := range hits {
		s = append(s, h.pkg)
	}
	return strings.Join(s, ", ")
}

// relLink is the relative symlink target from link's directory to target.
func relLink(link, target string) (string, error) {
	from := strings.Split(path.Dir(link), "/")
	if path.Dir(link) == "." {
		from = nil
	}
	to := strings.Split(target, "/")
	i := 0
	for i < len(from) && i < len(to)-1 && from[i] == to[i] {
		i++
	}
	var parts []string
	for range from[i:] {
		parts = append(parts, "..")
	}
	parts = append(parts, to[i:]...)
	return strings.Join(parts, "/"), nil
}

func (pl *plan) remove(r *rec, why string) {
	pl.removed = append(pl.removed, RemovedFile{Path: "/" + r.path, Bytes: r.size, Layer: r.layer, Class: r.class, Why: why, kind: r.kind})
}

// divertBeside asks md where the diverted weights will be mounted and
// diverts every other regular file the image keeps below that directory
// (the mount would hide it otherwise). Files the policy drops stay
// dropped; links below the mount are refused, naming the fix.
func (pl *plan) divertBeside(v *view, md MountDiverter, state map[*rec]uint8) error {
	var ws []string
	v.Root().Walk(func(n *vnode) {
		if r := n.Value(); r != nil && state[r] == opDivert {
			ws = append(ws, "/"+r.path)
		}
	})
	if len(ws) == 0 {
		return nil
	}
	mount, err := md.DivertMount(ws)
	if err != nil {
		return err
	}
	dir := strings.TrimPrefix(path.Clean(mount), "/")
	if !path.IsAbs(mount) || dir == "" {
		return fmt.Errorf("weights mount %q: want an absolute directory below /", mount)
	}
	pl.report.DivertMount = "/" + dir
	top := v.Lookup(dir)
	if top == nil {
		return nil
	}
	if !top.IsDir() {
		return fmt.Errorf("weights mount /%s is a file in the image, not a directory", dir)
	}
	var bad error
	top.Walk(func(n *vnode) {
		r := n.Value()
		if bad != nil || r == nil || n == top || r.kind == kDir {
			return
		}
		switch {
		case r.kind == kFile && state[r] == opEmit:
			state[r] = opDivert
			pl.remove(r, whyDiverted)
			pl.report.DivertedBeside++
		case r.kind == kSymlink && state[r] == opEmit, r.kind == kHardlink && (state[r] == opEmit || r.linkTo != nil && state[r.linkTo] == opDivert):
			what := "symlink to " + n.Link()
			if r.kind == kHardlink {
				what = "hardlink to /" + r.linkTo.path
			}
			bad = fmt.Errorf("/%s is a %s below the weights' mount /%s: a volume holds regular files only, and mounting it there would hide the link; replace the link by a copy of its target, or move the weights to their own directory (or choose another mount with --mount / --weights-mount)", r.path, what, dir)
		}
	})
	return bad
}

func (pl *plan) stash(r *rec) {
	if _, ok := pl.stashIDs[r]; ok {
		return
	}
	pl.stashIDs[r] = len(pl.stashIDs)
	if a := pl.actions[r.layer][r.ord]; a != nil {
		a.stash = true
		return
	}
	pl.actions[r.layer][r.ord] = &action{op: opSkip, stash: true}
}

// JITError is returned when the policy refuses to drop what run-time kernel
// compilers need.
type JITError struct {
	Packages []JITPackage
	msg      string
}

func (e *JITError) Error() string { return e.msg }
