package fleet

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/warm"
)

// fleetEnv is two (or more) real sshd hosts, a client key they accept, a
// known_hosts file naming them, an in-process registry holding an image,
// and the real kiln binary.
type fleetEnv struct {
	client testKey
	known  string
	hosts  []*sshHost
	ref    string
	layers []v1.Hash
	bin    *Binary
}

func newFleetEnv(t *testing.T, n int) *fleetEnv {
	t.Helper()
	requireSSH(t)
	dir := t.TempDir()
	e := &fleetEnv{client: newKey(t, filepath.Join(dir, "id_ed25519")), known: filepath.Join(dir, "known_hosts")}
	var kh strings.Builder
	for range n {
		h := startSSHD(t, e.client)
		e.hosts = append(e.hosts, h)
		kh.WriteString(h.knownHostsLine())
	}
	if err := os.WriteFile(e.known, []byte(kh.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := testimage.Registry(t)
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("usr/lib/libbig.so", random(t, 3<<20))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("app/model.bin", random(t, 1<<20))}, "gzip"))
	e.ref = reg + "/fleet/app:1"
	testimage.Push(t, e.ref, img)
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		d, _ := l.Digest()
		e.layers = append(e.layers, d)
	}
	b, err := LocalBinary(testdaemon.KilnBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	e.bin = b
	return e
}

func (e *fleetEnv) host(i int, mode Mode) Host {
	h := e.hosts[i]
	return Host{Name: "gpu-" + string(rune('a'+i)), Address: h.addr, User: "root", IdentityFile: e.client.file,
		Target: "oci:" + filepath.Join(h.dir, "cache"), Mode: mode}
}

func (e *fleetEnv) options() Options {
	return Options{Refs: []string{e.ref}, Parallel: 4, SSH: SSHConfig{KnownHosts: e.known, Timeout: 5 * time.Second}, Binary: e.bin}
}

// refNames lists the image names in host i's oci: target index.json.
func (e *fleetEnv) refNames(t *testing.T, i int) []string {
	t.Helper()
	var idx struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal([]byte(mustRead(t, filepath.Join(e.hosts[i].dir, "cache", "index.json"))), &idx); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range idx.Manifests {
		names = append(names, m.Annotations["org.opencontainers.image.ref.name"])
	}
	return names
}

// hasLayers checks the host's oci: target holds every layer blob.
func (e *fleetEnv) hasLayers(t *testing.T, i int) {
	t.Helper()
	for _, d := range e.layers {
		if _, err := os.Stat(filepath.Join(e.hosts[i].dir, "cache", "blobs", d.Algorithm, d.Hex)); err != nil {
			t.Errorf("host %d: layer %s not warmed: %v", i, d, err)
		}
	}
}

func TestFleetWarmsHostsOverSSH(t *testing.T) {
	e := newFleetEnv(t, 2)
	hosts := []Host{e.host(0, ModePull), e.host(1, ModePush)}
	ctx := context.Background()

	// Cold first: the dry run copies kiln and reports what is missing.
	st := Run(ctx, hosts, func() Options { o := e.options(); o.DryRun = true; return o }())
	for i, r := range st {
		if r.State != StateCold || r.MissingBytes == 0 || !r.BinaryCopied {
			t.Fatalf("status host %d: %+v, want cold with bytes missing and kiln copied", i, r)
		}
	}

	res := Run(ctx, hosts, e.options())
	for i, r := range res {
		if r.State != StateWarm || !r.Ready || r.ExitCode != 0 || r.Error != "" {
			t.Fatalf("host %d: %+v", i, r)
		}
		if r.BinaryCopied {
			t.Errorf("host %d: kiln copied again though the host has this build", i)
		}
		if r.FetchedBytes < 4<<20 {
			t.Errorf("host %d: fetched %d bytes, want the ~4 MiB of layers", i, r.FetchedBytes)
		}
		var rep warm.Report
		if err := json.Unmarshal(r.Warm, &rep); err != nil || rep.Schema != "kiln.warm/v1" {
			t.Errorf("host %d: embedded warm report %q: %v", i, r.Warm, err)
		}
		e.hasLayers(t, i)
		// The copied binary sits under its sha256, executable, with no
		// temporary left beside it.
		bin := filepath.Join(e.hosts[i].home, ".cache/kiln/bin")
		ents, _ := os.ReadDir(bin)
		if len(ents) != 1 || ents[0].Name() != "kiln-"+e.bin.SHA256 {
			t.Errorf("host %d: %s holds %v, want only kiln-%s", i, bin, ents, e.bin.SHA256)
		}
	}
	// Push mode served the host through the tunnel from here.
	if res[1].PushedBytes < 4<<20 || res[0].PushedBytes != 0 {
		t.Errorf("pushed bytes: pull host %d, push host %d", res[0].PushedBytes, res[1].PushedBytes)
	}
	// Both hosts name the image by its real reference: the push host read
	// through the tunnel with --mirror, not from a rewritten 127.0.0.1:PORT
	// name.
	for i := range hosts {
		if got := e.refNames(t, i); len(got) != 1 || got[0] != e.ref {
			t.Errorf("host %d: index.json names %q, want [%s]", i, got, e.ref)
		}
	}
	for i, want := range []bool{false, true} {
		var rep struct {
			Images []struct{ Ref, Mirror string } `json:"images"`
		}
		if err := json.Unmarshal(res[i].Warm, &rep); err != nil || len(rep.Images) != 1 {
			t.Fatalf("host %d report %s: %v", i, res[i].Warm, err)
		}
		if got := strings.HasPrefix(rep.Images[0].Mirror, "127.0.0.1:"); got != want || rep.Images[0].Ref != e.ref {
			t.Errorf("host %d: image %+v; want ref %s, read through a loopback mirror: %v", i, rep.Images[0], e.ref, want)
		}
	}

	// Warm now: status says so and nothing is missing.
	st = Run(ctx, hosts, func() Options { o := e.options(); o.DryRun = true; return o }())
	for i, r := range st {
		if r.State != StateWarm || r.MissingBytes != 0 || r.BinaryCopied {
			t.Errorf("status after warm, host %d: %+v", i, r)
		}
	}
}

