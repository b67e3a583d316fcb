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

// The real registry is stopped: every byte must come from the mirror, and
// the layout names the image by its real reference.
func TestWarmThroughMirrorNamesRealRef(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	real := warmtest.NewRegistry(t)
	real.Stop()
	realRef := real.Host + "/kiln-warm/app:v1"
	mirror := registry.WithMirrors(registry.Mirror{Registry: real.Host, Endpoint: f.Reg.Host, Source: "--mirror"})
	src := warmtest.FastSource(mirror)
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{Layers: []registry.Option{mirror}}, realRef)
	if set.Images[0].Name != realRef || set.Images[0].Mirror != f.Reg.Host {
		t.Fatalf("image = %+v, want name %s read from %s", set.Images[0], realRef, f.Reg.Host)
	}
	for _, b := range set.Blobs {
		if fe, ok := b.Src.(*registry.Client); !ok || fe.Repository().RegistryStr() != real.Host {
			t.Errorf("blob %s read from %v, want the real repository's client (through its mirror)", b.Digest, b.Src)
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
	mirror := registry.WithMirrors(registry.Mirror{Registry: real.Host, Endpoint: f.Reg.Host, Source: "--mirror"})
	set := warmtest.Resolve(t, ctx, warmtest.FastSource(mirror), warm.ResolveOptions{Layers: []registry.Option{mirror}}, realRef)
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
