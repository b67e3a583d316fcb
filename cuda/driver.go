package cuda

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DriverReq is the minimum Linux driver for a CUDA version.
type DriverReq struct {
	CUDA               string `json:"cuda"`                 // the toolkit row used, e.g. 12.4.1
	Toolkit            string `json:"toolkit"`              // Table 3 driver (native support)
	MinorVersionCompat string `json:"minor_version_compat"` // MVC floor for the CUDA major ("" when none)
	Source             string `json:"source"`
	Confidence         string `json:"confidence"`
	MVCSource          string `json:"minor_version_compat_source,omitempty"`
	MVCConfidence      string `json:"minor_version_compat_confidence,omitempty"`
}

// MinDriver returns the toolkit driver (NVIDIA's Table 3) and the
// minor-version-compatibility floor for cudaVersion ("12.4" means 12.4 GA,
// "12.4.1" 12.4 Update 1).
func MinDriver(cudaVersion string) (DriverReq, error) {
	v, err := ParseVersion(cudaVersion)
	if err != nil {
		return DriverReq{}, fmt.Errorf("CUDA version: %w", err)
	}
	db := mustDB()
	var row *ToolkitDriver
	for i := range db.Drivers.ToolkitDriver {
		r := &db.Drivers.ToolkitDriver[i]
		rv := MustVersion(r.CUDA)
		if len(v) >= 3 {
			if rv.Compare(v) == 0 {
				row = r
				break
			}
			continue
		}
		// X.Y: the GA (lowest) row of that minor.
		if rv.MajorMinor() == v.MajorMinor() && (row == nil || CompareVersions(r.CUDA, row.CUDA) < 0) {
			row = r
		}
	}
	inferred := false
	if row == nil && len(v) >= 3 {
		// An update Table 3 does not list (e.g. 12.3.2): use the newest
		// listed update of that minor below it.
		for i := range db.Drivers.ToolkitDriver {
			r := &db.Drivers.ToolkitDriver[i]
			rv := MustVersion(r.CUDA)
			if rv.MajorMinor() == v.MajorMinor() && rv.Compare(v) < 0 && (row == nil || CompareVersions(r.CUDA, row.CUDA) > 0) {
				row, inferred = r, true
			}
		}
	}
	if row == nil {
		return DriverReq{}, fmt.Errorf("CUDA %s is not in kiln's driver table (known: %s)%s", cudaVersion, knownMinors(), noCUDAHint(v))
	}
	dr := DriverReq{CUDA: row.CUDA, Toolkit: row.LinuxMin, Source: row.Source, Confidence: row.Confidence}
	if inferred {
		dr.CUDA = cudaVersion
		dr.Source = fmt.Sprintf("%s is not in Table 3; inferred from the %s row (%s)", cudaVersion, row.Label, row.Source)
		dr.Confidence = ConfC
	}
	if f := mvcFloor(v.Major()); f != nil {
		dr.MinorVersionCompat = f.Floor
		dr.MVCSource, dr.MVCConfidence = f.Source, f.Confidence
		if MustVersion(f.Floor).Compare(MustVersion(row.LinuxMin)) > 0 {
			dr.MinorVersionCompat = row.LinuxMin
		}
	}
	return dr, nil
}

func noCUDAHint(v Version) string {
	if v.MajorMinor() == "12.7" {
		return "; there is no CUDA 12.7 (12.6 Update 3 is followed by 12.8)"
	}
	return ""
}

func knownMinors() string {
	var out []string
	for _, r := range mustDB().Drivers.ToolkitDriver {
		mm := MajorMinor(r.CUDA)
		if !slices.Contains(out, mm) {
			out = append(out, mm)
		}
	}
	slices.SortFunc(out, CompareVersions)
	return out[0] + " … " + out[len(out)-1]
}

func mvcFloor(major int) *MVCFloor {
	db := mustDB()
	for i := range db.Drivers.MVC {
		if db.Drivers.MVC[i].CUDAMajor == major {
			return &db.Drivers.MVC[i]
		}
	}
	return nil
}

func branchOf(driver string) int {
	b, _ := strconv.Atoi(strings.SplitN(driver, ".", 2)[0])
	return b
}

// DriverCUDA returns the CUDA version a Linux driver supports natively (what
// nvidia-smi reports as "CUDA Version"), from the newest toolkit whose
// bundled driver is in the same or an older branch.
func DriverCUDA(driver string) (string, error) {
	if _, err := ParseVersion(driver); err != nil {
		return "", fmt.Errorf("driver version: %w", err)
	}
	hb := branchOf(driver)
	best := ""
	for _, r := range mustDB().Drivers.ToolkitDriver {
		if branchOf(r.LinuxMin) <= hb && (best == "" || CompareVersions(r.CUDA, best) > 0) {
			best = r.CUDA
		}
	}
	if best == "" {
		return "", fmt.Errorf("driver %s predates every CUDA 11+ driver kiln knows (oldest 450.36.06)", driver)
	}
	return MajorMinor(best), nil
}

