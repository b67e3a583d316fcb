package containerd

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
)

// erofsImage is the tar entries as a native EROFS layer.
func erofsImage(t *testing.T, entries []testimage.Entry) []byte {
	t.Helper()
	return erofsImageFromTar(t, testimage.Tar(t, entries))
}

// erofsImageFromTar is tarball as a native EROFS layer, as kiln's
// --format erofs publishes one (layers/erofs, lz4hc inside).
func erofsImageFromTar(t *testing.T, tarball []byte) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "layer.erofs")
	if err := erofs.ConvertFile(context.Background(), bytes.NewReader(tarball), out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// layerTar is l's uncompressed tar.
func layerTar(t *testing.T, l v1.Layer) []byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const mediaTypeErofs = types.MediaType(layers.ErofsMediaType)

// startErofsContainerd starts containerd 2.x with the EROFS snapshotter
// and differ as scripts/containerd2.sh erofs-config writes them (cache:
// its layer_content_caches directory, or "" for none).
func startErofsContainerd(t *testing.T, cache string, opts ...testdaemon.Option) *testdaemon.Containerd {
	t.Helper()
	testdaemon.SkipShort(t)
	t.Setenv("KILN_CONTAINERD_BIN", testdaemon.Containerd2Bin(t))
	testkit.RequireErofs(t, "KILN_REQUIRE_CONTAINERD")
	script, err := testdaemon.RepoFile("scripts/containerd2.sh")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{script, "erofs-config"}
	if cache != "" {
		args = append(args, cache)
	}
	conf, err := exec.Command("bash", args...).Output()
	if err != nil {
		t.Fatalf("containerd2.sh erofs-config: %v", err)
	}
	cd := testdaemon.StartContainerd(t, append([]testdaemon.Option{testdaemon.ExtraConfig("\n" + string(conf))}, opts...)...)
	if out, _ := cd.Ctr(t, "plugins", "ls"); !erofsLoaded(out) {
		t.Fatalf("the EROFS snapshotter did not load:\n%s", out)
	}
	return cd
}

func erofsLoaded(plugins string) bool {
	for _, l := range strings.Split(plugins, "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && f[0] == "io.containerd.snapshotter.v1" && f[1] == "erofs" && f[len(f)-1] == "ok" {
			return true
		}
	}
	return false
}

// The app's files in two layers: the second deletes a file of the first
// (a whiteout), which the container must not see.
func erofsAppLayers(t *testing.T) (base, app []testimage.Entry) {
	base = []testimage.Entry{testimage.File("etc/gone", []byte("deleted above")), testimage.File("etc/keep", []byte("kept"))}
	app = []testimage.Entry{testimage.File("etc/hello", []byte("hello from erofs")), testimage.Whiteout("etc/gone")}
	return base, app
}

