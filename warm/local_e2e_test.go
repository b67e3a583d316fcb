package warm_test

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/containerd"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/ocilayout"
	"github.com/kiln-build/kiln/warm/targets"
	"github.com/kiln-build/kiln/weights"
)

// The persistent image cache of a spot fleet: warm once into oci:DIR,
// then, with no registry at all, warm a new host's containerd from DIR.
// The image is recorded under its registry name, so `ctr run REF` (what
// a pod or a launch script names) starts it.
func TestWarmFromOCILayoutCache(t *testing.T) {
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Skip("no ctr")
	}
	ctx := context.Background()
	f := warmtest.PushFixture(t, true)
	cache := filepath.Join(t.TempDir(), "cache")
	tgt, err := ocilayout.New(cache)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := warm.Warm(ctx, warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, f.Ref), tgt, warm.Options{}); err != nil || !rep.Ready {
		t.Fatalf("warm into the cache: ready=%v err=%v", rep.Ready, err)
	}
	f.Reg.Stop() // from here on nothing may come from the registry

	for _, tc := range []struct{ arg, wantErr string }{
		{arg: "oci:" + cache},
		{arg: "oci:" + cache + ":v1"},
		{arg: "oci:" + cache + ":v2", wantErr: `no image tagged "v2"`},
		{arg: "oci:" + t.TempDir(), wantErr: "not an OCI image layout"},
	} {
		s, err := warm.Resolve(ctx, testkit.Refs(t, tc.arg), warm.ResolveOptions{Platform: warmtest.AMD64})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.arg, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.arg, err)
		}
		if len(s.Images) != 1 || s.Images[0].Name != f.Ref || !strings.HasPrefix(s.Images[0].Source, "oci:") {
			t.Fatalf("%s: images %+v, want %s read from the layout", tc.arg, s.Images, f.Ref)
		}
	}
	set, err := warm.Resolve(ctx, testkit.Refs(t, "oci:"+cache), warm.ResolveOptions{Platform: warmtest.AMD64})
	if err != nil {
		t.Fatal(err)
	}
	// By digest, as the report names the source.
	if _, err := warm.Resolve(ctx, testkit.Refs(t, "oci:"+cache+"@"+set.Images[0].Manifest.Digest.String()), warm.ResolveOptions{Platform: warmtest.AMD64}); err != nil {
		t.Fatalf("by digest: %v", err)
	}

	ci := testdaemon.StartContainerd(t)
	ct, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	var layerBytes int64
	for _, b := range set.Blobs {
		if b.Kind == warm.KindLayer {
			layerBytes += b.Size
		}
	}
	rep, err := warm.Warm(ctx, set, ct, warm.Options{Unpack: true})
	if err != nil || !rep.Ready || !rep.Unpacked || rep.FetchedBytes != layerBytes {
		t.Fatalf("warm from the cache: ready=%v unpacked=%v fetched=%d of %d layer bytes, err=%v", rep.Ready, rep.Unpacked, rep.FetchedBytes, layerBytes, err)
	}
	out, err := ci.Ctr(t, "images", "check")
	if err != nil || !strings.Contains(out, f.Ref) || !strings.Contains(out, "complete") {
		t.Fatalf("ctr images check: %v\n%s", err, out)
	}
	sn := ct.(*containerd.Containerd).Snapshotter()
	if out, err := ci.Ctr(t, "run", "--rm", "--snapshotter", sn, f.Ref, "kiln-warm-local", "/bin/true"); err != nil {
		t.Fatalf("ctr run of the image warmed from the cache: %v\n%s", err, out)
	}
}

// A blob of the cache that rotted on disk is never committed to the new
// host: the copy fails its digest, the host is not ready, and nothing of
// that blob is visible in the target.
func TestWarmFromOCILayoutCorruptBlob(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	cache := filepath.Join(t.TempDir(), "cache")
	tgt, err := ocilayout.New(cache)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := warm.Warm(ctx, warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, f.Ref), tgt, warm.Options{}); err != nil || !rep.Ready {
		t.Fatalf("warm into the cache: ready=%v err=%v", rep.Ready, err)
	}
	p := filepath.Join(cache, "blobs", "sha256", strings.TrimPrefix(f.Big, "sha256:"))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := warm.Resolve(ctx, testkit.Refs(t, "oci:"+cache), warm.ResolveOptions{Platform: warmtest.AMD64})
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "host")
	host, err := ocilayout.New(dst)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := warm.Warm(ctx, set, host, warm.Options{Attempts: 2})
	if err == nil || rep.Ready || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("warm from a corrupt cache: ready=%v err=%v, want a digest failure", rep.Ready, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "blobs", "sha256", strings.TrimPrefix(f.Big, "sha256:"))); !os.IsNotExist(err) {
		t.Fatalf("the corrupt blob was committed: %v", err)
	}
}

