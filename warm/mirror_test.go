package warm_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/ocilayout"
	"github.com/kiln-build/kiln/warm/targets"
)

func TestParseMirror(t *testing.T) {
	tests := []struct {
		in, reg, ep string
		bad         bool
	}{
		{in: "ghcr.io=127.0.0.1:5000", reg: "ghcr.io", ep: "127.0.0.1:5000"},
		{in: "docker.io=mirror.local", reg: "index.docker.io", ep: "mirror.local"},
		{in: " 127.0.0.1:5000 = 127.0.0.1:41000 ", reg: "127.0.0.1:5000", ep: "127.0.0.1:41000"},
		{in: "ghcr.io", bad: true},
		{in: "=127.0.0.1:1", bad: true},
		{in: "ghcr.io=http://mirror", bad: true},
		{in: "ghcr.io=mirror/path", bad: true},
	}
	for _, tc := range tests {
		reg, ep, err := warm.ParseMirror(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseMirror(%q) = %q, %q; want an error", tc.in, reg, ep)
			}
			continue
		}
		if err != nil || reg != tc.reg || ep != tc.ep {
			t.Errorf("ParseMirror(%q) = %q, %q, %v; want %q, %q", tc.in, reg, ep, err, tc.reg, tc.ep)
		}
	}
}

// The real registry is stopped: every byte must come from the mirror, and
// the layout names the image by its real reference.
func TestWarmThroughMirrorNamesRealRef(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	real := warmtest.NewRegistry(t)
	real.Stop()
	realRef := real.Host + "/kiln-warm/app:v1"
	src := warmtest.FastSource()
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{Mirrors: warm.Mirrors{real.Host: f.Reg.Host}}, realRef)
	if set.Images[0].Name != realRef || set.Images[0].Mirror != f.Reg.Host {
		t.Fatalf("image = %+v, want name %s read from %s", set.Images[0], realRef, f.Reg.Host)
	}
	for _, b := range set.Blobs {
		if fe, ok := b.Src.(*registry.Client); !ok || fe.Repository().RegistryStr() != f.Reg.Host {
			t.Errorf("blob %s read from %v, want the mirror", b.Digest, b.Src)
		}
		if got := b.Labels["containerd.io/distribution.source."+real.Host]; got != "kiln-warm/app" {
			t.Errorf("blob %s: distribution source label %q, want the real repository (labels %v)", b.Digest, got, b.Labels)
		}
	}
	dir := filepath.Join(t.TempDir(), "oci")
	tgt, err := ocilayout.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{})
	if err != nil || !rep.Ready {
		t.Fatalf("warm: ready=%v err=%v", rep.Ready, err)
	}
	if rep.Images[0].Mirror != f.Reg.Host {
		t.Errorf("report image %+v does not name the mirror", rep.Images[0])
	}
	if f.Reg.Served(f.Big) != f.Size {
		t.Errorf("mirror served %d bytes of the large layer, want %d", f.Reg.Served(f.Big), f.Size)
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json %s: %v", b, err)
	}
	if got := idx.Manifests[0].Annotations[ocispec.AnnotationRefName]; got != realRef {
		t.Errorf("index.json names %q, want the real reference %q", got, realRef)
	}
}

func TestWarmContainerdThroughMirror(t *testing.T) {
	ci := testdaemon.StartContainerd(t)
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	real := warmtest.NewRegistry(t)
	real.Stop()
	realRef := real.Host + "/kiln-warm/app:v1"
	src := warmtest.FastSource()
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{Mirrors: warm.Mirrors{real.Host: f.Reg.Host}}, realRef)
	tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	if rep, err := warm.Warm(ctx, set, tgt, warm.Options{}); err != nil || !rep.Ready {
		t.Fatalf("warm: %v", err)
	}
	out, err := ci.Ctr(t, "images", "ls", "-q")
	if err != nil || strings.TrimSpace(out) != realRef {
		t.Fatalf("ctr images ls: %q %v; want only %s", out, err, realRef)
	}
	out, err = ci.Ctr(t, "content", "ls")
	if err != nil || !strings.Contains(out, "containerd.io/distribution.source."+real.Host+"=kiln-warm/app") || strings.Contains(out, "distribution.source."+f.Reg.Host) {
		t.Errorf("content labels name the mirror, not the real registry:\n%s", out)
	}
}
