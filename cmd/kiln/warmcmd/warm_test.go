package warmcmd

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/warm"
)

func TestWarmCLIContract(t *testing.T) {
	host := testimage.Registry(t)
	ref := host + "/kiln-warm/cli:v1"
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("a.bin", 300<<10)}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/x", []byte("x"))}, "gzip"))
	testimage.Push(t, ref, img)
	dir := filepath.Join(t.TempDir(), "oci")
	ready := filepath.Join(t.TempDir(), "ready")
	parse := func(out string) warm.Report {
		t.Helper()
		var r warm.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("--json is not one JSON object: %v\n%s", err, out)
		}
		return r
	}
	tests := []struct {
		name  string
		args  []string
		code  int
		ready bool
		state string
	}{
		{"dry run on an empty target: exit 5", []string{"--dry-run"}, cmdutil.ExitNotReady, false, warm.StateMissing},
		{"warm: exit 0", []string{"--ready-file", ready}, cmdutil.ExitOK, true, warm.StateFetched},
		{"dry run when warm: exit 0", []string{"--dry-run"}, cmdutil.ExitOK, true, warm.StatePresent},
		{"rerun: all present", nil, cmdutil.ExitOK, true, warm.StatePresent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"warm", ref, "--target", "oci:" + dir, "--json", "--progress", "none", "--platform", "linux/amd64"}, tc.args...)
			code, out, errOut := run(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, tc.code, out, errOut)
			}
			r := parse(out)
			if r.Schema != "kiln.warm/v1" || r.Ready != tc.ready || r.Target != "oci:"+dir || len(r.Images) != 1 || r.Images[0].Ref != ref || r.Images[0].Platform != "linux/amd64" {
				t.Fatalf("report: %+v", r)
			}
			if len(r.Blobs) != 4 {
				t.Fatalf("%d blobs, want manifest, config, 2 layers", len(r.Blobs))
			}
			for _, b := range r.Blobs {
				want := tc.state
				if want == warm.StateFetched && b.Kind != "layer" {
					// Read while resolving: written, never "fetched 0 B".
					want = warm.StateWritten
				}
				if b.State != want {
					t.Errorf("blob %s (%s) is %s, want %s", b.Digest, b.Kind, b.State, want)
				}
				if b.State == warm.StateFetched && b.BytesFetched == 0 {
					t.Errorf("blob %s (%s) fetched with 0 bytes", b.Digest, b.Kind)
				}
			}
		})
	}
	if b, err := os.ReadFile(ready); err != nil || !strings.Contains(string(b), ref) {
		t.Fatalf("ready file: %v %s", err, b)
	}
	// Usage errors: exit 2.
	for _, args := range [][]string{
		{"warm", ref},
		{"warm", ref, "--target", "nfs:/x"},
		{"warm", "--target", "oci:" + dir},
		{"warm", ref, "--target", "oci:" + dir, "--unpack"},
		{"warm", ref, "--target", "oci:" + dir, "--limit-rate", "fast"},
		{"warm", ref, "--target", "oci:" + dir, "--ingest", "fast"},
	} {
		if code, _, errOut := run(t, args...); code != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errOut)
		}
	}
	// A failure (a registry that is not there) is exit 1, and the ready
	// marker of the earlier warm is removed.
	if code, _, _ := run(t, "warm", "127.0.0.1:1/kiln/none:v1", "--target", "oci:"+dir, "--ready-file", ready, "--progress", "none"); code != cmdutil.ExitFailure {
		t.Errorf("unreachable registry: exit %d, want 1", code)
	}
	if _, err := os.Stat(ready); !os.IsNotExist(err) {
		t.Errorf("stale ready file kept: %v", err)
	}
}

// TestWarmJSONOnEarlyFailure: --json prints exactly one object, with an
// error and the stable exit code, also when the warm fails before it has a
// report (F3).
func TestWarmJSONOnEarlyFailure(t *testing.T) {
	host := testimage.Registry(t)
	// A registry that wants credentials and refuses the ones kiln has.
	authSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="kiln-test"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
	}))
	defer authSrv.Close()
	authHost := strings.TrimPrefix(authSrv.URL, "http://")
	cfg := t.TempDir()
	os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"auths":{"`+authHost+`":{"auth":"`+base64.StdEncoding.EncodeToString([]byte("kiln:wrong"))+`"}}}`), 0o600)
	t.Setenv("DOCKER_CONFIG", cfg)
	dir := filepath.Join(t.TempDir(), "oci")
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"unreachable registry", []string{"127.0.0.1:1/kiln/none:v1", "--target", "oci:" + dir}, cmdutil.ExitFailure},
		{"unknown tag", []string{host + "/kiln/none:v1", "--target", "oci:" + dir}, cmdutil.ExitFailure},
		{"wrong credentials", []string{authHost + "/kiln/private:v1", "--target", "oci:" + dir}, cmdutil.ExitFailure},
		{"missing socket", []string{host + "/kiln/none:v1", "--target", "containerd:" + filepath.Join(t.TempDir(), "none.sock")}, cmdutil.ExitFailure},
		{"usage", []string{host + "/kiln/none:v1", "--target", "oci:" + dir, "--limit-rate", "fast"}, cmdutil.ExitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, append([]string{"warm", "--json", "--progress", "none"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, tc.code, out, errOut)
			}
			dec := json.NewDecoder(strings.NewReader(out))
			var r warm.Report
			if err := dec.Decode(&r); err != nil {
				t.Fatalf("--json printed no JSON object: %v\nstdout: %q\nstderr: %s", err, out, errOut)
			}
			if dec.More() {
				t.Fatalf("--json printed more than one object:\n%s", out)
			}
			if r.Schema != warm.Schema || r.Error == "" || r.Ready || r.Images == nil || r.Blobs == nil {
				t.Fatalf("report: %+v", r)
			}
		})
	}
}

// kiln warm reads local sources through the same CLI: an oci: cache that
// an earlier warm filled, with the registry gone, into another target.
func TestWarmCLIFromOCICache(t *testing.T) {
	host := testimage.Registry(t)
	ref := host + "/kiln-warm/cache:v1"
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("a.bin", 200<<10)}, "gzip")))
	cache := filepath.Join(t.TempDir(), "cache")
	if code, out, errOut := run(t, "warm", ref, "--target", "oci:"+cache, "--json", "--progress", "none", "--platform", "linux/amd64"); code != cmdutil.ExitOK {
		t.Fatalf("warm into the cache: exit %d\n%s\n%s", code, out, errOut)
	}
	host2 := filepath.Join(t.TempDir(), "host")
	code, out, errOut := run(t, "warm", "oci:"+cache+":v1", "--target", "oci:"+host2, "--json", "--progress", "none", "--platform", "linux/amd64")
	if code != cmdutil.ExitOK {
		t.Fatalf("warm from the cache: exit %d\n%s\n%s", code, out, errOut)
	}
	var r warm.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Ready || len(r.Images) != 1 || r.Images[0].Ref != ref || !strings.HasPrefix(r.Images[0].Source, "oci:") {
		t.Fatalf("report: %+v", r)
	}
	// An unknown tag in the cache: one JSON object, exit 1, naming what it holds.
	code, out, _ = run(t, "warm", "oci:"+cache+":v9", "--target", "oci:"+host2, "--json", "--progress", "none")
	if code != cmdutil.ExitFailure || !strings.Contains(out, `no image tagged \"v9\"`) || !strings.Contains(out, ref) {
		t.Fatalf("unknown tag: exit %d\n%s", code, out)
	}
}
