package hostcheck

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/sign"
)

// ReportSchemaVersion is bumped on any incompatible change to the --json
// report (docs/hostcheck.md); fields are only added within a version.
const ReportSchemaVersion = 1

// Status is an item's verdict.
type Status string

// Item verdicts. Any fail makes kiln host check exit 1.
const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Check item ids, in report order; stable for scripts.
const (
	// IDImage comes first, only when the image named could not be read.
	IDImage       = "image"
	IDDriver      = "driver"
	IDCUDACompat  = "cuda-compat"
	IDRequireCUDA = "require-cuda"
	IDKernels     = "kernels"
	IDToolkit     = "container-toolkit"
	IDEngine      = "engine"
	IDRegistry    = "registry-auth"
	IDVolumes     = "volumes"
	IDCompose     = "compose"
	IDRuntime     = "runtime-settings"
)

// Item is one checked aspect: its verdict, the evidence it rests on and
// the fixes when it does not pass.
type Item struct {
	ID       string   `json:"id"`
	Title    string   `json:"title"`
	Status   Status   `json:"status"`
	Summary  string   `json:"summary"`
	Evidence []string `json:"evidence"`
	Fix      []string `json:"fix"`
}

// Report is the result of checking an image (optional) against a host.
type Report struct {
	SchemaVersion int    `json:"schema_version"`
	OK            bool   `json:"ok"` // no item failed
	Counts        Counts `json:"counts"`
	Host          *Host  `json:"host"`
	Image         *Image `json:"image"`
	Items         []Item `json:"items"`
	// PullCompression is the layer compression to publish and pull for
	// this host's container runtimes: "zstd" when every reachable Docker
	// and containerd pulls it (Docker ≥ 23.0, containerd ≥ 1.5), else
	// "gzip"; "" when none answers.
	PullCompression string `json:"pull_compression"`
}

// Counts tallies the verdicts.
type Counts struct {
	Pass int `json:"pass"`
	Warn int `json:"warn"`
	Fail int `json:"fail"`
	Skip int `json:"skip"`
}

// Options tune the checks.
type Options struct {
	// ImageRef and ImageError: the image named could not be read; the
	// report says why (an "image" item, failed) beside the host's items.
	ImageRef, ImageError string
	// WeightsBytes is the size of the model weights the volumes must hold
	// (0: unknown, free space is only reported).
	WeightsBytes int64
	// Signature, when set, adds the "signature" item (host check --image
	// of a registry image).
	Signature *sign.Inspection
}

// Item returns the item with id, or nil.
func (r *Report) Item(id string) *Item {
	for i := range r.Items {
		if r.Items[i].ID == id {
			return &r.Items[i]
		}
	}
	return nil
}

// Check runs every item for host h and image im (nil: host-only items).
func Check(h *Host, im *Image, o Options) *Report {
	c := &checker{h: h, im: im, o: o}
	c.prepare()
	r := &Report{SchemaVersion: ReportSchemaVersion, Host: h, Image: im}
	r.Items = []Item{c.driver(), c.cudaCompat(), c.requireCUDA(), c.kernels(), c.toolkit(), c.engine(), c.registry(), c.volumes(), c.compose(), c.runtimeSettings()}
	if o.ImageError != "" {
		// The image could not be read (refused credentials, a missing
		// tag): the host is still checked and reported, and this says
		// why the image's items were skipped.
		r.Items = append([]Item{{ID: IDImage, Title: "Image", Status: Fail,
			Summary: "could not read " + o.ImageRef + ": " + o.ImageError, Evidence: []string{o.ImageError},
			Fix: []string{"fix what the error names, then run kiln host check --image " + o.ImageRef + " again"}}}, r.Items...)
	}
	if o.Signature != nil {
		r.Items = append(r.Items, c.signature())
	}
	for i := range r.Items {
		it := &r.Items[i]
		if it.Evidence == nil {
			it.Evidence = []string{}
		}
		if it.Fix == nil {
			it.Fix = []string{}
		}
		switch it.Status {
		case Pass:
			r.Counts.Pass++
		case Warn:
			r.Counts.Warn++
		case Fail:
			r.Counts.Fail++
		default:
			r.Counts.Skip++
		}
	}
	r.OK = r.Counts.Fail == 0
	r.PullCompression = c.pull
	return r
}

