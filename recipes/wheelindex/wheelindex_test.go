package wheelindex

import (
	"context"
	"fmt"
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
