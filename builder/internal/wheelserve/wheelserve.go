// Package wheelserve generates small stand-in wheels (torch, flash_attn,
// bitsandbytes, ...) and a flash_attn sdist that compiles a real CUDA kernel
// with nvcc, and serves them as a PEP 503 simple index, for kiln's
// builder tests and benchmarks: the build fetches them with pip exactly as it
// would fetch the real ones.
package wheelserve

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

const jsonType = "application/vnd.pypi.simple.v1+json"

// Wheel describes a stand-in wheel.
type Wheel struct {
	Name    string            // distribution name, e.g. "flash_attn"
	Version string            // e.g. "2.7.0.post2+cu11torch2.5cxx11abiFALSE"
	Tag     string            // e.g. "py3-none-any" or "cp311-cp311-linux_x86_64"
	Files   map[string][]byte // extra files (path in the wheel -> content)
	Padding int               // bytes of incompressible-ish data, to give the wheel weight
	// Package is the import package's directory, where __init__.py (and
	// the padding) go: "" is Name with "-" as "_"; "nvidia/cublas" for
	// a namespace package's part.
	Package string
	// Meta are METADATA header lines besides Name, Version and Summary
	// ("Requires-Python: >=3.9", "Provides-Extra: cudart").
	Meta []string
	// Requires are the Requires-Dist lines' values, in order
	// ("triton==3.2.0; platform_system == \"Linux\"").
	Requires []string
}

// Filename is the wheel's file name.
func (w Wheel) Filename() string {
	return fmt.Sprintf("%s-%s-%s.whl", w.Name, w.Version, w.Tag)
}

// Build returns the wheel's bytes; the same Wheel gives the same bytes.
func (w Wheel) Build() ([]byte, error) {
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	pkg := strings.ReplaceAll(w.Name, "-", "_")
	base := strings.SplitN(w.Version, "+", 2)[0]
	dist := fmt.Sprintf("%s-%s.dist-info", pkg, w.Version)
	if w.Package != "" {
		pkg = w.Package
	}
	files := map[string][]byte{
		pkg + "/__init__.py": []byte(fmt.Sprintf("__version__ = %q\n", w.Version)),
	}
	if w.Padding > 0 {
		pad := make([]byte, w.Padding)
		x := uint32(2463534242)
		for i := range pad {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			pad[i] = byte(x)
		}
		files[pkg+"/_weights.bin"] = pad
	}
	for k, v := range w.Files {
		files[k] = v
	}
	purelib := "true"
	if !strings.HasSuffix(w.Tag, "-any") {
		purelib = "false"
	}
	meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: kiln test stand-in (%s)\n", strings.ReplaceAll(w.Name, "_", "-"), w.Version, base)
	for _, m := range w.Meta {
		meta += m + "\n"
	}
	for _, r := range w.Requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files[dist+"/METADATA"] = []byte(meta)
	files[dist+"/WHEEL"] = []byte(fmt.Sprintf("Wheel-Version: 1.0\nGenerator: kiln-wheelserve\nRoot-Is-Purelib: %s\nTag: %s\n", purelib, w.Tag))
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	sort.Strings(names)
	var record strings.Builder
	mod := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range names {
		h := sha256.Sum256(files[n])
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", n, base64.RawURLEncoding.EncodeToString(h[:]), len(files[n]))
		fw, err := z.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Deflate, Modified: mod})
		if err != nil {
			return nil, err
		}
		fw.Write(files[n])
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", dist)
	fw, err := z.CreateHeader(&zip.FileHeader{Name: dist + "/RECORD", Method: zip.Deflate, Modified: mod})
	if err != nil {
		return nil, err
	}
	fw.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var normRe = regexp.MustCompile(`[-_.]+`)

// Normalize is PEP 503's project name normalisation.
func Normalize(name string) string { return strings.ToLower(normRe.ReplaceAllString(name, "-")) }

// Index is a PEP 503 / PEP 691 simple index over built wheels and sdists
// (held in memory: they are small) and wheel files on disk (AddDir: real
// wheels of gigabytes, streamed from their files, never read into memory).
type Index struct {
	files    map[string][]byte   // filename -> bytes
	onDisk   map[string]diskFile // filename -> file on disk
	projects map[string][]string // normalized name -> filenames
	sums     map[string]string   // filename -> sha256 hex
}