// A docker archive (docker save, kiln slim --to docker-archive:) warms
// like a registry image: its layers as stored (plain tar: the blob is the
// diff ID), a manifest written for it, the image named by its RepoTags.
func TestWarmFromDockerArchive(t *testing.T) {
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Skip("no ctr")
	}
	ctx := context.Background()
	f := warmtest.PushFixture(t, true)
	f.Reg.Stop()
	archive := filepath.Join(t.TempDir(), "app.tar")
	if _, err := layers.Write(ctx, f.Img, testkit.Ref(t, "docker-archive:"+archive+":kiln/app:v1")); err != nil {
		t.Fatal(err)
	}
	set, err := warm.Resolve(ctx, testkit.Refs(t, "docker-archive:"+archive), warm.ResolveOptions{Platform: warmtest.AMD64})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if len(set.Images) != 1 || set.Images[0].Name != "docker.io/kiln/app:v1" {
		t.Fatalf("images %+v, want docker.io/kiln/app:v1", set.Images)
	}
	cfgDiffs, err := f.Img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range set.Images[0].Layers {
		if l.Digest.String() != cfgDiffs.RootFS.DiffIDs[i].String() || l.MediaType != "application/vnd.oci.image.layer.v1.tar" {
			t.Errorf("layer %d: %s %s, want the diff ID as a plain tar", i, l.MediaType, l.Digest)
		}
	}
	ci := testdaemon.StartContainerd(t)
	ct, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	rep, err := warm.Warm(ctx, set, ct, warm.Options{Unpack: true})
	if err != nil || !rep.Ready || !rep.Unpacked {
		t.Fatalf("warm from the archive: ready=%v unpacked=%v err=%v", rep.Ready, rep.Unpacked, err)
	}
	sn := ct.(*containerd.Containerd).Snapshotter()
	if out, err := ci.Ctr(t, "run", "--rm", "--snapshotter", sn, "docker.io/kiln/app:v1", "kiln-warm-archive", "/bin/true"); err != nil {
		t.Fatalf("ctr run of the image warmed from the archive: %v\n%s", err, out)
	}
}

// A weights artifact named on the command line is read once: the volume
// is resolved from the manifest the warm set already fetched, so with the
// registry gone afterwards the volume still resolves (and a layout's
// artifact likewise).
func TestWeightsArtifactReadOnce(t *testing.T) {
	ctx := context.Background()
	reg := warmtest.NewRegistry(t)
	c, err := weights.NewCollector(t.TempDir(), weights.WithLargeFileThreshold(1<<10))
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("w"), 32<<10)
	if err := c.Divert("/models/a.safetensors", &tar.Header{Typeflag: tar.TypeReg, Name: "/models/a.safetensors", Size: int64(len(data)), Mode: 0o644}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	ref := reg.Host + "/kiln-warm/weights:v1"
	if _, _, err := c.Publish(ctx, testkit.Ref(t, ref), "", "sha256:"+strings.Repeat("4", 64)); err != nil {
		t.Fatal(err)
	}
	set, err := warm.Resolve(ctx, testkit.Refs(t, ref), warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Images) != 0 || len(set.WeightsArgs) != 1 {
		t.Fatalf("set: %d images, weights %v; want the artifact as a volume", len(set.Images), set.WeightsArgs)
	}
	reg.Stop()
	vols, err := warm.Volumes(ctx, set, nil, t.TempDir(), nil)
	if err != nil {
		t.Fatalf("volume after the registry went away: %v (fetched twice?)", err)
	}
	if len(vols) != 1 || len(vols[0].Manifest.Files) != 1 || !strings.Contains(vols[0].Resolved.Ref, "@sha256:") {
		t.Fatalf("volumes %+v", vols)
	}
}
