package refresh

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/kiln-build/kiln/cuda"
)

// DefaultMatrixURL is PyTorch's release matrix, as raw Markdown.
const DefaultMatrixURL = "https://raw.githubusercontent.com/pytorch/pytorch/main/RELEASE.md"

// matrixRow is one row of the Release Compatibility Matrix.
type matrixRow struct {
	Minor              string
	PythonMin          string
	PythonMax          string
	PythonExperimental string // a GIL build only; "3.13t" rows are not kiln's
	Stable             []matrixCUDA
	Experimental       []matrixCUDA
}

type matrixCUDA struct{ CUDA, CuDNN string }

func (r *matrixRow) find(cuda string) (matrixCUDA, bool, bool) {
	for _, c := range r.Stable {
		if c.CUDA == cuda {
			return c, true, true
		}
	}
	for _, c := range r.Experimental {
		if c.CUDA == cuda {
			return c, false, true
		}
	}
	return matrixCUDA{}, false, false
}

var (
	pyMinRe  = regexp.MustCompile(`>=\s*(\d+\.\d+)`)
	pyMaxRe  = regexp.MustCompile(`<=\s*\(?\s*(\d+\.\d+)`)
	pyExpRe  = regexp.MustCompile(`(\d+\.\d+)(t?)\s+experimental`)
	cudaRe   = regexp.MustCompile(`CUDA\s+(\d+\.\d+)|CUDNN\s+(\d+(?:\.\d+)+)`)
	minorRe  = regexp.MustCompile(`^\d+\.\d+$`)
	matrixHd = "| pytorch version |"
)

// parseMatrix reads the Release Compatibility Matrix table of RELEASE.md:
//
//	| PyTorch version | Python | C++ | Stable CUDA | Experimental CUDA | Stable ROCm |
//	| 2.12 | >=3.10, <=(3.14, 3.14t experimental) | C++17 | CUDA 12.6 (CUDNN 9.10.2.21) (NCCL 2.29.3), CUDA 13.0 (CUDNN 9.20.0.48) ... | CUDA 13.2 (CUDNN 9.20.0.48) | ROCm 7.2 |
//
// A cuDNN applies to the CUDA versions before it in its cell that have
// none of their own ("CUDA 11.8, CUDA 12.4 (CUDNN 9.1.0.70)" and "CUDA
// 11.8, CUDA 12.1, CUDNN 9.1.0.70" give every CUDA that cuDNN).
func parseMatrix(src string, body string) (map[string]*matrixRow, error) {
	rows := map[string]*matrixRow{}
	in := false
	cols := map[string]int{}
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if in && len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if strings.HasPrefix(strings.ToLower(line), matrixHd) {
			in = true
			for i, c := range cells {
				cols[strings.ToLower(c)] = i
			}
			continue
		}
		if !in || !minorRe.MatchString(cells[0]) {
			continue
		}
		get := func(name string) string {
			if i, ok := cols[name]; ok && i < len(cells) {
				return cells[i]
			}
			return ""
		}
		r := &matrixRow{Minor: cells[0]}
		py := get("python")
		if m := pyMinRe.FindStringSubmatch(py); m != nil {
			r.PythonMin = m[1]
		}
		if m := pyMaxRe.FindStringSubmatch(py); m != nil {
			r.PythonMax = m[1]
		}
		for _, m := range pyExpRe.FindAllStringSubmatch(py, -1) {
			if m[2] == "" {
				r.PythonExperimental = m[1]
			}
		}
		if r.PythonMin == "" || r.PythonMax == "" {
			return nil, fmt.Errorf("release matrix %s: torch %s: cannot read the Python range %q", src, r.Minor, py)
		}
		r.Stable = parseCUDACell(get("stable cuda"))
		r.Experimental = parseCUDACell(get("experimental cuda"))
		rows[r.Minor] = r
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("release matrix %s: no \"Release Compatibility Matrix\" table (a row per torch minor under %q)", src, "| PyTorch version | Python | ...")
	}
	return rows, nil
}

func parseCUDACell(cell string) []matrixCUDA {
	var out []matrixCUDA
	pending := 0 // out[pending:] have no cuDNN yet
	for _, m := range cudaRe.FindAllStringSubmatch(cell, -1) {
		if m[1] != "" {
			out = append(out, matrixCUDA{CUDA: m[1]})
			continue
		}
		for i := pending; i < len(out); i++ {
			if out[i].CuDNN == "" {
				out[i].CuDNN = m[2]
			}
		}
		pending = len(out)
	}
	return out
}

func (o *Options) fetchMatrix(ctx context.Context) (map[string]*matrixRow, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.MatrixURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain, text/markdown, */*;q=0.1")
	resp, err := o.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("release matrix: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("release matrix %s: %s", redactURL(o.MatrixURL), resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("release matrix %s: %w", redactURL(o.MatrixURL), err)
	}
	return parseMatrix(redactURL(o.MatrixURL), string(b))
}

// cudaOfVariant is the CUDA version a variant name stands for: cu118 →
// 11.8, cu126 → 12.6, cu130 → 13.0 (PyTorch's names are major then minor).
func cudaOfVariant(v string) (string, bool) {
	d, ok := strings.CutPrefix(v, "cu")
	if !ok || len(d) < 3 {
		return "", false
	}
	c := d[:2] + "." + d[2:]
	if _, err := cuda.ParseVersion(c); err != nil {
		return "", false
	}
	return c, true
}

func variantOfCUDA(cuda string) string { return "cu" + strings.ReplaceAll(cuda, ".", "") }