type diskFile struct {
	path string
	size int64
}

// NewIndex builds the wheels.
func NewIndex(wheels ...Wheel) (*Index, error) {
	ix := &Index{files: map[string][]byte{}, onDisk: map[string]diskFile{}, projects: map[string][]string{}, sums: map[string]string{}}
	for _, w := range wheels {
		b, err := w.Build()
		if err != nil {
			return nil, err
		}
		ix.add(w.Name, w.Filename(), b)
	}
	return ix, nil
}

// AddSDist builds s and adds it to the index beside the project's wheels.
func (ix *Index) AddSDist(s SDist) error {
	b, err := s.Build()
	if err != nil {
		return err
	}
	ix.add(s.Name, s.Filename(), b)
	return nil
}

func (ix *Index) add(name, fn string, b []byte) {
	ix.project(name, fn)
	delete(ix.onDisk, fn)
	ix.files[fn] = b
	h := sha256.Sum256(b)
	ix.sums[fn] = hex.EncodeToString(h[:])
}

func (ix *Index) project(name, fn string) {
	n := Normalize(name)
	if !slices.Contains(ix.projects[n], fn) {
		ix.projects[n] = append(ix.projects[n], fn)
	}
}

// AddDir adds every wheel listed in DIR/SHA256SUMS ("HEX  FILENAME" lines,
// as sha256sum writes them) to the index, served from its file. A wheel of
// the same name replaces an in-memory stand-in. The sums are trusted as
// written by the tool that made the wheels (sizes are checked here; pip
// checks every byte against the sum in the page it is served).
func (ix *Index) AddDir(dir string) error {
	path := filepath.Join(dir, "SHA256SUMS")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("wheel dir: %w", err)
	}
	sums, err := ParseSums(path, b)
	if err != nil {
		return err
	}
	for i, s := range sums {
		fi, err := os.Stat(filepath.Join(dir, s.Name))
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		name, _, _ := strings.Cut(s.Name, "-")
		ix.project(name, s.Name)
		delete(ix.files, s.Name)
		ix.onDisk[s.Name] = diskFile{path: filepath.Join(dir, s.Name), size: fi.Size()}
		ix.sums[s.Name] = s.SHA256
	}
	return nil
}

// Sum is one line of a SHA256SUMS file.
type Sum struct{ SHA256, Name string }

// ParseSums parses b, the SHA256SUMS file at path, of wheels, sdists or
// archives ("SHA256  FILENAME" lines, as sha256sum and
// python-build-standalone write them), in the file's order; a line of
// another shape, or a name with a path in it or not ending in .whl or
// .tar.gz, is an error naming the file and line.
func ParseSums(path string, b []byte) ([]Sum, error) {
	var out []Sum
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sum, fn, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 || strings.ContainsAny(fn, "/\\") || !(strings.HasSuffix(fn, ".whl") || strings.HasSuffix(fn, ".tar.gz")) {
			return nil, fmt.Errorf("%s:%d: want \"SHA256  FILENAME.whl\", got %q", path, i+1, line)
		}
		out = append(out, Sum{SHA256: sum, Name: fn})
	}
	return out, nil
}

// Remove drops a project (e.g. a stand-in that a real wheel directory
// replaces under another version).
func (ix *Index) Remove(name string) {
	n := Normalize(name)
	for _, fn := range ix.projects[n] {
		delete(ix.files, fn)
		delete(ix.onDisk, fn)
		delete(ix.sums, fn)
	}
	delete(ix.projects, n)
}

