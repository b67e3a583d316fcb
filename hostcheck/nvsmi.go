package hostcheck

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The formats read here are nvidia-smi's and the kernel module's; samples
// live in testdata/hostcheck/samples.

var (
	smiDriverRe = regexp.MustCompile(`Driver Version:\s*([0-9][0-9.]*)`)
	smiCUDARe   = regexp.MustCompile(`CUDA Version:\s*([0-9][0-9.]*)`)
	// NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ...
	// NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build ...
	nvrmRe = regexp.MustCompile(`NVRM version:.*?Kernel Module(?: for \S+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?)`)
)

// parseSMIHeader reads the driver and CUDA versions from plain nvidia-smi
// output ("| NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  CUDA Version: 12.4 |").
func parseSMIHeader(out string) (driver, cuda string, err error) {
	m := smiDriverRe.FindStringSubmatch(out)
	if m == nil {
		return "", "", fmt.Errorf("nvidia-smi: no \"Driver Version:\" in its output")
	}
	driver = m[1]
	if c := smiCUDARe.FindStringSubmatch(out); c != nil {
		cuda = c[1]
	}
	return driver, cuda, nil
}

// smiQuery is the --query-gpu field list kiln asks for; compute_cap needs
// driver 510 or newer, so older drivers are asked again without it.
const (
	smiQuery       = "index,name,uuid,driver_version,compute_cap,memory.total"
	smiQueryNoCC   = "index,name,uuid,driver_version,memory.total"
	smiQueryFormat = "csv,noheader"
)

// parseSMIQuery reads `nvidia-smi --query-gpu=FIELDS --format=csv,noheader`
// output, one GPU per line, fields separated by ", ".
func parseSMIQuery(out string, withCC bool) ([]GPU, string, error) {
	var gpus []GPU
	driver := ""
	want := 6
	if !withCC {
		want = 5
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		f := strings.Split(l, ",")
		if len(f) != want {
			return nil, "", fmt.Errorf("nvidia-smi --query-gpu line %d: %d fields, want %d: %q", line, len(f), want, l)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, "", fmt.Errorf("nvidia-smi --query-gpu line %d: index %q", line, f[0])
		}
		g := GPU{Index: idx, Name: f[1], UUID: f[2]}
		mem := f[4]
		if withCC {
			g.ComputeCapability, mem = f[4], f[5]
			if g.ComputeCapability == "[N/A]" {
				g.ComputeCapability = ""
			}
		}
		// "81559 MiB"
		if n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(mem), " MiB"), 10, 64); err == nil {
			g.MemoryMiB = n
		}
		if driver == "" {
			driver = f[3]
		}
		gpus = append(gpus, g)
	}
	return gpus, driver, sc.Err()
}

// parseNVRM reads /proc/driver/nvidia/version.
func parseNVRM(s string) (version string, open bool, err error) {
	m := nvrmRe.FindStringSubmatch(s)
	if m == nil {
		return "", false, fmt.Errorf("no \"NVRM version: ... Kernel Module VERSION\" line")
	}
	return m[1], strings.Contains(s, "Open Kernel Module"), nil
}

// parseGPUInformation reads /proc/driver/nvidia/gpus/BUS/information
// ("Model: \t\t NVIDIA H100 80GB HBM3", "GPU UUID: \t GPU-...", "Device Minor: \t 0").
func parseGPUInformation(s string) GPU {
	var g GPU
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Model":
			g.Name = v
		case "GPU UUID":
			g.UUID = v
		case "Device Minor":
			g.Index, _ = strconv.Atoi(v)
		}
	}
	return g
}
