package cuda

import (
	"strings"
	"testing"
)

func TestParseRequireCUDA(t *testing.T) {
	req, err := ParseRequireCUDA("cuda>=12.8 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=550,driver<551")
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Terms) != 3 || len(req.Terms[1]) != 3 || req.CUDAMin() != "12.8" {
		t.Fatalf("%+v", req)
	}
	cases := []struct {
		h    Host
		want bool
	}{
		{Host{DriverVersion: "570.124.06"}, true},                   // cuda 12.8 natively
		{Host{DriverVersion: "550.54.15", Brand: "tesla"}, true},    // brand clause
		{Host{DriverVersion: "550.54.15", Brand: "geforce"}, false}, // no brand clause
		{Host{DriverVersion: "535.104.05", Brand: "tesla"}, false},  // branch not listed
		{Host{CUDAVersion: "12.9", DriverVersion: "575.51.03"}, true},
		{Host{}, false},
		// No GPU visible: brand and arch rules hold, as in
		// libnvidia-container's check_device_brand.
		{Host{DriverVersion: "550.54.15", NoDevice: true}, true},
		{Host{DriverVersion: "535.104.05", NoDevice: true}, false},
	}
	for _, c := range cases {
		ok, first := req.Satisfied(c.h)
		if ok != c.want {
			t.Errorf("%+v: %v, want %v", c.h, ok, c.want)
		}
		if !ok && first == nil {
			t.Errorf("%+v: no failing rule", c.h)
		}
	}
	d, err := req.MinDriver()
	if err != nil || d.Toolkit != "570.26" || d.MinorVersionCompat != "525.60.13" {
		t.Errorf("MinDriver = %+v, %v", d, err)
	}
	if got := req.Branches("tesla"); strings.Join(got, ",") != "470,550" {
		t.Errorf("Branches = %v", got)
	}
	if ok, _ := (Requirement{}).Satisfied(Host{}); !ok {
		t.Error("empty requirement must be satisfied")
	}
	for _, bad := range []string{"cuda>>12", "cuda", "foo>=1", "brand>=tesla", "cuda>=x.y", "cuda>=12,", "=12"} {
		if _, err := ParseRequireCUDA(bad); err == nil {
			t.Errorf("ParseRequireCUDA(%q) accepted", bad)
		}
	}
	if !DataCenterBrand("tesla") || !DataCenterBrand("nvidia") || DataCenterBrand("geforcertx") || DataCenterBrand("TITAN") {
		t.Error("DataCenterBrand: tesla/nvidia forward-compat, GeForce/TITAN not")
	}
	for _, op := range []string{"cuda=12.4", "cuda!=12.3", "cuda<12.5", "cuda<=12.4", "cuda>12.3", "arch>=8.0"} {
		req, err := ParseRequireCUDA(op)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := req.Satisfied(Host{DriverVersion: "550.54.15", Arch: "9.0"}); !ok {
			t.Errorf("%s not satisfied by driver 550 (CUDA 12.4), arch 9.0", op)
		}
	}
}

func TestMinDriver(t *testing.T) {
	cases := []struct{ cuda, toolkit, mvc string }{
		{"12.4", "550.54.14", "525.60.13"},
		{"12.4.1", "550.54.15", "525.60.13"},
		{"11.8", "520.61.05", "450.80.02"},
		{"13.0.2", "580.95.05", "580.65.06"},
		{"12.3.2", "545.23.08", "525.60.13"}, // inferred from 12.3 Update 1
		{"11.0.2", "450.51.05", "450.51.05"},
	}
	for _, c := range cases {
		d, err := MinDriver(c.cuda)
		if err != nil || d.Toolkit != c.toolkit || d.MinorVersionCompat != c.mvc || d.Source == "" {
			t.Errorf("MinDriver(%s) = %+v, %v", c.cuda, d, err)
		}
	}
	for _, bad := range []string{"12.7", "10.2", "x", "13.4"} {
		if _, err := MinDriver(bad); err == nil {
			t.Errorf("MinDriver(%s) accepted", bad)
		}
	}
}

func TestDriverCUDA(t *testing.T) {
	for drv, want := range map[string]string{"550.54": "12.4", "550.127.05": "12.4", "535.104.05": "12.2", "570.26": "12.8", "580.65.06": "13.0", "470.82.01": "11.4", "525.60.13": "12.0", "565.57.01": "12.6"} {
		if got, err := DriverCUDA(drv); err != nil || got != want {
			t.Errorf("DriverCUDA(%s) = %s, %v; want %s", drv, got, err, want)
		}
	}
	if _, err := DriverCUDA("440.33"); err == nil {
		t.Error("440 accepted")
	}
}

