package testimage

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RunnableFiles are the host files RunnableLayer copies: /bin/true with the
// loader and libc it links against (Debian amd64 paths).
var RunnableFiles = []string{"/bin/true", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"}

// RunnableLayer is a gzip layer holding this host's /bin/true with its
// loader and libc, so `ctr run IMAGE ID /bin/true` starts a real process
// without any network. It skips t when those files are not here (another
// distribution or architecture): no runnable rootfs can be made offline.
func RunnableLayer(t testing.TB) v1.Layer {
	t.Helper()
	return HostLayer(t, RunnableFiles...)
}

// HostLayer is a gzip layer holding these files of this host (absolute
// paths, symlinks followed, mode 0755) and their parent directories: a
// rootfs for a test container made offline from the host's own binaries
// (e.g. /bin/sleep for a pod sandbox's long-running process, with its
// loader and libc). It skips t when a file is not here.
func HostLayer(t testing.TB, files ...string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(1700000000, 0)
	dirs := map[string]bool{}
	for _, p := range files {
		var parents []string
		for d := filepath.Dir(p); d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Name: d[1:] + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
				t.Fatal(err)
			}
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Skipf("no runnable rootfs: %s: %v", p, err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Skipf("no runnable rootfs: %v", err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: p[1:], Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b)), ModTime: epoch}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	return l
}
