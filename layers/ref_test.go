package layers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// Docker Hub short names mean docker.io/library/… and docker.io/… as
// docker, crane and skopeo read them, and docker:// is skopeo's spelling;
// the parsed reference names the image in full.
func TestParseRefShortNames(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ubuntu", "docker.io/library/ubuntu:latest"},
		{"ubuntu:24.04", "docker.io/library/ubuntu:24.04"},
		{"nvidia/cuda:12.4.1-devel-ubuntu22.04", "docker.io/nvidia/cuda:12.4.1-devel-ubuntu22.04"},
		{"docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04"},
		{"index.docker.io/library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"},
		{"docker://ubuntu:24.04", "docker.io/library/ubuntu:24.04"},
		{"docker://ghcr.io/org/app:v1", "ghcr.io/org/app:v1"},
		{"127.0.0.1:5000/app", "127.0.0.1:5000/app:latest"},
		{"ubuntu@sha256:" + strings.Repeat("ab", 32), "docker.io/library/ubuntu@sha256:" + strings.Repeat("ab", 32)},
	} {
		r, err := layers.ParseRef(tc.in)
		if err != nil {
			t.Errorf("ParseRef(%q): %v", tc.in, err)
			continue
		}
		if r.Kind != layers.KindRegistry || r.Name.String() != tc.want {
			t.Errorf("ParseRef(%q) = %s %v, want registry %q", tc.in, r.Kind, r.Name, tc.want)
		}
		if r.Raw != tc.in {
			t.Errorf("ParseRef(%q).Raw = %q: errors must name what was typed", tc.in, r.Raw)
		}
	}
	// The same image whatever the spelling: one repository, one scope.
	a, err1 := layers.ParseRef("ubuntu:24.04")
	b, err2 := layers.ParseRef("docker.io/library/ubuntu:24.04")
	if err1 != nil || err2 != nil || a.Name.Context().String() != b.Name.Context().String() {
		t.Errorf("repositories differ: %v vs %v (%v, %v)", a.Name, b.Name, err1, err2)
	}
}

// Every refused reference says why and what to write.
func TestParseRefRefusalsSayWhy(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Ubuntu:24.04", "repository names are lower case (write ubuntu:24.04)"},
		{"127.0.0.1:5960/UX/Big:v1", "lower case (write 127.0.0.1:5960/ux/big:v1)"},
		{"ubuntu@sha256:abc", "not sha256: and 64 hex digits"},
		{"ubuntu:-bad", `tag "-bad" is not valid`},
		{"foo::bar", "write [REGISTRY/]REPO[:TAG"},
		{"ubuntu:24.04\n;rm", "no spaces or control characters"},
		{"docker://", "docker:// needs an image name"},
		{"docker-daemon:", "docker-daemon: needs an image name"},
		{"docker-daemon:App", "lower case"},
		{"oci:", "oci: needs a directory"},
		{"docker-archive:", "docker-archive: needs a file"},
		{"s3://bucket/img", `unknown transport "s3"`},
		{"", "write [REGISTRY/]REPO[:TAG]"},
	} {
		_, err := layers.ParseRef(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRef(%q) = %v, want error containing %q", tc.in, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "could not parse reference") {
			t.Errorf("ParseRef(%q): the library's reasonless text: %v", tc.in, err)
		}
	}
}

// kiln's own oci: cache names images in full; oci:DIR:FULLNAME reads one
// back (it was taken for a directory named DIR:HOST:PORT/REPO).
func TestLayoutFullNameReadBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
	testimage.WriteLayout(t, dir, "127.0.0.1:5960/ux/big:v1", img)
	testimage.WriteLayout(t, dir, "docker.io/library/ubuntu:24.04", img)
	for _, tag := range []string{"127.0.0.1:5960/ux/big:v1", "docker.io/library/ubuntu:24.04", "v1"} {
		ref := "oci:" + dir + ":" + tag
		r, err := layers.ParseRef(ref)
		if err != nil || r.Path != dir || r.Tag != tag {
			t.Errorf("ParseRef(%q) = path %q tag %q, %v; want %q %q", ref, r.Path, r.Tag, err, dir, tag)
			continue
		}
		im, err := testkit.OpenImage(context.Background(), ref)
		if err != nil {
			t.Errorf("Open(%q): %v", ref, err)
			continue
		}
		im.Close()
	}
	// A layout not yet written (slim --to, warm --target): the full name
	// after the directory is the tag.
	out := filepath.Join(t.TempDir(), "new")
	r, err := layers.ParseRef("oci:" + out + ":127.0.0.1:5000/app:v2")
	if err != nil || r.Path != out || r.Tag != "127.0.0.1:5000/app:v2" {
		t.Errorf("new layout: path %q tag %q, %v", r.Path, r.Tag, err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("ParseRef created %s", out)
	}
}

// A directory with a colon in its path is still read as the layout it is.
func TestLayoutPathWithColon(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "a:b", "lay")
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
	testimage.WriteLayout(t, dir, "v1", img)
	for _, tc := range []struct{ ref, path, tag string }{
		{"oci:" + dir, dir, ""},
		{"oci:" + dir + ":v1", dir, "v1"},
	} {
		r, err := layers.ParseRef(tc.ref)
		if err != nil || r.Path != tc.path || r.Tag != tc.tag {
			t.Errorf("ParseRef(%q) = %q %q, %v; want %q %q", tc.ref, r.Path, r.Tag, err, tc.path, tc.tag)
		}
	}
}