type checker struct {
	h    *Host
	im   *Image
	o    Options
	pull string // the compression the runtimes pull (engine item)

	imgMM    string // the image's CUDA major.minor
	req      cuda.Requirement
	reqErr   error
	haveReq  bool
	md       *cuda.DriverReq // drivers the image's CUDA needs
	fwd      bool            // every GPU runs the image through forward compatibility
	fwdWhy   []string
	noCompat bool // forward compatibility would apply but the image lacks cuda-compat
	mvcOK    bool // same CUDA major and driver ≥ the minor-version floor
	native   bool
	compatOK bool // the CUDA runtime in the image initialises on this driver
}

func item(id, title string) Item { return Item{ID: id, Title: title} }

func skip(it Item, why string) Item {
	it.Status, it.Summary = Skip, why
	return it
}

func gpuLabel(g GPU) string {
	return fmt.Sprintf("GPU %d %s (compute capability %s, brand %s)", g.Index, g.Name, g.ComputeCapability, g.Brand)
}

func cmpVer(a, b string) int {
	av, err1 := cuda.ParseVersion(a)
	bv, err2 := cuda.ParseVersion(b)
	if err1 != nil || err2 != nil {
		return strings.Compare(a, b)
	}
	return av.Compare(bv)
}

func branch(driver string) string { b, _, _ := strings.Cut(driver, "."); return b }

// prepare derives the facts several items share.
func (c *checker) prepare() {
	if c.im == nil {
		return
	}
	if c.im.RequireCUDA != "" {
		c.haveReq = true
		c.req, c.reqErr = cuda.ParseRequireCUDA(c.im.RequireCUDA)
	}
	if c.im.CUDA == "" && c.haveReq && c.reqErr == nil {
		c.im.CUDA = c.req.CUDAMin()
	}
	v, err := cuda.ParseVersion(c.im.CUDA)
	if err != nil {
		return
	}
	c.imgMM = v.MajorMinor()
	if md, err := cuda.MinDriver(c.im.CUDA); err == nil {
		c.md = &md
	}
	d := c.h.Driver
	if d == nil {
		return
	}
	c.native = cmpVer(d.CUDAVersion, c.imgMM) >= 0
	if c.md != nil && c.md.MinorVersionCompat != "" {
		hv, _ := cuda.ParseVersion(d.CUDAVersion)
		c.mvcOK = hv != nil && hv.Major() == v.Major() && cmpVer(d.Version, c.md.MinorVersionCompat) >= 0
	}
	// Forward compatibility: the image's cuda-compat libraries replace the
	// host's libcuda, on data-center GPUs only, for the driver branches the
	// image's NVIDIA_REQUIRE_CUDA brand clauses list.
	c.fwd = len(c.h.GPUs) > 0 && c.haveReq && c.reqErr == nil
	for _, g := range c.h.GPUs {
		if !g.DataCenter {
			c.fwd = false
			c.fwdWhy = append(c.fwdWhy, fmt.Sprintf("%s: forward compatibility (cuda-compat) works only on data-center GPUs, not brand %s", gpuLabel(g), g.Brand))
			continue
		}
		if c.haveReq && c.reqErr == nil && !slices.Contains(c.req.Branches(g.Brand), branch(d.Version)) && !c.brandBranchCovered(g) {
			c.fwd = false
			c.fwdWhy = append(c.fwdWhy, fmt.Sprintf("%s: the image's cuda-compat covers driver branches %s for brand %s, not %s", gpuLabel(g), dashJoin(c.req.Branches(g.Brand), ","), g.Brand, branch(d.Version)))
		}
	}
	// Forward compatibility loads the image's own libcuda from
	// /usr/local/cuda/compat: an image without it (slimmed, or a base
	// that never had cuda-compat) has nothing to load.
	if c.fwd && c.im.CompatScanned && len(c.im.CompatLibs) == 0 {
		c.fwd, c.noCompat = false, true
		c.fwdWhy = append(c.fwdWhy, "the image has no cuda-compat libraries (no libcuda.so* under /usr/local/cuda*/compat): forward compatibility has nothing to load")
	}
	c.compatOK = c.native || c.fwd || c.mvcOK
}

