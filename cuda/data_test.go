package cuda

import (
	"io/fs"
	"testing"
)

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
		if err := CheckDataFile(f, b, DataVersion()); err != nil {
			t.Error(err)
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

func TestCheckDataFileRefuses(t *testing.T) {
	good := `{"data_version": "1", "rows": [{"source": "s", "confidence": "A"}]}`
	if err := CheckDataFile("good.json", []byte(good), "1"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"data_version": "2", "rows": []}`,
		`{"data_version": "1", "rows": [{"source": "s", "confidence": "maybe"}]}`,
		`{"data_version": "1", "rows": [{"confidence": "A"}]}`,
		`[]`,
	} {
		if err := CheckDataFile("bad.json", []byte(bad), "1"); err == nil {
			t.Errorf("CheckDataFile accepted %s", bad)
		}
	}
}