// Compatibility modes of a CUDA image on a host driver.
const (
	ModeNative        = "native"
	ModeMinorVersion  = "minor-version"
	ModeForwardCompat = "forward-compat"
	ModeNone          = "none"
)

// DriverVerdict answers "can an image of CUDA X run on driver D (GPU G)".
type DriverVerdict struct {
	Compatible   bool     `json:"compatible"`
	Mode         string   `json:"mode"`
	MinDriver    string   `json:"min_driver"`
	MinDriverMVC string   `json:"min_driver_minor_version_compat,omitempty"`
	Reason       string   `json:"reason"`
	CUDA         string   `json:"cuda"`
	Driver       string   `json:"driver"`
	DriverCUDA   string   `json:"driver_cuda,omitempty"`
	GPU          string   `json:"gpu,omitempty"`
	Brand        string   `json:"brand,omitempty"`
	RequireCUDA  string   `json:"nvidia_require_cuda,omitempty"`
	Alternatives []string `json:"alternatives,omitempty"`
	Sources      []string `json:"sources,omitempty"`
}

// DataCenterBrand reports whether GPUs of an NVML brand (as brand clauses
// spell it) get forward compatibility through cuda-compat: data-center
// GPUs, RTX server SKUs and Jetson do, GeForce and TITAN do not.
func DataCenterBrand(b string) bool { return isDatacenterBrand(b) }

func isDatacenterBrand(b string) bool {
	switch strings.ToLower(b) {
	case "geforce", "geforcertx", "titan", "titanrtx":
		return false
	}
	return b != ""
}

