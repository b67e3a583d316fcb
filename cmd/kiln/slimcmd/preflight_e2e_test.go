package slimcmd

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
)

// slim finds what it cannot do at its end before the rewrite (issue 25
// item 8): the image here has a layer whose digest lies, which the rewrite
// reports; each case must fail on its own check first, without touching a
// layer, with an error naming the flag and what to do.
func TestSlimPreflights(t *testing.T) {
	dir := t.TempDir()
	good := testimage.Tar(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))})
	bad := append([]byte(nil), good...)
	bad[600] ^= 1
	h, _, _ := v1SHA(good)
	img := testimage.Image(t, testimage.Config{}, testimage.Lying(bad, h, h, "application/vnd.oci.image.layer.v1.tar"))
	testimage.WriteLayout(t, dir, "bad", img)
	file := filepath.Join(dir, "a-file")
	os.WriteFile(file, []byte("x"), 0o644)
	src := "oci:" + dir + ":bad"
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--to", "127.0.0.1:1/kiln/app:slim"}, cmdutil.ExitFailure, "--to 127.0.0.1:1/kiln/app:slim: cannot reach"},
		{[]string{"--to", "oci:" + filepath.Join(file, "out")}, cmdutil.ExitFailure, "is a file, not a directory"},
		{[]string{"--to", "docker-archive:" + dir}, cmdutil.ExitFailure, "is a directory; a docker archive is a file"},
		{[]string{"--to", "oci:" + filepath.Join(dir, "out"), "--weights-to", "oci:" + filepath.Join(file, "w"), "--policy", "runtime"}, cmdutil.ExitFailure, "--weights-to oci:"},
		{[]string{"--to", "oci:" + filepath.Join(dir, "out"), "--probe", "true", "--builder", "unix:///nonexistent/buildkitd.sock"}, cmdutil.ExitFailure, "--probe needs BuildKit: no BuildKit daemon answers at --builder unix:///nonexistent/buildkitd.sock"},
	}
	for _, tc := range cases {
		code, _, errOut := run(t, append([]string{"slim", src, "--progress", "none"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "digest") {
			t.Errorf("%v: code %d, %s; want %d %q before the rewrite", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Errorf("a preflight made the destination: %v", err)
	}
}

// --probe runs in BuildKit from an OCI layout in the work directory: the
// image is pushed to no registry the user did not name (it went to
// 127.0.0.1:5000 by default).
func TestSlimProbePushesNothing(t *testing.T) {
	testdaemon.SkipShort(t)
	require := os.Getenv("KILN_REQUIRE_BUILDKIT") == "1"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, _, err := builder.Connect(ctx, "", builder.TLS{})
	if err != nil {
		if require {
			t.Fatal(err)
		}
		t.Skipf("%v (KILN_REQUIRE_BUILDKIT=1 makes this fail)", err)
	}
	c.Close()
	dir := t.TempDir()
	sh := testimage.HostLayer(t, "/bin/sh", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6")
	testimage.WriteLayout(t, dir, "app", testimage.Image(t, testimage.Config{Env: []string{"PATH=/bin"}}, sh))
	out := filepath.Join(dir, "out")
	code, stdout, errOut := run(t, "slim", "oci:"+dir+":app", "--to", "oci:"+out, "--compression", "zstd",
		"--probe", `test -x /bin/sh && [ "$PATH" = /bin ]`, "--json", "--progress", "none", "--work-dir", filepath.Join(dir, "work"))
	if code != 0 {
		t.Fatalf("slim --probe: %d %s", code, errOut)
	}
	// The probe really runs there: one that fails fails the slim.
	if code, _, errOut := run(t, "slim", "oci:"+dir+":app", "--to", "oci:"+out+"-2", "--compression", "zstd",
		"--probe", "exit 7", "--progress", "none"); code != cmdutil.ExitFailure || !strings.Contains(errOut, `probe "exit 7" failed`) {
		t.Errorf("a failing probe: %d %s", code, errOut)
	}
	var rep struct{ Digest string }
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.Digest == "" {
		t.Fatalf("report %q: %v", stdout, err)
	}
	// The probed image left BuildKit's cache with the probe: no record
	// is named after its digest.
	c, _, err = builder.Connect(ctx, "", builder.TLS{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	du, err := c.DiskUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range du {
		if strings.Contains(r.Description, strings.TrimPrefix(rep.Digest, "sha256:")) {
			t.Errorf("the probed image stayed in BuildKit's cache: %s (%d bytes)", r.Description, r.Size)
		}
	}
	for _, reg := range []string{"127.0.0.1:5000", "localhost:5000"} {
		req, _ := http.NewRequest(http.MethodHead, "http://"+reg+"/v2/kiln-slim-probe/image/manifests/"+rep.Digest, nil)
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // no registry there: nothing pushed to it either
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("the probe pushed %s to %s, a registry the command did not name", rep.Digest, reg)
		}
	}
}