func TestCheckDriver(t *testing.T) {
	cases := []struct {
		cuda, driver, gpu string
		ok                bool
		mode, reason      string
	}{
		{"12.8", "550.54", "rtx4090", false, ModeNone, "NVIDIA_REQUIRE_CUDA"},
		{"12.8", "550.54", "h100", true, ModeForwardCompat, "cuda-compat"},
		{"12.8", "570.124.06", "rtx4090", true, ModeNative, "natively"},
		{"12.4", "535.104.05", "rtx4090", true, ModeMinorVersion, "minor-version"},
		{"12.4", "550.54.15", "", true, ModeNative, "natively"},
		{"13.0", "550.54.15", "l4", true, ModeForwardCompat, "forward-compat"},
		{"13.0", "550.54.15", "rtx4090", false, ModeNone, "brand geforcertx"},
		{"13.0", "560.35.03", "h100", false, ModeNone, "NVIDIA_REQUIRE_CUDA"},
		{"12.4", "470.82.01", "a100", true, ModeForwardCompat, "branch 470"},
		{"12.2", "470.82.01", "rtx3090", false, ModeNone, "works only on data-center GPUs"},
		{"12.6", "520.61.05", "", false, ModeNone, "NVIDIA_REQUIRE_CUDA"},
		{"12.6", "520.61.05", "h100", false, ModeNone, "branches 470,535,550"},
		{"11.8", "450.80.02", "", false, ModeNone, "NVIDIA_REQUIRE_CUDA"},
		{"11.7", "450.80.02", "", true, ModeMinorVersion, "minor-version"},
		{"12.8", "550.54", "", true, ModeForwardCompat, "only on data-center GPUs"},
		{"13.2", "590.44.01", "", true, ModeMinorVersion, "PTX JIT"},
		{"12.4", "520.61.05", "a100", false, ModeNone, "NVIDIA_REQUIRE_CUDA"},
		{"12.7", "550.54", "", false, ModeNone, "no CUDA 12.7"},
	}
	for _, c := range cases {
		v := CheckDriver(c.cuda, c.driver, c.gpu)
		if v.Compatible != c.ok || v.Mode != c.mode || !strings.Contains(v.Reason, c.reason) {
			t.Errorf("CheckDriver(%s, %s, %s) = %v %s %q; want %v %s ~%q", c.cuda, c.driver, c.gpu, v.Compatible, v.Mode, v.Reason, c.ok, c.mode, c.reason)
		}
	}
}

func TestGPUAndArch(t *testing.T) {
	for in, cc := range map[string]string{"h100": "9.0", "H100": "9.0", "NVIDIA H100": "9.0", "sm_90": "9.0", "sm90": "9.0", "9.0": "9.0", "sm_120": "12.0", "RTX 4090": "8.9", "GeForce RTX 4090": "8.9", "a10g": "8.6", "t4": "7.5", "sm_100a": "10.0"} {
		g, err := GPU(in)
		if err != nil || g.ComputeCapability != cc {
			t.Errorf("GPU(%q) = %+v, %v", in, g, err)
		}
	}
	for _, bad := range []string{"", "k80", "sm_99", "potato"} {
		if _, err := GPU(bad); err == nil {
			t.Errorf("GPU(%q) accepted", bad)
		}
	}
	cases := []struct {
		cuda, cc string
		ok       bool
		why      string
	}{
		{"13.0", "7.5", true, "sm_75"},
		{"13.0", "7.0", false, "CUDA 13.0 dropped sm_70"},
		{"11.7", "9.0", false, "sm_90 needs CUDA ≥ 11.8"},
		{"11.8", "9.0", true, ""},
		{"12.8", "10.0", true, ""},
		{"12.9", "10.3", true, ""},
		{"12.8", "10.3", false, "needs CUDA ≥ 12.9"},
		{"13.0", "10.1", false, "renumbered sm_110"},
		{"13.0", "11.0", true, ""},
	}
	for _, c := range cases {
		ok, why, _ := ArchSupported(c.cuda, c.cc)
		if ok != c.ok || !strings.Contains(why, c.why) {
			t.Errorf("ArchSupported(%s, %s) = %v %q", c.cuda, c.cc, ok, why)
		}
	}
}

func TestCCCovered(t *testing.T) {
	cases := []struct {
		list, cc string
		ok, ptx  bool
	}{
		{"8.0;9.0", "8.9", true, false},
		{"8.0;9.0", "9.0", true, false},
		{"8.0;9.0", "10.0", false, false},
		{"8.0;9.0+PTX", "10.0", true, true},
		{"80;90;100;120", "12.1", true, false},
		{"7.5;8.0", "7.0", false, false},
	}
	for _, c := range cases {
		ok, ptx := Covers(c.list, c.cc)
		if ok != c.ok || ptx != c.ptx {
			t.Errorf("Covers(%s, %s) = %v %v", c.list, c.cc, ok, ptx)
		}
	}
}
