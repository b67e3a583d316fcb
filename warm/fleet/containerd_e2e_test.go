package fleet

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
)

// TestFleetWarmsContainerdHosts is the two-host test with real
// parts end to end: two real sshd hosts on loopback, each with its own real
// containerd, one pulling from the registry and one fed through the SSH
// tunnel (--mirror). The kiln CLI warms both (--hosts), status reports both
// warm, and containerd's own client sees a complete image under its real
// name on each host and starts a container of it.
func TestFleetWarmsContainerdHosts(t *testing.T) {
	requireSSH(t)
	if _, err := exec.LookPath("ctr"); err != nil && os.Getenv("KILN_REQUIRE_CONTAINERD") != "1" {
		t.Skip("no ctr (containerd's client); KILN_REQUIRE_CONTAINERD=1 to require")
	}
	dir := t.TempDir()
	client := newKey(t, filepath.Join(dir, "id_ed25519"))
	known := filepath.Join(dir, "known_hosts")

	// The image runs: /bin/true with its loader and libc, plus a second
	// layer so more than one blob crosses each path.
	reg := testimage.Registry(t)
	img := testimage.Image(t, testimage.Config{Cmd: []string{"/bin/true"}},
		testimage.RunnableLayer(t),
		testimage.Layer(t, []testimage.Entry{testimage.File("app/model.bin", random(t, 2<<20))}, "gzip"))
	ref := reg + "/fleet/ctd:1"
	testimage.Push(t, ref, img)

	var kh, hf strings.Builder
	hf.WriteString("defaults:\n  user: root\n  identity_file: " + client.file + "\n  namespace: default\nhosts:\n")
	var cds []*testdaemon.Containerd
	for i, mode := range []Mode{ModePull, ModePush} {
		h := startSSHD(t, client)
		cd := testdaemon.StartContainerd(t, testdaemon.RequireEnv("KILN_REQUIRE_SSH"))
		cds = append(cds, cd)
		kh.WriteString(h.knownHostsLine())
		fmt.Fprintf(&hf, "  - name: gpu-%c\n    address: %s\n    target: containerd:%s\n    mode: %s\n", 'a'+i, h.addr, cd.Socket, mode)
	}
	hosts := filepath.Join(dir, "gpus.yaml")
	if err := os.WriteFile(known, []byte(kh.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hosts, []byte(hf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	kiln := testdaemon.KilnBinary(t)
	cli := func(want int, args ...string) []Result {
		t.Helper()
		cmd := exec.Command(kiln, append(args, "--hosts", hosts, "--known-hosts", known, "--json", "--progress", "none")...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var obj struct {
			Hosts []Result `json:"hosts"`
		}
		jerr := json.Unmarshal(out, &obj)
		res := obj.Hosts
		if jerr != nil || code != want || len(res) != 2 {
			t.Fatalf("kiln %s: exit %d (want %d), %d results, %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, len(res), jerr, out, stderr.String())
		}
		return res
	}

	// Cold before: status exits 5 (not ready) with bytes missing on both hosts.
	for i, r := range cli(5, "warm", "status", ref) {
		if r.State != StateCold || r.MissingBytes == 0 {
			t.Fatalf("status before, host %d: %+v", i, r)
		}
	}
	// The warm: both hosts ready, the push host's bytes sent from here.
	res := cli(0, "warm", ref, "--unpack")
	for i, r := range res {
		if r.State != StateWarm || !r.Ready || r.Error != "" || r.FetchedBytes < 2<<20 {
			t.Fatalf("warm, host %d: %+v", i, r)
		}
	}
	if res[0].PushedBytes != 0 || res[1].PushedBytes < 2<<20 {
		t.Errorf("pushed bytes: pull host %d, push host %d", res[0].PushedBytes, res[1].PushedBytes)
	}
	// Warm after: exit 0, nothing missing.
	for i, r := range cli(0, "warm", "status", ref) {
		if r.State != StateWarm || r.MissingBytes != 0 {
			t.Errorf("status after, host %d: %+v", i, r)
		}
	}

	for i, cd := range cds {
		// The image is named by its real reference on both hosts: the push
		// host read through a loopback mirror, and no 127.0.0.1:TUNNEL
		// name was recorded.
		out, err := cd.Ctr(t, "images", "ls", "-q")
		if names := strings.Fields(out); err != nil || len(names) != 1 || names[0] != ref {
			t.Errorf("host %d: ctr images ls -q = %q (%v), want only %s", i, out, err, ref)
		}
		out, err = cd.Ctr(t, "images", "check")
		if err != nil || !checkComplete(out, ref) {
			t.Errorf("host %d: ctr images check: %v\n%s", i, err, out)
		}
		// containerd starts it from what is on the host: ctr run does not
		// pull, so a missing blob or snapshot would fail it here.
		id := fmt.Sprintf("kiln-fleet-%d", i)
		if out, err := cd.Ctr(t, "run", "--rm", "--snapshotter", cd.Snapshotter(t), ref, id, "/bin/true"); err != nil {
			t.Errorf("host %d: ctr run %s: %v\n%s", i, ref, err, out)
		}
	}
}

// checkComplete reports whether `ctr images check` lists ref as complete
// (columns: REF TYPE DIGEST STATUS SIZE UNPACKED).
func checkComplete(out, ref string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && f[0] == ref && f[3] == "complete" {
			return true
		}
	}
	return false
}