// kiln warm --unpack into containerd's EROFS snapshotter, for an image of
// native EROFS layers (auto picks erofs: only it mounts them) and for a
// gzip image (converted once by mkfs.erofs): every layer's snapshot holds
// its layer.erofs, written by kiln while it downloaded, under containerd's
// own chain IDs; `ctr run --snapshotter erofs` reads the files (whiteout
// applied) with the registry gone. Then a layer's EROFS image is
// corrupted in place: the next warm refuses to call the host ready.
func TestWarmErofsSnapshotter(t *testing.T) {
	ctx := context.Background()
	cd := startErofsContainerd(t, "")
	reg := warmtest.NewRegistry(t)
	host := testimage.HostLayer(t, "/bin/sh", "/bin/cat", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6")
	hostTar := layerTar(t, host)
	base, app := erofsAppLayers(t)
	native := testimage.Image(t, testimage.Config{},
		testimage.RawLayer(erofsImageFromTar(t, hostTar), mediaTypeErofs),
		testimage.RawLayer(erofsImage(t, base), mediaTypeErofs),
		testimage.RawLayer(erofsImage(t, app), mediaTypeErofs))
	gz := testimage.Image(t, testimage.Config{}, host, testimage.Layer(t, base, "gzip"), testimage.Layer(t, app, "gzip"))
	for _, tc := range []struct {
		name, snapshotter string
		img               v1.Image
	}{
		{"native EROFS layers, auto", "auto", native},
		{"gzip layers converted", SnapshotterErofs, gz},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := reg.Host + "/kiln-erofs/" + strings.Fields(tc.name)[0] + ":v1"
			testimage.Push(t, ref, tc.img)
			tgt, err := Open(ctx, cd.Socket, Options{Snapshotter: tc.snapshotter})
			if err != nil {
				t.Fatal(err)
			}
			defer tgt.Close()
			set := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, ref)
			rep, err := warm.Warm(ctx, set, tgt, warm.Options{Unpack: true})
			if err != nil || !rep.Ready || !rep.Unpacked {
				t.Fatalf("ready=%v unpacked=%v err=%v", rep.Ready, rep.Unpacked, err)
			}
			c := tgt
			if c.Snapshotter() != SnapshotterErofs {
				t.Fatalf("unpacked into %s", c.Snapshotter())
			}
			if tr, _, _ := c.UnpackTrace(); len(tr) != 3 || tr[0].How == warm.HowDaemon || tr[0].How == warm.HowPresent {
				t.Fatalf("trace %+v: want 3 layers written by kiln", tr)
			}
			// Each snapshot is committed under containerd's chain ID and
			// holds an EROFS image that hashes to what kiln recorded.
			cf, err := tc.img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			var chain []digest.Digest
			sn := c.c.SnapshotService(SnapshotterErofs)
			nctx := namespaces.WithNamespace(ctx, "default")
			var infos []snapshots.Info
			for _, d := range cf.RootFS.DiffIDs {
				chain = append(chain, digest.Digest(d.String()))
				info, err := sn.Stat(nctx, identity.ChainID(chain).String())
				if err != nil {
					t.Fatalf("snapshot of layer %d: %v", len(chain), err)
				}
				p := info.Labels[labelErofsPath]
				if filepath.Base(p) != "layer.erofs" {
					t.Fatalf("snapshot %s: EROFS image at %q", info.Name, p)
				}
				if sum, err := hashFile(p); err != nil || sum.String() != info.Labels[labelErofsDigest] {
					t.Fatalf("%s: %v %v, recorded %s", p, sum, err, info.Labels[labelErofsDigest])
				}
				infos = append(infos, info)
			}
			// A native layer's image is the blob itself: one read from the
			// committed blob is that file, hard-linked (no copy, no hash).
			if tc.snapshotter == "auto" {
				if got := infos[2].Labels[labelErofsDigest]; got != cf.RootFS.DiffIDs[2].String() {
					t.Fatalf("native layer's image is %s, the blob %s", got, cf.RootFS.DiffIDs[2])
				}
				tr, _, _ := c.UnpackTrace()
				root, _ := c.Direct()
				for i, l := range tr {
					if l.How != warm.HowLocal {
						continue
					}
					bi, err1 := os.Stat(filepath.Join(root, "blobs", "sha256", l.Digest.Encoded()))
					li, err2 := os.Stat(infos[i].Labels[labelErofsPath])
					if err1 != nil || err2 != nil || !os.SameFile(bi, li) {
						t.Errorf("layer %d (%s, from the committed blob): its layer.erofs is not the blob file hard-linked (%v %v)", i, l.Digest, err1, err2)
					}
				}
			}
			reg.ResetCounts()
			out, err := cd.RunOutput(t, SnapshotterErofs, ref, "kiln-erofs-"+strings.Fields(tc.name)[0], nil, "/bin/cat", "/etc/hello", "/etc/keep")
			if err != nil || out != "hello from erofskept" {
				t.Fatalf("ctr run: %v\n%q", err, out)
			}
			if out, err := cd.Ctr(t, "run", "--rm", "--snapshotter", SnapshotterErofs, ref, "kiln-erofs-wh", "/bin/cat", "/etc/gone"); err == nil {
				t.Fatalf("the whiteout did not hide /etc/gone: %q", out)
			}
			if n := reg.TotalServed(); n != 0 {
				t.Fatalf("ctr run fetched %d bytes", n)
			}

			// containerd's own pull into erofs (its transfer service, as
			// erofs-config sets it up) finds every blob and snapshot.
			out, err = cd.Ctr(t, append(cd.PullArgs(), "--plain-http", "--snapshotter", SnapshotterErofs, ref)...)
			if err != nil {
				t.Fatalf("ctr images pull: %v\n%s", err, out)
			}
			if n := reg.TotalServed(); n != 0 {
				t.Fatalf("ctr pull after the warm fetched %d bytes", n)
			}
			// A warm again finds everything present and ready.
			rep, err = warm.Warm(ctx, set, tgt, warm.Options{Unpack: true})
			if err != nil || !rep.Ready {
				t.Fatalf("second warm: ready=%v err=%v", rep.Ready, err)
			}
			// The base layer's image corrupted in place (same size).
			p := infos[1].Labels[labelErofsPath]
			corruptFile(t, p)
			rep, err = warm.Warm(ctx, set, tgt, warm.Options{Unpack: true})
			if err == nil || (rep != nil && rep.Ready) || !strings.Contains(err.Error(), "corrupted") {
				t.Fatalf("warm after corrupting %s: ready=%v err=%v", p, rep != nil && rep.Ready, err)
			}
		})
	}
}