// Digest is a hash of the index's files (names and contents), 16 hex digits.
func (ix *Index) Digest() string {
	names := make([]string, 0, len(ix.sums))
	for fn := range ix.sums {
		names = append(names, fn)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, fn := range names {
		fmt.Fprintf(h, "%s %s\n", fn, ix.sums[fn])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ServeHTTP serves /simple/, /simple/NAME/ and /files/FILE, also under
// /DIGEST/ (see Serve). Links are relative, so they stay under the prefix.
func (ix *Index) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if d := "/" + ix.Digest(); strings.HasPrefix(p, d+"/") {
		p = strings.TrimPrefix(p, d)
	}
	switch {
	case p == "/simple/" || p == "/simple":
		names := make([]string, 0, len(ix.projects))
		for n := range ix.projects {
			names = append(names, n)
		}
		sort.Strings(names)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!DOCTYPE html><html><body>\n")
		for _, n := range names {
			fmt.Fprintf(w, "<a href=\"%s/\">%s</a>\n", n, n)
		}
		fmt.Fprint(w, "</body></html>\n")
	case strings.HasPrefix(p, "/simple/"):
		if !strings.HasSuffix(p, "/") {
			http.Redirect(w, r, r.URL.Path+"/", http.StatusMovedPermanently)
			return
		}
		n := Normalize(strings.Trim(strings.TrimPrefix(p, "/simple/"), "/"))
		fns, ok := ix.projects[n]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fns = slices.Sorted(slices.Values(fns))
		if strings.Contains(r.Header.Get("Accept"), jsonType) {
			// PEP 691, as PyPI answers pip and kiln's resolver.
			type file struct {
				Filename string            `json:"filename"`
				URL      string            `json:"url"`
				Hashes   map[string]string `json:"hashes"`
			}
			page := struct {
				Meta  map[string]string `json:"meta"`
				Name  string            `json:"name"`
				Files []file            `json:"files"`
			}{Meta: map[string]string{"api-version": "1.0"}, Name: n}
			for _, fn := range fns {
				page.Files = append(page.Files, file{Filename: fn, URL: "../../files/" + fn, Hashes: map[string]string{"sha256": ix.sums[fn]}})
			}
			w.Header().Set("Content-Type", jsonType)
			json.NewEncoder(w).Encode(page)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!DOCTYPE html><html><body>\n")
		for _, fn := range fns {
			fmt.Fprintf(w, "<a href=\"../../files/%s#sha256=%s\">%s</a>\n", html.EscapeString(fn), ix.sums[fn], html.EscapeString(fn))
		}
		fmt.Fprint(w, "</body></html>\n")
	case strings.HasPrefix(p, "/files/"):
		fn := strings.TrimPrefix(p, "/files/")
		if d, ok := ix.onDisk[fn]; ok {
			f, err := os.Open(d.path)
			if err != nil {
				http.Error(w, "wheel file gone", http.StatusInternalServerError)
				return
			}
			defer f.Close()
			w.Header().Set("Content-Type", "application/octet-stream")
			// ServeContent streams, and answers Range requests (pip
			// resumes; kiln's fetcher asks for ranges).
			http.ServeContent(w, r, fn, time.Time{}, io.NewSectionReader(f, 0, d.size))
			return
		}
		b, ok := ix.files[fn]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
	default:
		http.NotFound(w, r)
	}
}

// Serve listens on addr (e.g. 127.0.0.1:0) and returns the index URL
// (http://HOST:PORT/DIGEST/simple) and a stop function. The URL names the
// index's contents: a build's plan, and so BuildKit's cache keys, change
// when a stand-in does, and stay put while none does.
func Serve(ix *Index, addr string) (string, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: ix, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	return "http://" + l.Addr().String() + "/" + ix.Digest() + "/simple", func() { srv.Close() }, nil
}

// FlashAttnVersion is the stand-ins' FlashAttention version (wheel and sdist).
const FlashAttnVersion = "2.7.0.post2"

// FlashAttnVersionCU12 is the FlashAttention the CUDA 12.4 / torch 2.6
// default recipe builds from source (2.7.4.post1 supports torch 2.2-2.6).
const FlashAttnVersionCU12 = "2.7.4.post1"

// StandIns are wheels for the default test recipe (debian-cuda11.8):
// torch 2.5.1+cu118, flash_attn 2.7.0.post2 (the wheel name the resolver
// picks) and bitsandbytes 0.45.5. torchMB pads torch to give it weight.
func StandIns(torchMB int, extra ...Wheel) []Wheel {
	ws := []Wheel{
		{Name: "torch", Version: "2.5.1+cu118", Tag: "py3-none-any", Padding: torchMB << 20,
			Files: map[string][]byte{"torch/cuda.py": []byte("def is_available():\n    return False\n")}},
		{Name: "flash_attn", Version: FlashAttnVersion + "+cu11torch2.5cxx11abiFALSE", Tag: "cp311-cp311-linux_x86_64"},
		{Name: "bitsandbytes", Version: "0.45.5", Tag: "py3-none-any"},
	}
	return append(ws, extra...)
}
