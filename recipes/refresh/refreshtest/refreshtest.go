// Package refreshtest has stand-ins for the live sources kiln compat
// refresh reads, shaped like them, for tests that cannot reach them:
// download.pytorch.org's per-variant PEP 503 pages (and a PEP 691 JSON
// one), a Docker Hub-style registry (401 with a Bearer challenge, a token
// from the realm, tag lists paginated by Link headers) built on
// go-containerregistry's in-process registry, and pytorch/pytorch's
// RELEASE.md. Built from kiln's data, they agree with it; tests change
// them to see what a refresh reports.
package refreshtest

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	_ "embed"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/recipes"
)

// wheelIndex serves /whl/<variant>/<project>/ like download.pytorch.org.
type WheelIndex struct {
	mu    sync.Mutex
	files map[string]map[string][]string // variant → project → file names
	json  map[string]bool                // variants answered as PEP 691 JSON
	// Fail answers a path 503 (Retry-After: 0) this many more times.
	Fail map[string]int
	gets int
}

// Gets is the number of requests served.
func (x *WheelIndex) Gets() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.gets
}

func (x *WheelIndex) Add(variant, project string, names ...string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.files[variant] == nil {
		x.files[variant] = map[string][]string{}
	}
	x.files[variant][project] = append(x.files[variant][project], names...)
}

func (x *WheelIndex) Remove(variant, project, prefix string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.files[variant][project] = slices.DeleteFunc(x.files[variant][project], func(n string) bool { return strings.HasPrefix(n, prefix) })
}

// Drop makes variant's project page answer 404.
func (x *WheelIndex) Drop(variant, project string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.files[variant], project)
}

func (x *WheelIndex) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.gets++
	if x.Fail[r.URL.Path] > 0 {
		x.Fail[r.URL.Path]--
		w.Header().Set("Retry-After", "0")
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	p := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(p) != 3 || p[0] != "whl" {
		http.NotFound(w, r)
		return
	}
	names, ok := x.files[p[1]][p[2]]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if x.json[p[1]] && strings.Contains(r.Header.Get("Accept"), "application/vnd.pypi.simple.v1+json") {
		type file struct {
			Filename string            `json:"filename"`
			URL      string            `json:"url"`
			Hashes   map[string]string `json:"hashes"`
		}
		page := struct {
			Meta  map[string]string `json:"meta"`
			Name  string            `json:"name"`
			Files []file            `json:"files"`
		}{Meta: map[string]string{"api-version": "1.1"}, Name: p[2]}
		for _, n := range names {
			page.Files = append(page.Files, file{Filename: n, URL: "/whl/" + p[1] + "/" + url.PathEscape(n), Hashes: map[string]string{"sha256": fmt.Sprintf("%064x", len(n))}})
		}
		w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
		json.NewEncoder(w).Encode(page)
		return
	}
	w.Header().Set("Content-Type", "text/html")
	fmt.Fprintf(w, "<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Links for %s</h1>\n", p[2])
	for _, n := range names {
		fmt.Fprintf(w, "    <a href=\"/whl/%s/%s#sha256=%064x\">%s</a><br/>\n", p[1], strings.ReplaceAll(n, "+", "%2B"), len(n), html.EscapeString(n))
	}
	fmt.Fprint(w, "  </body>\n</html>\n")
}

func pyList(lo, hi string) []int {
	a, _ := strconv.Atoi(strings.TrimPrefix(lo, "3."))
	b, _ := strconv.Atoi(strings.TrimPrefix(hi, "3."))
	var out []int
	for m := a; m <= b; m++ {
		out = append(out, m)
	}
	return out
}

func Wheel(project, version, variant string, py int, plat string) string {
	return fmt.Sprintf("%s-%s+%s-cp3%d-cp3%d-%s.whl", project, version, variant, py, py, plat)
}

