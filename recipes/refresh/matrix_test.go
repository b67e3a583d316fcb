package refresh

import (
	"os"
	"strings"
	"testing"
)

func TestParseMatrix(t *testing.T) {
	b, err := os.ReadFile("refreshtest/RELEASE.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := parseMatrix("RELEASE.md", string(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 13 {
		t.Errorf("%d rows, want 13 (2.0-2.12; the cadence table is not the matrix)", len(rows))
	}
	cases := []struct {
		minor, py, pyExp string
		stable, exp      string // CUDA=cuDNN,...
	}{
		{"2.12", "3.10-3.14", "", "12.6=9.10.2.21,13.0=9.20.0.48", "13.2=9.20.0.48"},
		{"2.11", "3.10-3.14", "", "12.6=9.10.2.21,12.8=9.17.1.4,13.0=9.17.1.4", ""},
		{"2.8", "3.9-3.13", "", "12.6=9.10.2.21,12.8=9.10.2.21", "12.9=9.10.2.21"},
		{"2.6", "3.9-3.13", "", "11.8=9.1.0.70,12.4=9.1.0.70", "12.6=9.5.1.17"}, // a later cuDNN applies to 11.8
		{"2.5", "3.9-3.12", "3.13", "11.8=9.1.0.70,12.1=9.1.0.70,12.4=9.1.0.70", ""},
		{"2.2", "3.8-3.11", "3.12", "11.8=8.7.0.84", "12.1=8.9.2.26"},
	}
	for _, tc := range cases {
		r := rows[tc.minor]
		if r == nil {
			t.Fatalf("no row %s", tc.minor)
		}
		enc := func(cs []matrixCUDA) string {
			var out []string
			for _, c := range cs {
				out = append(out, c.CUDA+"="+c.CuDNN)
			}
			return strings.Join(out, ",")
		}
		if got := r.PythonMin + "-" + r.PythonMax; got != tc.py || r.PythonExperimental != tc.pyExp || enc(r.Stable) != tc.stable || enc(r.Experimental) != tc.exp {
			t.Errorf("%s: python %s exp %q stable %s exp %s", tc.minor, got, r.PythonExperimental, enc(r.Stable), enc(r.Experimental))
		}
	}
	if _, err := parseMatrix("x.md", "# no table\n| a | b |\n"); err == nil || !strings.Contains(err.Error(), "x.md") {
		t.Errorf("no table: %v", err)
	}
	if _, err := parseMatrix("x.md", "| PyTorch version | Python |\n| --- | --- |\n| 2.9 | any |\n"); err == nil || !strings.Contains(err.Error(), `torch 2.9: cannot read the Python range "any"`) {
		t.Errorf("bad python: %v", err)
	}
}

func TestVariantNames(t *testing.T) {
	for v, cuda := range map[string]string{"cu118": "11.8", "cu121": "12.1", "cu126": "12.6", "cu130": "13.0", "cu132": "13.2"} {
		if got, ok := cudaOfVariant(v); !ok || got != cuda || variantOfCUDA(cuda) != v {
			t.Errorf("%s: %s %v", v, got, ok)
		}
	}
	for _, bad := range []string{"cpu", "rocm6.4", "cu1", "cuda12"} {
		if _, ok := cudaOfVariant(bad); ok {
			t.Errorf("%s accepted", bad)
		}
	}
	if naturalCompare("torch 2.9 patches", "torch 2.10 patches") >= 0 || naturalCompare("nvidia/cuda:12.10.0", "nvidia/cuda:12.9.1") <= 0 {
		t.Error("natural order")
	}
}
