package cuda

import (
	"encoding/json"
	"io/fs"
	"slices"
	"testing"
)

var confidences = []string{ConfA, ConfB, ConfC, ConfUnverified}

func driverKnows(t *testing.T, mm string) bool {
	t.Helper()
	_, err := MinDriver(mm)
	return err == nil
}

func TestDataEveryRowHasSourceAndConfidence(t *testing.T) {
	files, _ := fs.Glob(dataFS, "data/*.json")
	if len(files) < 2 {
		t.Fatalf("data files: %v", files)
	}
	for _, f := range files {
		b, _ := dataFS.ReadFile(f)
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(f, err)
		}
		m := v.(map[string]any)
		if m["data_version"] != DataVersion() {
			t.Errorf("%s: data_version %v, want %s", f, m["data_version"], DataVersion())
		}
		// Every object in a list of facts carries source and confidence.
		for k, x := range m {
			rows, ok := x.([]any)
			if !ok {
				continue
			}
			for i, r := range rows {
				row, ok := r.(map[string]any)
				if !ok {
					continue
				}
				src, _ := row["source"].(string)
				conf, _ := row["confidence"].(string)
				if src == "" || !slices.Contains(confidences, conf) {
					t.Errorf("%s: %s[%d] lacks source/confidence: %v", f, k, i, row)
				}
			}
		}
	}
}

func TestDataGPUsHaveArchRows(t *testing.T) {
	db := mustDB()
	seen := map[string]string{}
	for _, g := range db.GPUs.GPUs {
		if _, _, row := ArchSupported("12.9", g.ComputeCapability); row == nil && g.ComputeCapability != "11.0" {
			t.Errorf("%s: no toolkit row for %s", g.Name, SM(g.ComputeCapability))
		}
		for _, a := range append([]string{g.Name}, g.Aliases...) {
			k := squash(a)
			if prev, ok := seen[k]; ok && prev != g.Name {
				t.Errorf("alias %q names %s and %s", a, prev, g.Name)
			}
			seen[k] = g.Name
			got, err := GPU(a)
			if err != nil || got.Name != g.Name {
				t.Errorf("GPU(%q) = %v, %v", a, got.Name, err)
			}
		}
	}
	for _, a := range db.GPUs.Arch {
		for _, v := range []string{a.FirstCUDA, a.LastCUDA} {
			if v != "" && MustVersion(v).Major() >= 11 && !driverKnows(t, v) {
				t.Errorf("%s: CUDA %s unknown", a.Arch, v)
			}
		}
	}
}

func TestDataMVCFloors(t *testing.T) {
	for _, major := range []int{11, 12, 13} {
		f := mvcFloor(major)
		if f == nil {
			t.Fatalf("no MVC floor for %d", major)
		}
		if branchOf(f.Floor) != f.BranchFloor {
			t.Errorf("MVC %d: floor %s not in branch %d", major, f.Floor, f.BranchFloor)
		}
	}
}
