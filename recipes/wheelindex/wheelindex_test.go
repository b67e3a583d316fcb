package wheelindex

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFilesHTMLAndJSON(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/html/torch/":
			fmt.Fprintf(w, `<!DOCTYPE html><html><body>
<a href="../../files/torch-2.5.1%%2Bcu124-cp311-cp311-linux_x86_64.whl#sha256=%s" data-requires-python="&gt;=3.9">torch-2.5.1+cu124-cp311-cp311-linux_x86_64.whl</a><br/>
<a href='/files/torch-2.5.1+cu124-cp311-cp311-linux_aarch64.whl#sha256=%s'>torch-2.5.1+cu124-cp311-cp311-linux_aarch64.whl</a>
<a href="/files/torch-2.5.0+cu124-cp311-cp311-linux_x86_64.whl#sha256=%s" data-yanked="">torch-2.5.0+cu124-cp311-cp311-linux_x86_64.whl</a>
</body></html>`, sha, sha, sha)
		case "/json/bitsandbytes/":
			if !strings.Contains(r.Header.Get("Accept"), "application/vnd.pypi.simple.v1+json") {
				t.Errorf("Accept = %q", r.Header.Get("Accept"))
			}
			w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
			fmt.Fprintf(w, `{"meta":{"api-version":"1.1"},"name":"bitsandbytes","files":[
{"filename":"bitsandbytes-0.45.5-py3-none-manylinux_2_24_x86_64.whl","url":"/f/bnb.whl","hashes":{"sha256":"%s"}},
{"filename":"bitsandbytes-0.45.5.tar.gz","url":"/f/bnb.tgz","hashes":{}},
{"filename":"bitsandbytes-0.45.4-py3-none-manylinux_2_24_x86_64.whl","url":"/f/old.whl","hashes":{"sha256":"%s"},"yanked":"bad"}]}`, strings.ToUpper(sha), sha)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := &Client{HTTP: srv.Client()}
	ctx := context.Background()
	files, err := c.Files(ctx, srv.URL+"/html", "Torch")
	if err != nil || len(files) != 3 {
		t.Fatalf("%v %v", files, err)
	}
	if files[0].SHA256 != sha || files[0].URL != srv.URL+"/files/torch-2.5.1%2Bcu124-cp311-cp311-linux_x86_64.whl" || files[0].RequiresPython != ">=3.9" || !files[2].Yanked {
		t.Errorf("%+v", files)
	}
	f, err := Select(files, "torch", "2.5.1+cu124", "3.11", "linux/arm64", "")
	if err != nil || !strings.HasSuffix(f.Filename, "aarch64.whl") {
		t.Errorf("%+v %v", f, err)
	}
	if _, err := Select(files, "torch", "2.5.0+cu124", "3.11", "linux/amd64", ""); err == nil {
		t.Error("selected a yanked file")
	}
	if _, err := Select(files, "torch", "2.5.1+cu124", "3.12", "linux/amd64", ""); err == nil {
		t.Error("selected a cp311 wheel for 3.12")
	}
	files, err = c.Files(ctx, srv.URL+"/json/", "bitsandbytes")
	if err != nil || len(files) != 3 {
		t.Fatalf("%v %v", files, err)
	}
	f, err = Select(files, "bitsandbytes", "0.45.5", "3.12", "linux/amd64", "")
	if err != nil || f.SHA256 != sha || f.URL != srv.URL+"/f/bnb.whl" {
		t.Errorf("%+v %v", f, err)
	}
	if _, err := c.Files(ctx, srv.URL+"/json", "nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing project: %v", err)
	}
}

func TestWheelTags(t *testing.T) {
	w, ok := ParseWheel("flash_attn-2.7.4.post1+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl")
	if !ok || w.Name != "flash_attn" || w.Version != "2.7.4.post1+cu12torch2.5cxx11abiFALSE" {
		t.Fatalf("%+v", w)
	}
	if !VersionMatches(w.Version, "2.7.4.post1") || VersionMatches(w.Version, "2.7.4") || !VersionMatches("2.5.1+cu124", "2.5.1+cu124") || VersionMatches("2.5.1+cu121", "2.5.1+cu124") {
		t.Error("VersionMatches")
	}
	abi3, _ := ParseWheel("x-1.0-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
	if !PythonOK(abi3, "3.12") || PythonOK(abi3, "3.8") || !PlatformOK(abi3, "linux/amd64") || PlatformOK(abi3, "linux/arm64") {
		t.Error("abi3 tags")
	}
	if Normalize("Flash_Attn..X") != "flash-attn-x" {
		t.Error(Normalize("Flash_Attn..X"))
	}
}

// D10: an index URL with a query string (a token, a mirror's parameter)
// got the project's path appended after the query.
func TestProjectURLKeepsTheQuery(t *testing.T) {
	for in, want := range map[string]string{
		"https://download.pytorch.org/whl/cu126":   "https://download.pytorch.org/whl/cu126/torch/",
		"https://mirror.example/simple/?token=abc": "https://mirror.example/simple/torch/?token=abc",
		"https://mirror.example/whl/cu130?x=1&y=2": "https://mirror.example/whl/cu130/torch/?x=1&y=2",
	} {
		if got := ProjectURL(in, "Torch"); got != want {
			t.Errorf("ProjectURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// D10: a page over the bound was cut at 64 MiB silently.
func TestFilesRefusesOversizedPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html><body>")
		chunk := strings.Repeat("<a href=\"x-1.0-py3-none-any.whl\">x-1.0-py3-none-any.whl</a>\n", 1<<10)
		for n := 0; n <= maxPage; n += len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		io.WriteString(w, "</body></html>")
	}))
	defer srv.Close()
	if _, err := (&Client{}).Files(context.Background(), srv.URL, "x"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v", err)
	}
}

// compat refresh --index URL?token=… and resolve's variant index joined
// the variant after the query (a 404); JoinURL keeps the query last, as
// ProjectURL does, and the two compose.
func TestJoinURLKeepsTheQuery(t *testing.T) {
	idx := JoinURL("https://mirror.example/whl?token=abc", "cu124")
	if idx != "https://mirror.example/whl/cu124?token=abc" {
		t.Fatalf("JoinURL = %q", idx)
	}
	if got := ProjectURL(idx, "torch"); got != "https://mirror.example/whl/cu124/torch/?token=abc" {
		t.Errorf("ProjectURL(JoinURL) = %q", got)
	}
	if got := JoinURL("https://download.pytorch.org/whl/", "cu128"); got != "https://download.pytorch.org/whl/cu128" {
		t.Errorf("no query: %q", got)
	}
}

// An index that does not answer is named with the setting that points
// kiln at it, in words, not Go's dial error.
func TestUnreachableIndexNamesSetting(t *testing.T) {
	srv := httptest.NewServer(nil)
	srv.Close()
	c := &Client{Setting: "--wheel-index, $KILN_WHEEL_INDEX or the recipe's wheel_indexes"}
	_, err := c.Files(context.Background(), srv.URL+"/simple", "torch")
	if err == nil {
		t.Fatal("no error from an index that is down")
	}
	msg := err.Error()
	for _, want := range []string{"wheel index " + srv.URL + "/simple (set by --wheel-index, $KILN_WHEEL_INDEX", "cannot reach it: nothing answers at " + strings.TrimPrefix(srv.URL, "http://") + " (connection refused)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q; want %q", msg, want)
		}
	}
	if strings.Contains(msg, "dial tcp") {
		t.Errorf("error %q quotes Go's dial error", msg)
	}
}