func TestFleetFaultsAreIsolated(t *testing.T) {
	e := newFleetEnv(t, 3)
	good, drop := e.host(0, ModePull), e.host(1, ModePull)
	// A wrong host key: known_hosts names another key for host 2.
	wrongKey := e.host(2, ModePull)
	other := newKey(t, filepath.Join(t.TempDir(), "other"))
	known := strings.Replace(mustRead(t, e.known), strings.TrimSpace(e.hosts[2].knownHostsLine()), strings.TrimSpace(knownHostsEntry(e.hosts[2].addr, other.public)), 1)
	if err := os.WriteFile(e.known, []byte(known), 0o600); err != nil {
		t.Fatal(err)
	}
	unreachable := Host{Name: "gone", Address: "127.0.0.1:" + itoa(freePort(t)), User: "root", IdentityFile: e.client.file, Target: "oci:" + t.TempDir(), Mode: ModePull}
	unknown := Host{Name: "unknown", Address: e.hosts[0].addr, User: "root", IdentityFile: e.client.file, Target: "oci:" + t.TempDir(), Mode: ModePull}

	o := e.options()
	o.Parallel = 2
	var once sync.Once
	o.Event = func(host, what string) {
		// Drop host 1 (sshd and all its sessions) once its warm is running.
		if host == drop.Name && what == "warm started" {
			once.Do(e.hosts[1].kill)
		}
	}
	// "unknown" dials a host whose key is in no known_hosts file it is given.
	res := Run(context.Background(), []Host{good, drop, wrongKey, unreachable}, o)
	o2 := e.options()
	o2.SSH.KnownHosts = filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(o2.SSH.KnownHosts, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res = append(res, Run(context.Background(), []Host{unknown}, o2)...)

	if res[0].State != StateWarm {
		t.Errorf("good host: %+v", res[0])
	}
	e.hasLayers(t, 0)
	want := []struct {
		i   int
		msg string
	}{
		{1, "connection lost"},
		{2, "does NOT match"},
		{3, "connection refused"},
		{4, "is not in"},
	}
	for _, w := range want {
		r := res[w.i]
		if r.State != StateFailed || !strings.Contains(r.Error, w.msg) {
			t.Errorf("host %s: state %s error %q, want failed with %q", r.Host, r.State, r.Error, w.msg)
		}
	}
	// The wrong-key host was refused before anything ran there.
	if _, err := os.Stat(filepath.Join(e.hosts[2].home, ".cache")); !os.IsNotExist(err) {
		t.Errorf("host with a wrong key got files: %v", err)
	}
}

func TestFleetRefusesOtherArch(t *testing.T) {
	e := newFleetEnv(t, 1)
	// An arm64 ELF header is all LocalBinary reads to learn the arch.
	arm := filepath.Join(t.TempDir(), "kiln-arm64")
	if err := os.WriteFile(arm, elfHeader(183), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := LocalBinary(arm)
	if err != nil || b.Arch != "arm64" {
		t.Fatalf("LocalBinary(arm64 ELF) = %+v, %v", b, err)
	}
	o := e.options()
	o.Binary = b
	r := Run(context.Background(), []Host{e.host(0, ModePull)}, o)[0]
	if r.State != StateFailed || !strings.Contains(r.Error, "host is amd64") || !strings.Contains(r.Error, "--kiln-binary") {
		t.Fatalf("%+v", r)
	}
	if _, err := os.Stat(filepath.Join(e.hosts[0].home, ".cache/kiln/bin")); !os.IsNotExist(err) {
		t.Errorf("a binary of the wrong arch was copied: %v", err)
	}
}

// random is incompressible, so layers are as large as their files.
func random(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func mustRead(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }

// elfHeader is a minimal 64-bit little-endian ELF header for machine m.
func elfHeader(m uint16) []byte {
	h := make([]byte, 64)
	copy(h, "\x7fELF")
	h[4], h[5], h[6] = 2, 1, 1 // 64-bit, little-endian, version 1
	h[16] = 2                  // ET_EXEC
	h[18], h[19] = byte(m), byte(m>>8)
	h[20] = 1
	h[52] = 64 // e_ehsize
	return h
}
