//go:build integration

package integration

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/testdaemon"
)

// The CUDA runtime image from the shared registry, warmed into a real
// containerd by the real kiln binary through a --mirror endpoint: the
// warm is SIGKILLed mid-blob, the rerun resumes (fewer bytes than the
// image), and with the mirror stopped `ctr run` of the image still starts.
func TestWarmKilledResumesAndRunsOffline(t *testing.T) {
	reg := registry()
	needRoot(t, "containerd", "ctr", "runc")
	ref := needCUDARuntime(t, reg)
	kiln := testdaemon.KilnBinary(t)
	cd := testdaemon.StartContainerd(t, testdaemon.RequireEnv("KILN_REQUIRE_FIXTURES"))

	// The mirror: a reverse proxy to the registry that the test stops.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up, _ := url.Parse("http://" + reg)
	srv := &http.Server{Handler: httputil.NewSingleHostReverseProxy(up)}
	go srv.Serve(ln)
	defer srv.Close()
	mirror := reg + "=" + ln.Addr().String()

	args := []string{"warm", ref, "--target", "containerd:" + cd.Socket, "--mirror", mirror,
		"--platform", "linux/amd64", "--json", "--progress", "none", "--limit-rate", "150MiB"}

	// First run: killed once an ingest holds some bytes.
	cmd := exec.Command(kiln, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killedAt := int64(-1)
	deadline := time.Now().Add(3 * time.Minute)
	for killedAt < 0 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("no kiln-warm ingest reached 16 MiB in 3 minutes")
		}
		for _, a := range active(t, cd) {
			if a.offset >= 16<<20 {
				killedAt = a.offset
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	left := active(t, cd)
	var held int64
	for _, a := range left {
		held += a.offset
	}
	if held == 0 {
		t.Fatalf("the killed run left no ingest bytes (killed at %d)", killedAt)
	}
	t.Logf("killed with %d ingests holding %d bytes", len(left), held)

	// Rerun: resumes and completes, then unpacks.
	out, err := exec.Command(kiln, append(args, "--unpack")...).Output()
	if err != nil {
		t.Fatalf("rerun: %v\n%s", err, out)
	}
	var rep struct {
		Ready  bool `json:"ready"`
		Images []struct {
			Ref, Mirror string
		} `json:"images"`
		Blobs []struct {
			Digest       string `json:"digest"`
			Size         int64  `json:"size"`
			State        string `json:"state"`
			BytesFetched int64  `json:"bytes_fetched"`
			Resumed      int64  `json:"resumed_from"`
		} `json:"blobs"`
		Unpacked bool `json:"unpacked"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("rerun report: %v\n%s", err, out)
	}
	var total, fetched, resumed int64
	for _, b := range rep.Blobs {
		total += b.Size
		fetched += b.BytesFetched
		resumed += b.Resumed
	}
	if !rep.Ready || !rep.Unpacked || len(rep.Images) != 1 || rep.Images[0].Ref != ref || rep.Images[0].Mirror != ln.Addr().String() {
		t.Fatalf("rerun: ready=%v unpacked=%v images=%+v", rep.Ready, rep.Unpacked, rep.Images)
	}
	if resumed == 0 || fetched >= total {
		t.Errorf("rerun fetched %d of %d bytes, resumed %d: want a resume", fetched, total, resumed)
	}
	// Bytes the killed run wrote are not fetched again.
	if fetched+resumed > total {
		t.Errorf("rerun fetched %d + resumed %d > %d: finished bytes fetched again", fetched, resumed, total)
	}
	t.Logf("rerun fetched %d of %d bytes, resumed from %d", fetched, total, resumed)
	if o, err := cd.Ctr(t, "images", "check"); err != nil || !strings.Contains(o, ref) || !strings.Contains(o, "complete") {
		t.Fatalf("ctr images check: %v\n%s", err, o)
	}

	// The mirror goes away; the image, recorded under its real name, starts.
	srv.Close()
	if o, err := cd.Ctr(t, "run", "--rm", "--snapshotter", cd.Snapshotter(t), ref, "kiln-warm-it", "/bin/true"); err != nil {
		t.Fatalf("ctr run with the mirror down: %v\n%s", err, o)
	}
}

type ingest struct {
	ref    string
	offset int64
}

var activeLine = regexp.MustCompile(`^(kiln-warm-sha256:[0-9a-f]{64})\s+(\d+(?:\.\d+)?)\s*([KMGT]?i?B)`)

// active lists kiln's ingests (ctr content active: REF SIZE AGE).
func active(t *testing.T, cd *testdaemon.Containerd) []ingest {
	t.Helper()
	out, err := cd.Ctr(t, "content", "active")
	if err != nil {
		t.Fatalf("ctr content active: %v\n%s", err, out)
	}
	var res []ingest
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := activeLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, err := bytesize.Parse(m[2] + m[3])
		if err != nil {
			t.Fatalf("ctr content active: %v", err)
		}
		res = append(res, ingest{ref: m[1], offset: n})
	}
	return res
}
