package wheelserve

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlashAttnSDist(t *testing.T) {
	s := FlashAttnSDist(FlashAttnVersion)
	if s.Filename() != "flash_attn-2.7.0.post2.tar.gz" {
		t.Errorf("filename %s", s.Filename())
	}
	b1, err := s.Build()
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := FlashAttnSDist(FlashAttnVersion).Build()
	if !bytes.Equal(b1, b2) {
		t.Error("the same sdist built to different bytes")
	}
	zr, err := gzip.NewReader(bytes.NewReader(b1))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(h.Name, "flash_attn-2.7.0.post2/") {
			t.Errorf("%s outside the project directory", h.Name)
		}
		b, _ := io.ReadAll(tr)
		files[strings.TrimPrefix(h.Name, "flash_attn-2.7.0.post2/")] = string(b)
	}
	for _, want := range []string{"PKG-INFO", "setup.py", "csrc/flash_fwd.cu", "csrc/flash_bwd.cu", "flash_attn/__init__.py"} {
		if _, ok := files[want]; !ok {
			t.Errorf("sdist lacks %s", want)
		}
	}
	for _, cu := range []string{"csrc/flash_fwd.cu", "csrc/flash_bwd.cu"} {
		if !strings.Contains(files[cu], "__global__ void") || !strings.Contains(files[cu], `extern "C"`) {
			t.Errorf("%s is not a kernel with a C wrapper", cu)
		}
	}
	if !strings.Contains(files["csrc/flash_fwd.cu"], "__global__ void kiln_flash_fwd_softmax_row(const float *x, float *y, int rows, int cols, float scale)") {
		t.Errorf("FlashAttnKernel (%s) no longer names the forward kernel", FlashAttnKernel)
	}
	for _, want := range []string{"FLASH_ATTN_CUDA_ARCHS", "MAX_JOBS", "NVCC_THREADS", `"arch=compute_%s,code=sm_%s"`, `"-cudart", "shared"`, `VERSION = "2.7.0.post2"`} {
		if !strings.Contains(files["setup.py"], want) {
			t.Errorf("setup.py lacks %s", want)
		}
	}
	if !strings.Contains(files["flash_attn/__init__.py"], "CDLL") || !strings.Contains(files["PKG-INFO"], "Name: flash-attn\nVersion: 2.7.0.post2\n") {
		t.Error("__init__.py or PKG-INFO")
	}
}

func TestIndexServesSDist(t *testing.T) {
	ix, err := NewIndex(StandIns(0)...)
	if err != nil {
		t.Fatal(err)
	}
	s := FlashAttnSDist(FlashAttnVersion)
	if err := ix.AddSDist(s); err != nil {
		t.Fatal(err)
	}
	if err := ix.AddSDist(s); err != nil { // idempotent
		t.Fatal(err)
	}
	srv := httptest.NewServer(ix)
	defer srv.Close()
	get := func(p string) []byte {
		t.Helper()
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", p, resp.Status)
		}
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	b, _ := s.Build()
	h := sha256.Sum256(b)
	page := string(get("/simple/flash_attn/"))
	if want := `href="../../files/flash_attn-2.7.0.post2.tar.gz#sha256=` + hex.EncodeToString(h[:]) + `"`; strings.Count(page, want) != 1 {
		t.Errorf("listing lacks %s once:\n%s", want, page)
	}
	if !strings.Contains(page, "flash_attn-2.7.0.post2+cu11torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl") {
		t.Errorf("listing lost the wheel:\n%s", page)
	}
	if !bytes.Equal(get("/files/flash_attn-2.7.0.post2.tar.gz"), b) {
		t.Error("served sdist differs")
	}
}

func TestServeContentAddressed(t *testing.T) {
	ix, err := NewIndex(StandIns(0)...)
	if err != nil {
		t.Fatal(err)
	}
	d1 := ix.Digest()
	url, stop, err := Serve(ix, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !strings.HasSuffix(url, "/"+d1+"/simple") {
		t.Errorf("url %s does not name the contents %s", url, d1)
	}
	resp, err := http.Get(url + "/torch/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `href="../../files/torch-2.5.1+cu118-py3-none-any.whl#sha256=`) {
		t.Fatalf("%s: %s\n%s", url, resp.Status, page)
	}
	resp, err = http.Get(strings.TrimSuffix(url, "/simple") + "/files/torch-2.5.1+cu118-py3-none-any.whl")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("file under the prefix: %v %v", err, resp.Status)
	}
	resp.Body.Close()
	ix2, _ := NewIndex(StandIns(0)...)
	if ix2.Digest() != d1 {
		t.Error("the same stand-ins, another digest")
	}
	if err := ix2.AddSDist(FlashAttnSDist(FlashAttnVersion)); err != nil {
		t.Fatal(err)
	}
	if ix2.Digest() == d1 {
		t.Error("an added sdist did not change the digest")
	}
}

// TestAddDirServesRealWheels: wheels listed in SHA256SUMS are served from
// their files (Range answered, as pip and kiln's fetcher ask), listed in the
// PEP 691 JSON page with their sha256, and replace a stand-in of the same
// project; a malformed SHA256SUMS line is refused, naming the file and line.
func TestAddDirServesRealWheels(t *testing.T) {
	dir := t.TempDir()
	body := bytes.Repeat([]byte("torch-bytes "), 1000)
	fn := "torch-2.6.0+cu124-cp313-cp313-manylinux_2_28_x86_64.whl"
	if err := os.WriteFile(filepath.Join(dir, fn), body, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(hex.EncodeToString(sum[:])+"  "+fn+"\n"), 0o644)
	ix, err := NewIndex(StandIns(0)...)
	if err != nil {
		t.Fatal(err)
	}
	before := ix.Digest()
	ix.Remove("torch")
	if err := ix.AddDir(dir); err != nil {
		t.Fatal(err)
	}
	if ix.Digest() == before {
		t.Error("the index digest does not name the new wheel")
	}
	srv := httptest.NewServer(ix)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/simple/torch/", nil)
	req.Header.Set("Accept", "application/vnd.pypi.simple.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Files []struct {
			Filename string
			URL      string
			Hashes   map[string]string
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if err != nil || resp.Header.Get("Content-Type") != "application/vnd.pypi.simple.v1+json" {
		t.Fatalf("json page: %v, %s", err, resp.Header.Get("Content-Type"))
	}
	if len(page.Files) != 1 || page.Files[0].Filename != fn || page.Files[0].Hashes["sha256"] != hex.EncodeToString(sum[:]) {
		t.Fatalf("torch page %+v, want only the real wheel with its sha256 (the stand-in replaced)", page.Files)
	}
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/files/"+fn, nil)
	req.Header.Set("Range", "bytes=12-23")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || string(got) != "torch-bytes " {
		t.Errorf("range: %d %q", resp.StatusCode, got)
	}
	os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte("nothex  ../evil.whl\n"), 0o644)
	if err := ix.AddDir(dir); err == nil || !strings.Contains(err.Error(), "SHA256SUMS:1") {
		t.Errorf("bad SHA256SUMS: %v", err)
	}
}