// newWheelIndex lists, for every torch release and variant of td, the
// wheels its facts say exist: torch for its Python range (and experimental
// Python), torchvision for its own range, torchaudio unless unsettled; plus
// what a real index also has and a refresh must ignore (Windows wheels,
// free-threaded builds, pre-releases, releases older than kiln's data).
func NewWheelIndex(td recipes.TorchData) *WheelIndex {
	x := &WheelIndex{files: map[string]map[string][]string{}, json: map[string]bool{"cu126": true}, Fail: map[string]int{}}
	for _, rel := range td.Releases {
		for _, v := range rel.Variants {
			if v.Unofficial {
				continue
			}
			plat := "manylinux_2_28_x86_64"
			if !v.CXX11ABI {
				plat = "manylinux1_x86_64"
			}
			tpy := pyList(rel.PythonMin, rel.PythonMax)
			if rel.PythonExperimental != "" {
				tpy = append(tpy, pyList(rel.PythonExperimental, rel.PythonExperimental)...)
			}
			lo, hi, _ := strings.Cut(rel.TorchvisionPython, "-")
			for _, p := range rel.Patches {
				pt := strings.SplitN(p, ".", 3)[2]
				for _, py := range tpy {
					x.Add(v.Name, "torch", Wheel("torch", p, v.Name, py, plat), Wheel("torch", p, v.Name, py, "win_amd64"))
					if !rel.TorchaudioUnsettled {
						x.Add(v.Name, "torchaudio", Wheel("torchaudio", p, v.Name, py, plat))
					}
				}
				x.Add(v.Name, "torch", fmt.Sprintf("torch-%s+%s-cp313-cp313t-%s.whl", p, v.Name, plat))
				for _, py := range pyList(lo, hi) {
					x.Add(v.Name, "torchvision", Wheel("torchvision", rel.TorchvisionMinor+"."+pt, v.Name, py, plat))
				}
			}
			if _, ok := x.files[v.Name]["torchaudio"]; !ok {
				x.Add(v.Name, "torchaudio") // the project page exists, empty
			}
		}
	}
	x.Add("cu118", "torch", Wheel("torch", "2.0.1", "cu118", 10, "manylinux1_x86_64"))
	x.Add("cu126", "torch", Wheel("torch", "2.13.0rc1", "cu126", 12, "manylinux_2_28_x86_64"))
	return x
}

// dockerHub serves a go-containerregistry registry the way Docker Hub
// does: 401 with a Bearer challenge naming a token realm, the token from
// that realm, and tag lists in pages of at most pageSize with a Link
// header to the next page.
type DockerHub struct {
	inner    http.Handler
	Token    string
	pageSize int
	mu       sync.Mutex
	// Tokens and Pages count token grants and tag list pages served.
	Tokens, Pages int
	// FailPage answers that tag list page (1-based) 503 once.
	FailPage int
	// SawBadAuth: a request came with a credential other than the token.
	SawBadAuth bool
	// LoopNext makes every tag list page's Link: next point at itself.
	LoopNext bool
}

func (h *DockerHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/token" {
		q := r.URL.Query()
		if q.Get("service") != "registry.docker.io" || q.Get("scope") != "repository:nvidia/cuda:pull" {
			http.Error(w, "bad token request "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.Tokens++
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"token":%q,"access_token":%q,"expires_in":300,"issued_at":"2027-01-02T03:04:05Z"}`, h.Token, h.Token)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+h.Token {
		if r.Header.Get("Authorization") != "" {
			h.SawBadAuth = true
		}
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="registry.docker.io",scope="repository:nvidia/cuda:pull"`, r.Host))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":null}]}`)
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/tags/list") {
		h.inner.ServeHTTP(w, r)
		return
	}
	h.mu.Lock()
	h.Pages++
	page := h.Pages
	fail := page == h.FailPage
	h.mu.Unlock()
	if fail {
		http.Error(w, `{"errors":[{"code":"UNAVAILABLE"}]}`, http.StatusServiceUnavailable)
		return
	}
	q := r.URL.Query()
	n := h.pageSize
	if v, err := strconv.Atoi(q.Get("n")); err == nil && v < n {
		n = v
	}
	q.Set("n", strconv.Itoa(n))
	r2 := r.Clone(r.Context())
	r2.URL.RawQuery = q.Encode()
	rec := httptest.NewRecorder()
	h.inner.ServeHTTP(rec, r2)
	var body struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusOK {
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
		return
	}
	if h.LoopNext {
		w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next"`, r.URL.RequestURI()))
	} else if len(body.Tags) == n {
		w.Header().Set("Link", fmt.Sprintf(`</v2/%s/tags/list?last=%s&n=%d>; rel="next"`, body.Name, url.QueryEscape(body.Tags[n-1]), n))
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(body)
}