// CheckDriver decides whether an image built on CUDA cuda runs on a host
// with driver (and, optionally, GPU gpu: a name or sm_XX). It applies, in
// order: native support (driver CUDA ≥ image CUDA), the image's
// NVIDIA_REQUIRE_CUDA (its brand clauses decide forward compatibility and
// can refuse minor-version compatibility), and minor-version compatibility.
func CheckDriver(cuda, driver, gpu string) DriverVerdict {
	v := DriverVerdict{CUDA: cuda, Driver: driver, Mode: ModeNone, GPU: gpu}
	cv, err := ParseVersion(cuda)
	if err != nil {
		v.Reason = "CUDA version: " + err.Error()
		return v
	}
	req, err := MinDriver(cuda)
	if err != nil {
		v.Reason = err.Error()
		return v
	}
	v.MinDriver, v.MinDriverMVC = req.Toolkit, req.MinorVersionCompat
	v.Sources = append(v.Sources, fmt.Sprintf("driver table: %s [%s]", req.Source, req.Confidence))
	hostCUDA, err := DriverCUDA(driver)
	if err != nil {
		v.Reason = err.Error()
		return v
	}
	v.DriverCUDA = hostCUDA
	brand := ""
	var info GPUInfo
	if gpu != "" {
		info, err = GPU(gpu)
		if err != nil {
			v.Reason = err.Error()
			return v
		}
		brand = info.Brand
		v.Brand = brand
		v.GPU = info.Name
	}
	imgReq, ir, haveReq := ImageRequireCUDA(cuda)
	if haveReq {
		v.RequireCUDA = imgReq.String()
		v.Sources = append(v.Sources, fmt.Sprintf("NVIDIA_REQUIRE_CUDA of nvidia/cuda:%s: %s [%s]", ir.Image, ir.Source, ir.Confidence))
	}
	image := cv.MajorMinor()
	hv := MustVersion(hostCUDA)

	// 1. Native.
	if hv.Compare(MustVersion(image)) >= 0 {
		v.Compatible, v.Mode = true, ModeNative
		v.Reason = fmt.Sprintf("driver %s supports CUDA %s ≥ %s natively", driver, hostCUDA, image)
		return v
	}
	upgrade := fmt.Sprintf("upgrade the driver to ≥ %s (CUDA %s)", req.Toolkit, req.CUDA)
	older := fmt.Sprintf("use an image with CUDA ≤ %s", hostCUDA)
	v.Alternatives = []string{upgrade, older}

	// 2. The image's NVIDIA_REQUIRE_CUDA, evaluated as libnvidia-container does.
	sameMajor := hv.Major() == cv.Major()
	floor := mvcFloor(cv.Major())
	mvcOK := sameMajor && floor != nil && MustVersion(driver).Compare(MustVersion(floor.Floor)) >= 0
	if haveReq {
		eval := func(b string) bool {
			ok, _ := imgReq.Satisfied(Host{DriverVersion: driver, CUDAVersion: hostCUDA, Brand: b, Arch: info.ComputeCapability})
			return ok
		}
		if gpu == "" {
			dc, consumer := eval("tesla") || eval("nvidia"), eval("geforce") || eval("geforcertx")
			switch {
			case dc && consumer && mvcOK:
				v.Compatible, v.Mode = true, ModeMinorVersion
				v.Reason = fmt.Sprintf("driver %s (CUDA %s) is older than CUDA %s but ≥ the minor-version-compatibility floor %s; the image's NVIDIA_REQUIRE_CUDA brand clauses accept driver branch %d. %s", driver, hostCUDA, image, floor.Floor, branchOf(driver), mvcCaveat(req))
			case dc:
				v.Compatible, v.Mode = true, ModeForwardCompat
				v.Reason = fmt.Sprintf("only on data-center GPUs: the image's NVIDIA_REQUIRE_CUDA brand clauses (forward-compat libraries) cover driver branch %d for brands %s, not GeForce/TITAN; pass --gpu to check a specific GPU", branchOf(driver), strings.Join(ir.Brands, ","))
			default:
				v.Reason = refusedReason(imgReq, ir, driver, hostCUDA, "", "")
				v.Alternatives = append(v.Alternatives, disableRequireAlt(mvcOK))
			}
			return v
		}
		if !eval(brand) {
			v.Reason = refusedReason(imgReq, ir, driver, hostCUDA, info.Name, brand)
			v.Alternatives = append(v.Alternatives, disableRequireAlt(mvcOK))
			return v
		}
		if isDatacenterBrand(brand) && len(imgReq.Branches(brand)) > 0 {
			v.Compatible, v.Mode = true, ModeForwardCompat
			v.Reason = fmt.Sprintf("driver %s (CUDA %s) is older than CUDA %s; the image's cuda-compat forward-compatibility libraries cover driver branch %d on %s (brand %s); needs NVIDIA Container Toolkit ≥ 1.17.5 or the image's compat libs on LD_LIBRARY_PATH", driver, hostCUDA, image, branchOf(driver), info.Name, brand)
			return v
		}
	}
	// 3. Minor-version compatibility.
	if mvcOK {
		v.Compatible, v.Mode = true, ModeMinorVersion
		v.Reason = fmt.Sprintf("driver %s (CUDA %s) is older than CUDA %s but ≥ the CUDA %d.x minor-version-compatibility floor %s. %s", driver, hostCUDA, image, cv.Major(), floor.Floor, mvcCaveat(req))
		return v
	}
	if !sameMajor && hv.Major() < cv.Major() {
		fc := "forward compatibility (cuda-compat) works only on data-center GPUs"
		if gpu != "" && !isDatacenterBrand(brand) {
			fc += fmt.Sprintf("; %s is brand %s", info.Name, brand)
		}
		v.Reason = fmt.Sprintf("CUDA %s needs driver ≥ %s (%d.x minor-version floor %s); driver %s supports CUDA %s and %s", image, req.Toolkit, cv.Major(), req.MinorVersionCompat, driver, hostCUDA, fc)
		return v
	}
	v.Reason = fmt.Sprintf("CUDA %s needs driver ≥ %s natively or ≥ %s with minor-version compatibility; driver %s supports CUDA %s", image, req.Toolkit, req.MinorVersionCompat, driver, hostCUDA)
	return v
}

func mvcCaveat(req DriverReq) string {
	return fmt.Sprintf("SASS-only code runs; PTX JIT (Triton kernels, +PTX archs, GPUs without a matching cubin) needs driver ≥ %s", req.Toolkit)
}

func disableRequireAlt(mvcOK bool) string {
	if mvcOK {
		return "set NVIDIA_DISABLE_REQUIRE=1 in the container to rely on minor-version compatibility (SASS-only code)"
	}
	return "NVIDIA_DISABLE_REQUIRE=1 skips the check but the driver is below the minor-version floor, so CUDA would still fail"
}

func refusedReason(req Requirement, ir *ImageRequire, driver, hostCUDA, gpuName, brand string) string {
	who := "GeForce/TITAN GPUs"
	if gpuName != "" {
		who = fmt.Sprintf("%s (brand %s)", gpuName, brand)
	}
	branches := make([]string, len(ir.Branches))
	for i, b := range ir.Branches {
		branches[i] = strconv.Itoa(b)
	}
	return fmt.Sprintf("refused at container start by the image's NVIDIA_REQUIRE_CUDA: unsatisfied condition: cuda>=%s (driver %s supports CUDA %s), and its brand clauses only cover driver branches %s for brands %s, so no clause matches %s on branch %d",
		ir.CUDAGE, driver, hostCUDA, strings.Join(branches, ","), strings.Join(ir.Brands, ","), who, branchOf(driver))
}
