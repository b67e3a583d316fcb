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
	"fmt"
	"html"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Wheel describes a stand-in wheel.
type Wheel struct {
	Name    string            // distribution name, e.g. "flash_attn"
	Version string            // e.g. "2.7.0.post2+cu11torch2.5cxx11abiFALSE"
	Tag     string            // e.g. "py3-none-any" or "cp311-cp311-linux_x86_64"
	Files   map[string][]byte // extra files (path in the wheel -> content)
	Padding int               // bytes of incompressible-ish data, to give the wheel weight
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
	files[dist+"/METADATA"] = []byte(fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: kiln test stand-in (%s)\n", strings.ReplaceAll(w.Name, "_", "-"), w.Version, base))
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

// Index is a PEP 503 simple index over built wheels and sdists.
type Index struct {
	files    map[string][]byte   // filename -> bytes
	projects map[string][]string // normalized name -> filenames
}

// NewIndex builds the wheels.
func NewIndex(wheels ...Wheel) (*Index, error) {
	ix := &Index{files: map[string][]byte{}, projects: map[string][]string{}}
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
	n := Normalize(name)
	if _, ok := ix.files[fn]; !ok {
		ix.projects[n] = append(ix.projects[n], fn)
	}
	ix.files[fn] = b
}

// Digest is a hash of the index's files (names and contents), 16 hex digits.
func (ix *Index) Digest() string {
	names := make([]string, 0, len(ix.files))
	for fn := range ix.files {
		names = append(names, fn)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, fn := range names {
		fh := sha256.Sum256(ix.files[fn])
		fmt.Fprintf(h, "%s %x\n", fn, fh)
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
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!DOCTYPE html><html><body>\n")
		for _, fn := range fns {
			h := sha256.Sum256(ix.files[fn])
			fmt.Fprintf(w, "<a href=\"../../files/%s#sha256=%s\">%s</a>\n", html.EscapeString(fn), hex.EncodeToString(h[:]), html.EscapeString(fn))
		}
		fmt.Fprint(w, "</body></html>\n")
	case strings.HasPrefix(p, "/files/"):
		b, ok := ix.files[strings.TrimPrefix(p, "/files/")]
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