// corruptFile flips bytes in the middle of path (its size unchanged).
func corruptFile(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	off := fi.Size() / 2
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// --erofs-cache: a tar layer is converted once into the snapshotter's
// layer content cache, by diff ID in containerd's layout; the snapshots
// are served from there (containerd records the cache as their blob
// source), and a container reads the files.
func TestWarmErofsLayerCache(t *testing.T) {
	ctx := context.Background()
	cache := filepath.Join(t.TempDir(), "erofs-cache")
	cd := startErofsContainerd(t, cache)
	reg := warmtest.NewRegistry(t)
	host := testimage.HostLayer(t, "/bin/sh", "/bin/cat", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6")
	base, app := erofsAppLayers(t)
	img := testimage.Image(t, testimage.Config{}, host, testimage.Layer(t, base, "gzip"), testimage.Layer(t, app, "zstd"))
	ref := reg.Host + "/kiln-erofs/cache:v1"
	testimage.Push(t, ref, img)
	tgt, err := Open(ctx, cd.Socket, Options{Snapshotter: SnapshotterErofs, ErofsCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	set := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, ref)
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{Unpack: true})
	if err != nil || !rep.Ready || !rep.Unpacked {
		t.Fatalf("ready=%v unpacked=%v err=%v", rep.Ready, rep.Unpacked, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	sn := tgt.c.SnapshotService(SnapshotterErofs)
	nctx := namespaces.WithNamespace(ctx, "default")
	var chain []digest.Digest
	for _, d := range cf.RootFS.DiffIDs {
		diffID := digest.Digest(d.String())
		chain = append(chain, diffID)
		want := erofsCacheBlobPath(cache, diffID)
		if _, err := os.Stat(want); err != nil {
			t.Fatalf("layer %s not in the cache: %v", diffID, err)
		}
		info, err := sn.Stat(nctx, identity.ChainID(chain).String())
		if err != nil {
			t.Fatal(err)
		}
		if info.Labels["io.containerd.erofs.v1/blob.source"] != "cache" || info.Labels["io.containerd.erofs.v1/blob.ref"] != want || info.Labels[labelErofsPath] != want {
			t.Fatalf("snapshot %s is not served from the cache: %v", info.Name, info.Labels)
		}
	}
	out, err := cd.RunOutput(t, SnapshotterErofs, ref, "kiln-erofs-cache", nil, "/bin/cat", "/etc/hello", "/etc/keep")
	if err != nil || out != "hello from erofskept" {
		t.Fatalf("ctr run: %v\n%q", err, out)
	}
}

// A layer the registry serves corrupted is never committed into the EROFS
// snapshotter: the decoded stream's diff ID does not match (or the gzip
// breaks), containerd refuses the blob, the warm fails, and no snapshot
// of the layer (nor an extraction left half-done) remains.
func TestWarmErofsCorruptLayer(t *testing.T) {
	ctx := context.Background()
	cd := startErofsContainerd(t, "")
	f := warmtest.PushFixture(t, true)
	tgt, err := Open(ctx, cd.Socket, Options{Snapshotter: SnapshotterErofs, Ingest: IngestDirect})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	set := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, f.Ref)
	f.Reg.Corrupt(f.Big, true)
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{Unpack: true, Attempts: 2})
	if err == nil || rep.Ready {
		t.Fatalf("corrupt layer: ready=%v err=%v", rep.Ready, err)
	}
	cfg, _ := f.Img.ConfigFile()
	top := identity.ChainID([]digest.Digest{digest.Digest(cfg.RootFS.DiffIDs[0].String()), digest.Digest(cfg.RootFS.DiffIDs[1].String())})
	var names []string
	nctx := namespaces.WithNamespace(ctx, "default")
	tgt.c.SnapshotService(SnapshotterErofs).Walk(nctx, func(_ context.Context, i snapshots.Info) error {
		names = append(names, i.Name)
		return nil
	})
	for _, n := range names {
		if n == top.String() || strings.Contains(n, "extract-") {
			t.Fatalf("snapshot %s left after a corrupt layer (all: %v)", n, names)
		}
	}
}

// scripts/containerd2.sh erofs-config is a working EROFS setup on its
// own: containerd's pull into the erofs snapshotter converts a gzip image
// (its differ; the bench's "containerd's own conversion" row) and a
// container reads the files, the whiteout applied.
func TestContainerdErofsConfig(t *testing.T) {
	cd := startErofsContainerd(t, "")
	reg := warmtest.NewRegistry(t)
	host := testimage.HostLayer(t, "/bin/sh", "/bin/cat", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6")
	base, app := erofsAppLayers(t)
	ref := reg.Host + "/kiln-erofs/ctr:v1"
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, host, testimage.Layer(t, base, "gzip"), testimage.Layer(t, app, "gzip")))
	if out, err := cd.Ctr(t, append(cd.PullArgs(), "--plain-http", "--snapshotter", SnapshotterErofs, ref)...); err != nil {
		t.Fatalf("ctr images pull: %v\n%s", err, out)
	}
	out, err := cd.RunOutput(t, SnapshotterErofs, ref, "ctr-erofs", nil, "/bin/cat", "/etc/hello", "/etc/keep")
	if err != nil || out != "hello from erofskept" {
		t.Fatalf("ctr run: %v\n%q", err, out)
	}
	layers, _ := filepath.Glob(filepath.Join(cd.Root, "io.containerd.snapshotter.v1.erofs", "snapshots", "*", "layer.erofs"))
	if len(layers) != 3 {
		t.Fatalf("%d layer.erofs files, want 3: %v", len(layers), layers)
	}
}
