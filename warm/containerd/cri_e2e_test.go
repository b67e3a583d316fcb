package containerd

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
)

// kiln warm REPO:TAG --unpack into the kubelet's namespace (k8s.io) with
// --snapshotter auto (what kiln warm --emit k8s pods run): kiln asks the
// CRI on containerd's socket which snapshotter its pods start on. A CRI on
// erofs: TAG's EROFS form (TAG names it) is taken into the EROFS
// snapshotter, and a tar-only image beside it goes there too (converted).
// A CRI on overlayfs: the same TAG is warmed as named, into overlayfs, and
// an image of EROFS layers is refused in words, not recorded for pods that
// could not mount it. Before, auto in k8s.io never took the EROFS form and
// unpacked tar-only images into overlayfs whatever the CRI's snapshotter.
func TestWarmCRISnapshotter(t *testing.T) {
	reg := warmtest.NewRegistry(t)
	host := testimage.HostLayer(t, "/bin/cat", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6")
	ref := reg.Host + "/kiln-cri/app:v1"
	pushErofsForm(t, ref, host)
	tarOnly := reg.Host + "/kiln-cri/tools:v1"
	testimage.Push(t, tarOnly, testimage.Image(t, testimage.Config{}, host, testimage.Layer(t, []testimage.Entry{testimage.File("etc/tools", []byte("tools"))}, "gzip")))

	for _, criSn := range []string{SnapshotterErofs, "overlayfs"} {
		t.Run(criSn, func(t *testing.T) {
			ctx := context.Background()
			// containerd 2.x takes a version 2 file's CRI snapshotter only
			// from a table that also has runtimes.
			cd := startErofsContainerd(t, "", testdaemon.EnableCRI(), testdaemon.ExtraConfig(fmt.Sprintf(`
[plugins."io.containerd.grpc.v1.cri"]
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = %q
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
`, criSn)))
			tgt, err := Open(ctx, cd.Socket, Options{Snapshotter: "auto", Namespace: criNamespace})
			if err != nil {
				t.Fatal(err)
			}
			defer tgt.Close()
			if sn, err := tgt.criSnapshotter(ctx); err != nil || sn != criSn {
				t.Fatalf("the CRI's snapshotter: %q, %v; want %s", sn, err, criSn)
			}
			run := func(refs ...string) (*warm.Report, error) {
				return warm.Run(ctx, warm.RunOptions{Target: tgt, Refs: testkit.Refs(t, refs...),
					Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
					Options: warm.Options{Unpack: true}})
			}
			rep, err := run(ref, tarOnly)
			if err != nil || !rep.Ready || !rep.Unpacked {
				t.Fatalf("warm: %v, report %+v", err, rep)
			}
			wantForm, wantSource := warm.FormErofs, ref+layers.ErofsTagSuffix
			if criSn != SnapshotterErofs {
				wantForm, wantSource = "", "" // as named
			}
			if im := rep.Images[0]; im.Form != wantForm || im.Source != wantSource || rep.Snapshotter != criSn {
				t.Fatalf("image %+v into %s: want form %q from %s into %s", im, rep.Snapshotter, wantForm, wantSource, criSn)
			}
			// Both images' snapshots are in the CRI's snapshotter.
			for _, r := range []string{ref, tarOnly} {
				img, err := tgt.c.GetImage(tgt.nsCtx(ctx), r)
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := img.IsUnpacked(tgt.nsCtx(ctx), criSn); err != nil || !ok {
					t.Fatalf("%s unpacked into %s: %v %v", r, criSn, ok, err)
				}
			}
			if criSn == SnapshotterErofs {
				return
			}
			// The EROFS form named directly, for a CRI that cannot mount it
			// (auto), or into overlayfs by name: refused, nothing recorded.
			for sn, want := range map[string]string{"auto": "CRI starts pods on the overlayfs snapshotter", "overlayfs": "--snapshotter overlayfs cannot unpack them"} {
				tgt, err := Open(ctx, cd.Socket, Options{Snapshotter: sn, Namespace: criNamespace})
				if err != nil {
					t.Fatal(err)
				}
				defer tgt.Close()
				_, err = warm.Run(ctx, warm.RunOptions{Target: tgt, Refs: testkit.Refs(t, ref+layers.ErofsTagSuffix),
					Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
					Options: warm.Options{Unpack: true}})
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("--snapshotter %s: warm of %s%s under an overlayfs CRI: %v", sn, ref, layers.ErofsTagSuffix, err)
				}
				if _, err := tgt.c.GetImage(tgt.nsCtx(ctx), ref+layers.ErofsTagSuffix); err == nil {
					t.Fatalf("--snapshotter %s: %s%s recorded", sn, ref, layers.ErofsTagSuffix)
				}
			}
		})
	}
}