// brandBranchCovered says whether a term naming g's brand accepts the
// driver (brand clauses written with other driver bounds than N,N+1).
func (c *checker) brandBranchCovered(g GPU) bool {
	for _, t := range c.req.Terms {
		named := false
		for _, r := range t {
			if r.Name == "brand" && r.Op == "=" && strings.EqualFold(r.Value, g.Brand) {
				named = true
			}
		}
		if !named {
			continue
		}
		one := cuda.Requirement{Terms: [][]cuda.Rule{t}}
		if ok, _ := one.Satisfied(cuda.Host{DriverVersion: c.h.Driver.Version, CUDAVersion: "0.0", Brand: g.Brand, Arch: g.ComputeCapability}); ok {
			return true
		}
	}
	return false
}

func dashJoin(s []string, sep string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, sep)
}

// 1. Driver and GPUs.
func (c *checker) driver() Item {
	it := item(IDDriver, "Driver and GPUs")
	d := c.h.Driver
	if d == nil {
		it.Status, it.Summary = Fail, "no NVIDIA driver found"
		it.Evidence = append(it.Evidence, "neither nvidia-smi nor /proc/driver/nvidia/version answered")
		it.Evidence = append(it.Evidence, c.h.Notes...)
		it.Fix = []string{"install the NVIDIA driver (a data-center branch such as R570 or R580) and reboot; check with nvidia-smi"}
		return it
	}
	mod := "proprietary kernel module"
	if d.OpenKernelModule {
		mod = "open kernel module"
	}
	it.Evidence = append(it.Evidence, fmt.Sprintf("driver %s (%s), supports CUDA %s natively [%s]", d.Version, mod, d.CUDAVersion, d.Source))
	for _, g := range c.h.GPUs {
		e := gpuLabel(g)
		if g.UUID != "" {
			e += " " + g.UUID
		}
		if g.MemoryMiB > 0 {
			e += fmt.Sprintf(", %d MiB", g.MemoryMiB)
		}
		if g.DataCenter {
			e += ", data-center class"
		}
		it.Evidence = append(it.Evidence, e)
	}
	it.Evidence = append(it.Evidence, c.h.Notes...)
	if len(c.h.GPUs) == 0 {
		it.Status, it.Summary = Fail, fmt.Sprintf("driver %s but no GPU visible", d.Version)
		it.Fix = []string{"check nvidia-smi -L; a GPU the driver cannot see (Xid errors, fallen off the bus) needs a reset or a reboot"}
		return it
	}
	it.Status = Pass
	it.Summary = fmt.Sprintf("driver %s (CUDA %s), %d GPU(s): %s", d.Version, d.CUDAVersion, len(c.h.GPUs), gpuNames(c.h.GPUs))
	return it
}