// standinTags are the nvidia/cuda tags of im's versions: base, runtime and
// devel for ubuntu22.04 (and 24.04 from 12.5.1), the cuDNN variants, and
// tags a refresh must ignore.
func Tags(im recipes.ImageData) []string {
	var out []string
	for _, t := range im.Tags {
		oses := []string{"ubuntu22.04"}
		if newerOrSame(t.CUDA, "12.5.1") {
			oses = append(oses, "ubuntu24.04")
		}
		for _, os := range oses {
			for _, fl := range []string{"base", "runtime", "devel"} {
				out = append(out, t.CUDA+"-"+fl+"-"+os)
			}
			if t.CuDNNToken != "" {
				out = append(out, t.CUDA+"-"+t.CuDNNToken+"-runtime-"+os, t.CUDA+"-"+t.CuDNNToken+"-devel-"+os)
			}
		}
	}
	return append(out, "13.0.0-tensorrt-devel-ubuntu24.04", "10.2-cudnn7-devel-ubuntu18.04", "10.2.89-base-ubuntu18.04", "12.4.1-base-ubuntu22.04-arm64-test")
}

// registryStandIn starts the registry with tags pushed (through a second,
// unauthenticated server on the same storage).
func Registry(t testing.TB, tags []string) (*httptest.Server, *DockerHub, func(tags ...string)) {
	t.Helper()
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	push := httptest.NewServer(inner)
	t.Cleanup(push.Close)
	hub := &DockerHub{inner: inner, Token: "hub-token-Zm9vYmFyYmF6cXV4", pageSize: 50}
	srv := httptest.NewServer(hub)
	t.Cleanup(srv.Close)
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(push.URL, "http://")
	pushTags := func(tags ...string) {
		for _, tag := range tags {
			ref, err := name.NewTag(host+"/nvidia/cuda:"+tag, name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.Write(ref, img); err != nil {
				t.Fatal(err)
			}
		}
	}
	pushTags(tags...)
	return srv, hub, pushTags
}

// deleteTags removes tags from the in-process registry (DELETE by tag).
func DeleteTags(t testing.TB, srv *httptest.Server, hub *DockerHub, tags ...string) {
	t.Helper()
	for _, tag := range tags {
		req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v2/nvidia/cuda/manifests/"+tag, nil)
		req.Header.Set("Authorization", "Bearer "+hub.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delete %s: %s", tag, resp.Status)
		}
	}
}

//go:embed RELEASE.md
var releaseMD []byte

// MatrixPath is where Matrix serves RELEASE.md.
const MatrixPath = "/pytorch/pytorch/main/RELEASE.md"

// Matrix serves a RELEASE.md in pytorch/pytorch's layout whose release
// matrix agrees with kiln's embedded torch data, at MatrixPath.
func Matrix(t testing.TB) *httptest.Server {
	t.Helper()
	body := releaseMD
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != MatrixPath {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newerOrSame(a, b string) bool {
	va, _ := cuda.ParseVersion(a)
	vb, _ := cuda.ParseVersion(b)
	return va.Compare(vb) >= 0
}

// Set is every stand-in, built from db.
type Set struct {
	Index    *WheelIndex
	IndexSrv *httptest.Server
	Reg      *httptest.Server
	Hub      *DockerHub
	Push     func(tags ...string)
	MatrixS  *httptest.Server
}

// New starts the three stand-ins for db's facts.
func New(t testing.TB, db *recipes.DB) *Set {
	t.Helper()
	s := &Set{Index: NewWheelIndex(db.Torch), MatrixS: Matrix(t)}
	s.IndexSrv = httptest.NewServer(s.Index)
	t.Cleanup(s.IndexSrv.Close)
	s.Reg, s.Hub, s.Push = Registry(t, Tags(db.Images))
	return s
}

// IndexURL, MatrixURL and Repository are what kiln compat refresh is pointed at.
func (s *Set) IndexURL() string   { return s.IndexSrv.URL + "/whl" }
func (s *Set) MatrixURL() string  { return s.MatrixS.URL + MatrixPath }
func (s *Set) Repository() string { return strings.TrimPrefix(s.Reg.URL, "http://") + "/nvidia/cuda" }
