package containerd

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
)

// Only an unpack into the EROFS snapshotter takes an image's EROFS form:
// --snapshotter erofs, or auto when the daemon's snapshotter works (the
// live test below) outside the CRI's namespace; overlayfs or native never.
func TestErofsUnpackBySnapshotter(t *testing.T) {
	ctx := context.Background()
	for sn, want := range map[string]bool{SnapshotterErofs: true, "overlayfs": false, "native": false} {
		for _, ns := range []string{"default", criNamespace} {
			if got := (&Containerd{snapshotter: sn, ns: ns}).ErofsUnpack(ctx); got != want {
				t.Errorf("--snapshotter %s, namespace %s: ErofsUnpack = %v, want %v", sn, ns, got, want)
			}
		}
	}
	// auto in k8s.io: the CRI cannot say, or says overlayfs (no daemon
	// asked: the answer is set as criSnapshotter keeps it).
	for sn, err := range map[string]error{"": errors.New("no CRI plugin"), "overlayfs": nil} {
		c := &Containerd{snapshotter: "auto", ns: criNamespace}
		c.criOnce.Do(func() { c.criSn, c.criErr = sn, err })
		if c.ErofsUnpack(ctx) {
			t.Errorf("auto in k8s.io, CRI %q (%v): takes the EROFS form", sn, err)
		}
	}
}

// kiln warm REPO:TAG --unpack, --snapshotter auto, on a containerd whose
// EROFS snapshotter works: TAG names its EROFS form (kiln slim --format
// erofs publishes it so), so warm takes REPO:TAG-erofs, auto picks erofs,
// every layer's snapshot is the native EROFS image (no conversion), and a
// container runs from it. With --snapshotter overlayfs the same TAG is
// warmed as named.
func TestWarmErofsFormNamed(t *testing.T) {
	ctx := context.Background()
	cd := startErofsContainerd(t, "")
	reg := warmtest.NewRegistry(t)
	host := testimage.HostLayer(t, "/bin/sh", "/bin/cat", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6")
	ref := reg.Host + "/kiln-erofs/form:v1"
	pushErofsForm(t, ref, host)

	// overlayfs first, in a namespace of its own, as a dry run: the EROFS
	// form is not even looked at.
	ov, err := Open(ctx, cd.Socket, Options{Snapshotter: "overlayfs", Namespace: "kiln-overlay"})
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	rep, err := warm.Run(ctx, warm.RunOptions{Target: ov, Refs: testkit.Refs(t, ref),
		Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
		Options: warm.Options{Unpack: true, DryRun: true}})
	if err != nil || rep.Images[0].Form != "" || rep.Images[0].Note != "" {
		t.Fatalf("overlayfs: %v, image %+v", err, rep.Images)
	}

	tgt, err := Open(ctx, cd.Socket, Options{Snapshotter: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	rep, err = warm.Run(ctx, warm.RunOptions{Target: tgt, Refs: testkit.Refs(t, ref),
		Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
		Options: warm.Options{Unpack: true}})
	if err != nil || !rep.Ready || !rep.Unpacked {
		t.Fatalf("ready=%v unpacked=%v err=%v", rep != nil && rep.Ready, rep != nil && rep.Unpacked, err)
	}
	if im := rep.Images[0]; im.Form != warm.FormErofs || im.Source != ref+layers.ErofsTagSuffix || rep.Snapshotter != SnapshotterErofs {
		t.Fatalf("report %+v into %s: want %s%s into erofs", im, rep.Snapshotter, ref, layers.ErofsTagSuffix)
	}
	if tr, _, _ := tgt.UnpackTrace(); len(tr) != 3 {
		t.Fatalf("trace %+v: want 3 layers", tr)
	}
	out, err := cd.RunOutput(t, SnapshotterErofs, ref, "kiln-erofs-form", nil, "/bin/cat", "/etc/hello", "/etc/keep")
	if err != nil || !strings.Contains(out, "hello from erofs") {
		t.Fatalf("ctr run: %v\n%q", err, out)
	}
}

// pushErofsForm pushes the app (host, then erofsAppLayers' two layers)
// as kiln slim --format erofs publishes it: its native EROFS form at
// REF-erofs, then REF (gzip), whose manifest names that form.
func pushErofsForm(t *testing.T, ref string, host v1.Layer) {
	t.Helper()
	base, app := erofsAppLayers(t)
	native := testimage.Image(t, testimage.Config{},
		testimage.RawLayer(erofsImageFromTar(t, layerTar(t, host)), mediaTypeErofs),
		testimage.RawLayer(erofsImage(t, base), mediaTypeErofs),
		testimage.RawLayer(erofsImage(t, app), mediaTypeErofs))
	dg, err := native.Digest()
	if err != nil {
		t.Fatal(err)
	}
	testimage.Push(t, ref+layers.ErofsTagSuffix, native)
	testimage.Push(t, ref, layers.NameErofsForm(testimage.Image(t, testimage.Config{}, host, testimage.Layer(t, base, "gzip"), testimage.Layer(t, app, "gzip")), dg))
}