func gpuNames(gs []GPU) string {
	count := map[string]int{}
	var order []string
	for _, g := range gs {
		k := g.Name + " (" + ccSM(g.ComputeCapability) + ")"
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	var out []string
	for _, k := range order {
		if count[k] > 1 {
			out = append(out, fmt.Sprintf("%d× %s", count[k], k))
		} else {
			out = append(out, k)
		}
	}
	return strings.Join(out, ", ")
}

// 2a. The image's CUDA against the driver.
func (c *checker) cudaCompat() Item {
	it := item(IDCUDACompat, "Image CUDA vs driver")
	switch {
	case c.im == nil:
		return skip(it, "no --image given")
	case c.imgMM == "":
		return skip(it, "the image's CUDA version is unknown (no CUDA_VERSION, dev.kiln.cuda or NVIDIA_REQUIRE_CUDA)")
	case c.h.Driver == nil:
		return skip(it, "no driver")
	}
	d := c.h.Driver
	it.Evidence = append(it.Evidence, fmt.Sprintf("image CUDA %s; driver %s supports CUDA %s", c.im.CUDA, d.Version, d.CUDAVersion))
	if c.md != nil {
		it.Evidence = append(it.Evidence, fmt.Sprintf("CUDA %s needs driver ≥ %s natively, ≥ %s with minor-version compatibility [%s, confidence %s]", c.imgMM, c.md.Toolkit, dashOr(c.md.MinorVersionCompat, "n/a"), c.md.Source, c.md.Confidence))
	}
	switch {
	case c.native:
		it.Status, it.Summary = Pass, fmt.Sprintf("native: driver CUDA %s ≥ image CUDA %s", d.CUDAVersion, c.imgMM)
	case c.fwd:
		it.Status = Pass
		it.Summary = fmt.Sprintf("forward compatibility: the image's cuda-compat libraries cover driver branch %s on these data-center GPUs", branch(d.Version))
		it.Evidence = append(it.Evidence, "forward compatibility needs NVIDIA Container Toolkit ≥ 1.17.5 (enable-cuda-compat hook) or the image's /usr/local/cuda/compat on LD_LIBRARY_PATH")
		if len(c.im.CompatLibs) > 0 {
			it.Evidence = append(it.Evidence, "cuda-compat in the image: "+listSome(c.im.CompatLibs, 3))
		} else if !c.im.CompatScanned {
			it.Status = Warn
			it.Summary = fmt.Sprintf("forward compatibility on driver branch %s, if the image has cuda-compat: its layers were not read", branch(d.Version))
			it.Fix = append(it.Fix, "check the image itself (an image reference, without --no-kernels): forward compatibility needs libcuda.so under /usr/local/cuda/compat, which slimming can drop")
		}
		if c.mvcOK {
			it.Evidence = append(it.Evidence, fmt.Sprintf("minor-version compatibility would also run SASS-only code (driver ≥ %s)", c.md.MinorVersionCompat))
		}
	case c.mvcOK:
		it.Status = Warn
		it.Summary = fmt.Sprintf("minor-version compatibility only: driver %s (CUDA %s) < CUDA %s but ≥ the floor %s", d.Version, d.CUDAVersion, c.imgMM, c.md.MinorVersionCompat)
		it.Evidence = append(it.Evidence, "SASS (cubins) runs; PTX JIT (Triton, +PTX archs, NVRTC) fails with CUDA_ERROR_UNSUPPORTED_PTX_VERSION; features needing a newer driver return cudaErrorCallRequiresNewerDriver")
		it.Evidence = append(it.Evidence, c.fwdWhy...)
		it.Fix = []string{fmt.Sprintf("upgrade the driver to ≥ %s for native CUDA %s", c.md.Toolkit, c.imgMM)}
		it.Fix = append(it.Fix, c.compatFix()...)
	default:
		it.Status = Fail
		floor := "n/a"
		if c.md != nil {
			floor = dashOr(c.md.MinorVersionCompat, "n/a")
		}
		it.Summary = fmt.Sprintf("CUDA %s cannot initialise on driver %s (CUDA %s): below the minor-version floor %s and no forward compatibility", c.imgMM, d.Version, d.CUDAVersion, floor)
		it.Evidence = append(it.Evidence, c.fwdWhy...)
		it.Evidence = append(it.Evidence, "inside the container: cudaGetDeviceCount returned 3 (initialization error) / CUDA driver version is insufficient for CUDA runtime version")
		if c.md != nil {
			it.Fix = append(it.Fix, fmt.Sprintf("upgrade the driver to ≥ %s (CUDA %s natively)", c.md.Toolkit, c.imgMM))
			if c.md.MinorVersionCompat != "" && cmpVer(d.Version, c.md.MinorVersionCompat) < 0 {
				it.Fix = append(it.Fix, fmt.Sprintf("or at least to ≥ %s, the CUDA %s minor-version floor (SASS-only code; PTX JIT needs %s)", c.md.MinorVersionCompat, strings.SplitN(c.imgMM, ".", 2)[0]+".x", c.md.Toolkit))
			}
		}
		it.Fix = append(it.Fix, c.compatFix()...)
		it.Fix = append(it.Fix, fmt.Sprintf("use an image built for CUDA ≤ %s", d.CUDAVersion))
	}
	c.torchCUDA(&it)
	return it
}

// compatFix is the fix when only the missing cuda-compat libraries stop
// forward compatibility.
func (c *checker) compatFix() []string {
	if !c.noCompat {
		return nil
	}
	return []string{fmt.Sprintf("or keep forward compatibility: install cuda-compat-%s in the image (its libcuda.so under /usr/local/cuda/compat; nvidia/cuda bases ship it, slimming must keep it)", strings.ReplaceAll(c.imgMM, ".", "-"))}
}

// torchCUDA warns when the lock's torch wheels bring a CUDA runtime the
// driver cannot run: the wheels' CUDA, not the base image's, is what
// torch initialises (unpinned torch resolves to the newest variant).
func (c *checker) torchCUDA(it *Item) {
	tv := c.im.TorchCUDAVariant
	tc := variantCUDA(tv)
	if tc == "" {
		return
	}
	d := c.h.Driver
	it.Evidence = append(it.Evidence, fmt.Sprintf("torch %s+%s wheels carry CUDA %s's runtime", c.im.Torch, tv, tc))
	// Wheels no newer than the image's CUDA run wherever the image's CUDA
	// does (natively, or through its cuda-compat): the verdict above.
	if cmpVer(d.CUDAVersion, tc) >= 0 || cmpVer(c.imgMM, tc) >= 0 {
		return
	}
	md, err := cuda.MinDriver(tc)
	if err != nil {
		it.Evidence = append(it.Evidence, err.Error())
		return
	}
	if it.Status == Pass || it.Status == Skip {
		it.Status = Warn
	}
	sum := fmt.Sprintf("torch %s+%s needs CUDA %s (driver ≥ %s); driver %s supports CUDA %s", c.im.Torch, tv, tc, md.Toolkit, d.Version, d.CUDAVersion)
	if it.Summary == "" {
		it.Summary = sum
	} else {
		it.Summary = sum + "; " + it.Summary
	}
	it.Fix = append(it.Fix,
		fmt.Sprintf("pin torch's CUDA variant in the recipe to one the driver runs (torch: {variant: %s} or older) and lock again", variantOf(d.CUDAVersion)),
		fmt.Sprintf("or upgrade the driver to ≥ %s (CUDA %s)", md.Toolkit, tc))
}

// variantCUDA is the CUDA version of a torch wheel variant ("cu130" →
// "13.0"), or "" for a variant that is not a CUDA one (cpu, rocm6.2).
func variantCUDA(v string) string {
	n, ok := strings.CutPrefix(v, "cu")
	if !ok || len(n) < 3 {
		return ""
	}
	if _, err := strconv.Atoi(n); err != nil {
		return ""
	}
	return n[:len(n)-1] + "." + n[len(n)-1:]
}

// variantOf is the torch wheel variant name of a CUDA version ("12.8" →
// "cu128").
func variantOf(cudaVersion string) string {
	v, err := cuda.ParseVersion(cudaVersion)
	if err != nil {
		return "cu" + strings.ReplaceAll(cudaVersion, ".", "")
	}
	return "cu" + strings.ReplaceAll(v.MajorMinor(), ".", "")
}

func dashOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// 2b. NVIDIA_REQUIRE_CUDA, evaluated as libnvidia-container does: for each
// visible GPU every requirement must hold (globally when none is visible).
func (c *checker) requireCUDA() Item {
	it := item(IDRequireCUDA, "NVIDIA_REQUIRE_CUDA")
	switch {
	case c.im == nil:
		return skip(it, "no --image given")
	case !c.haveReq:
		return skip(it, "the image sets no NVIDIA_REQUIRE_CUDA and no CUDA_VERSION: the runtime checks nothing")
	case c.h.Driver == nil:
		return skip(it, "no driver")
	}
	d := c.h.Driver
	it.Evidence = append(it.Evidence, fmt.Sprintf("NVIDIA_REQUIRE_CUDA=%s [%s]", c.shortRequire(), c.im.RequireSource))
	if c.reqErr != nil {
		it.Status, it.Summary = Fail, "the image's NVIDIA_REQUIRE_CUDA does not parse; the runtime refuses the container"
		it.Evidence = append(it.Evidence, c.reqErr.Error())
		it.Fix = []string{"fix NVIDIA_REQUIRE_CUDA in the image (space = or, comma = and; cuda, driver, arch, brand rules)"}
		return it
	}
	type fail struct {
		g    *GPU
		rule *cuda.Rule
	}
	var fails []fail
	hosts := []cuda.Host{}
	gpus := []*GPU{}
	if len(c.h.GPUs) == 0 {
		hosts = append(hosts, cuda.Host{DriverVersion: d.Version, CUDAVersion: d.CUDAVersion, NoDevice: true})
		gpus = append(gpus, nil)
	}
	for i := range c.h.GPUs {
		g := &c.h.GPUs[i]
		hosts = append(hosts, cuda.Host{DriverVersion: d.Version, CUDAVersion: d.CUDAVersion, Brand: g.Brand, Arch: g.ComputeCapability})
		gpus = append(gpus, g)
	}
	for i, hh := range hosts {
		if ok, r := c.req.Satisfied(hh); !ok {
			fails = append(fails, fail{gpus[i], r})
		} else if gpus[i] != nil {
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s: satisfied (driver %s, CUDA %s)", gpuLabel(*gpus[i]), d.Version, d.CUDAVersion))
		}
	}
	if len(fails) == 0 {
		it.Status, it.Summary = Pass, fmt.Sprintf("satisfied by driver %s (CUDA %s)", d.Version, d.CUDAVersion)
		if c.im.DisableRequire {
			it.Evidence = append(it.Evidence, "the image also sets NVIDIA_DISABLE_REQUIRE")
		}
		return it
	}
	msg := "unsatisfied condition"
	if db, err := cuda.Data(); err == nil && db.Drivers.Grammar.ErrorMessage != "" {
		msg = db.Drivers.Grammar.ErrorMessage
	}
	first := fails[0]
	cond := "?"
	if first.rule != nil {
		cond = first.rule.String()
	}
	runtimeMsg := "nvidia-container-cli: requirement error: " + strings.Replace(msg, "%s", cond, 1)
	for _, f := range fails {
		who := "no GPU visible"
		brand := ""
		if f.g != nil {
			who, brand = gpuLabel(*f.g), f.g.Brand
		}
		why := fmt.Sprintf("%s: no term holds for driver %s (CUDA %s)", who, d.Version, d.CUDAVersion)
		if brand != "" {
			why += fmt.Sprintf("; brand clauses name %s, driver branches for %s: %s", dashJoin(c.req.Brands(), ","), brand, dashJoin(c.req.Branches(brand), ","))
		}
		it.Evidence = append(it.Evidence, why)
	}
	it.Evidence = append(it.Evidence, "at container start: "+runtimeMsg)
	if c.im.DisableRequire {
		it.Status = Warn
		it.Summary = fmt.Sprintf("not satisfied (%s), but the image sets NVIDIA_DISABLE_REQUIRE so the runtime does not refuse it; see %s", cond, IDCUDACompat)
		return it
	}
	it.Status = Fail
	it.Summary = fmt.Sprintf("the NVIDIA container runtime refuses to start the container: unsatisfied condition %s", cond)
	// One minimum driver per report: the image's own CUDA (what
	// cuda-compat's item names), the requirement's floor only when the
	// image's CUDA is unknown.
	if c.md != nil {
		it.Fix = append(it.Fix, fmt.Sprintf("upgrade the driver to ≥ %s (CUDA %s natively)", c.md.Toolkit, c.imgMM))
	} else if md, err := c.req.MinDriver(); err == nil {
		it.Fix = append(it.Fix, fmt.Sprintf("upgrade the driver to ≥ %s (CUDA %s natively)", md.Toolkit, c.req.CUDAMin()))
	}
	it.Fix = append(it.Fix, fmt.Sprintf("use an image built for CUDA %s or older (the driver's CUDA), e.g. a kiln recipe with cuda: %s", d.CUDAVersion, d.CUDAVersion))
	if c.mvcOK || c.fwd {
		it.Fix = append(it.Fix, fmt.Sprintf("or, knowingly, run with NVIDIA_DISABLE_REQUIRE=1 (docker run -e NVIDIA_DISABLE_REQUIRE=1): driver %s is ≥ the CUDA %s minor-version floor %s, so SASS-only code runs but PTX JIT and newer-driver features fail", d.Version, c.imgMM, c.md.MinorVersionCompat))
	} else {
		it.Fix = append(it.Fix, "NVIDIA_DISABLE_REQUIRE=1 would only skip the check: the driver is below the minor-version floor, so CUDA still fails to initialise")
	}
	return it
}

// 3. The image's GPU code against the host's GPUs.
func (c *checker) kernels() Item {
	it := item(IDKernels, "GPU architectures in the image")
	switch {
	case c.im == nil:
		return skip(it, "no --image given")
	case len(c.h.GPUs) == 0:
		return skip(it, "no GPU to check against")
	}
	rep := c.im.report
	if rep == nil {
		return c.declaredArchs(it)
	}
	if len(rep.Libraries) == 0 {
		return skip(it, "no shared library in the image carries device code (fat binaries)")
	}
	it.Evidence = append(it.Evidence, fmt.Sprintf("%d libraries with device code; SASS %s; PTX %s", len(rep.Libraries), dashJoin(rep.SM, " "), dashJoin(rep.PTX, " ")))
	it.Status = Pass
	jitOK := c.h.Driver != nil && (c.native || c.fwd)
	var missingSM, sums []string
	for _, g := range c.h.GPUs {
		s, err := rep.Support(g.Name, g.ComputeCapability)
		if err != nil {
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s: %v", gpuLabel(g), err))
			continue
		}
		sm := ccSM(g.ComputeCapability)
		// Profiling and debugging libraries (CUPTI, which torch loads for
		// its profiler, the checkpoint and injection libraries) without
		// code for this GPU do not stop a container from computing: they
		// are left out of what must run, and said.
		tooling, compute := analyze.SplitTooling(s.Missing)
		if len(tooling) > 0 && len(compute) == 0 {
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s: only profiling/debugging libraries have no code for %s (%s): the profiler fails on this GPU, compute does not", gpuLabel(g), sm, listSome(tooling, 5)))
		}
		switch {
		case len(compute) > 0:
			it.Status = Fail
			if !slices.Contains(missingSM, sm) {
				missingSM = append(missingSM, sm)
			}
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s: no SASS for %s and no PTX at or below it in %d libraries: %s", gpuLabel(g), sm, len(compute), listSome(compute, 5)))
			sums = append(sums, fmt.Sprintf("%s: no kernel image for %s", g.Name, sm))
		case len(s.JIT) > 0 && !jitOK:
			it.Status = Fail
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s: %d libraries run only through PTX JIT (%s), which needs a driver at least as new as the image's toolkit (CUDA %s); driver %s supports CUDA %s", gpuLabel(g), len(s.JIT), listSome(s.JIT, 5), dashOr(c.imgMM, "?"), driverVersion(c.h), driverCUDA(c.h)))
			sums = append(sums, fmt.Sprintf("%s: PTX JIT needs a newer driver", g.Name))
			if c.md != nil {
				it.Fix = appendOnce(it.Fix, fmt.Sprintf("upgrade the driver to ≥ %s so it can JIT the image's PTX", c.md.Toolkit))
			}
		case len(s.JIT) > 0 || len(tooling) > 0:
			if it.Status == Pass {
				it.Status = Warn
			}
			var sum []string
			if len(s.JIT) > 0 {
				it.Evidence = append(it.Evidence, fmt.Sprintf("%s: %d libraries only through PTX JIT (%s): slow first start, JIT cache in ~/.nv/ComputeCache", gpuLabel(g), len(s.JIT), listSome(s.JIT, 5)))
				sum = append(sum, "PTX JIT")
			}
			if len(tooling) > 0 {
				sum = append(sum, "no profiler kernels")
			}
			sums = append(sums, g.Name+": "+strings.Join(sum, ", "))
		default:
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s: SASS in every library", gpuLabel(g)))
		}
	}
	for _, sm := range missingSM {
		it.Fix = append(it.Fix, fmt.Sprintf("rebuild for %s: add the GPU to the kiln recipe's gpus (TORCH_CUDA_ARCH_LIST / FLASH_ATTN_CUDA_ARCHS / nvcc -gencode arch=compute_%s,code=sm_%s), or ship PTX (+PTX) for an older architecture", sm, strings.TrimPrefix(sm, "sm_"), strings.TrimPrefix(sm, "sm_")))
	}
	if len(sums) == 0 {
		it.Summary = "every library has SASS for every GPU"
	} else {
		it.Summary = joinPerGPU(sums)
	}
	return it
}

// joinPerGPU joins findings said once per GPU, each said once: a host's
// identical GPUs give one finding with their count ("NVIDIA H100 80GB
// HBM3: PTX JIT needs a newer driver (8 GPUs)"), in the order first seen.
func joinPerGPU(sums []string) string {
	n := map[string]int{}
	var order []string
	for _, s := range sums {
		if n[s] == 0 {
			order = append(order, s)
		}
		n[s]++
	}
	for i, s := range order {
		if n[s] > 1 {
			order[i] = fmt.Sprintf("%s (%d GPUs)", s, n[s])
		}
	}
	return strings.Join(order, "; ")
}

func driverVersion(h *Host) string {
	if h.Driver == nil {
		return "none"
	}
	return h.Driver.Version
}

func driverCUDA(h *Host) string {
	if h.Driver == nil {
		return "none"
	}
	return h.Driver.CUDAVersion
}

func appendOnce(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

func listSome(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return strings.Join(s[:n], ", ") + fmt.Sprintf(" and %d more", len(s)-n)
}

// declaredArchs checks the recipe's target architectures (kiln label or
// lock) when the fat binaries were not read.
func (c *checker) declaredArchs(it Item) Item {
	if len(c.im.DeclaredArchs) == 0 {
		return skip(it, "the layers were not scanned (--no-kernels) and the image declares no architectures (label dev.kiln.cuda-archs)")
	}
	it.Status = Pass
	it.Evidence = append(it.Evidence, fmt.Sprintf("declared target architectures %s (%s); fat binaries not read", strings.Join(c.im.DeclaredArchs, ","), c.im.Source))
	var sums []string
	for _, g := range c.h.GPUs {
		ok := false
		for _, a := range c.im.DeclaredArchs {
			cc := strings.TrimSuffix(a, "+PTX")
			if n, err := strconv.Atoi(strings.TrimPrefix(cc, "sm_")); err == nil && !strings.Contains(cc, ".") {
				cc = fmt.Sprintf("%d.%d", n/10, n%10)
			}
			av, err1 := cuda.ParseVersion(cc)
			gv, err2 := cuda.ParseVersion(g.ComputeCapability)
			if err1 == nil && err2 == nil && av.Major() == gv.Major() && av.Compare(gv) <= 0 {
				ok = true
			}
		}
		if ok {
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s: targeted by the recipe", gpuLabel(g)))
			continue
		}
		it.Status = Warn
		sums = append(sums, fmt.Sprintf("%s (%s) is not a target of the recipe", g.Name, ccSM(g.ComputeCapability)))
		it.Evidence = append(it.Evidence, fmt.Sprintf("%s: not among the declared architectures; wheels may still carry its SASS", gpuLabel(g)))
		it.Fix = appendOnce(it.Fix, "add the host's GPU to the recipe's gpus and rebuild, or check the image itself (without --no-kernels) to read its fat binaries")
	}
	if len(sums) == 0 {
		it.Summary = "every GPU is a declared target architecture"
	} else {
		it.Summary = joinPerGPU(sums)
	}
	return it
}

// shortRequire abbreviates a long NVIDIA_REQUIRE_CUDA (nvidia/cuda images
// carry 60 brand clauses) for evidence; the image section keeps it whole.
func (c *checker) shortRequire() string {
	s := c.im.RequireCUDA
	if len(s) <= 160 || c.reqErr != nil {
		return s
	}
	var first []string
	var branches []string
	n := 0
	for _, t := range c.req.Terms {
		brand := false
		for _, r := range t {
			if r.Name == "brand" {
				brand = true
			}
		}
		if !brand {
			first = append(first, cuda.Requirement{Terms: [][]cuda.Rule{t}}.String())
			continue
		}
		n++
	}
	for _, b := range c.req.Brands() {
		for _, br := range c.req.Branches(b) {
			if !slices.Contains(branches, br) {
				branches = append(branches, br)
			}
		}
	}
	return fmt.Sprintf("%s + %d brand clauses (brands %s; driver branches %s)", strings.Join(first, " "), n, strings.Join(c.req.Brands(), ","), strings.Join(branches, ","))
}
