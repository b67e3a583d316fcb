package containerd_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/containerd"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/targets"
)

// TestWarmUnpackRefusesSparse (issue 34 N7), from the CLI's side: `kiln
// warm --unpack` of an image whose layer is a few hundred bytes declaring
// a 2 GiB GNU-sparse file (the PAX form, which containerd's applier
// wrote densely; the old 'S' form, which it refused in its own words)
// fails at once in the entry rule's words and leaves no snapshot of it,
// whether layers are applied one at a time or ahead of their parents.
func TestWarmUnpackRefusesSparse(t *testing.T) {
	ctx := context.Background()
	ci := testdaemon.StartContainerd(t)
	reg := testimage.Registry(t)
	for form, tb := range map[string][]byte{"pax": testimage.SparsePAXTar("data/big", 2<<30), "gnu": testimage.SparseTar("data/big", 2<<30)} {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(tb)
		zw.Close()
		dg, _, _ := v1.SHA256(bytes.NewReader(gz.Bytes()))
		diffID, _, _ := v1.SHA256(bytes.NewReader(tb))
		base := testimage.Layer(t, []testimage.Entry{testimage.File("etc/os-release", []byte("ID="+form+"\n"))}, "gzip")
		ref := reg + "/hostile/sparse:" + form
		testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, base, testimage.Lying(gz.Bytes(), dg, diffID, types.OCILayer)))
		for _, conc := range []int{1, 3} {
			warmSparse(t, ctx, ci, ref, conc)
		}
	}
}

func warmSparse(t *testing.T, ctx context.Context, ci *testdaemon.Containerd, ref string, conc int) {
	tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{UnpackConcurrency: conc})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	c := tgt.(*containerd.Containerd)
	sn, err := c.PickSnapshotter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	set := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, ref)
	start := time.Now()
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{Unpack: true})
	if err == nil || rep.Ready || !strings.Contains(err.Error(), `"data/big" is a GNU sparse file`) {
		t.Fatalf("%s, concurrency %d: ready=%v err=%v, want the sparse entry refused", ref, conc, rep.Ready, err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("%s, concurrency %d: took %v", ref, conc, d)
	}
	var big int64
	snaps := c.Client().SnapshotService(sn)
	snaps.Walk(namespaces.WithNamespace(ctx, "default"), func(ctx context.Context, i snapshots.Info) error {
		if u, err := snaps.Usage(ctx, i.Name); err == nil {
			big = max(big, u.Size)
		}
		return nil
	})
	if big > 1<<30 {
		t.Errorf("%s, concurrency %d: a snapshot of %d bytes is left", ref, conc, big)
	}
}

// D12 with --unpack: the unpack is what proves a layer against its
// config's diff ID (warm leaves it the check rather than decoding the
// layer twice), so an image whose config lies about a layer fails the
// warm and is never recorded under its name, whether layers are applied
// one at a time or ahead of their parents.
func TestWarmUnpackRefusesDiffIDLie(t *testing.T) {
	ctx := context.Background()
	ci := testdaemon.StartContainerd(t)
	reg := testimage.Registry(t)
	good := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/os-release", []byte("ID=lie\n"))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("app/run", []byte("#!/bin/sh\n"))}, "gzip"))
	other, _ := v1.NewHash("sha256:" + strings.Repeat("ab", 32))
	ref := reg + "/hostile/diffid:lie"
	testimage.Push(t, ref, testimage.DiffIDLie(t, good, 1, other))
	for _, conc := range []int{1, 3} {
		tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{UnpackConcurrency: conc})
		if err != nil {
			t.Fatal(err)
		}
		set := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, ref)
		rep, err := warm.Warm(ctx, set, tgt, warm.Options{Unpack: true})
		if err == nil || rep.Ready || !strings.Contains(err.Error(), other.String()) {
			t.Fatalf("concurrency %d: ready=%v err=%v, want the lying diff ID named", conc, rep.Ready, err)
		}
		c := tgt.(*containerd.Containerd)
		if _, err := c.Client().ImageService().Get(namespaces.WithNamespace(ctx, "default"), ref); err == nil {
			t.Fatalf("concurrency %d: the image whose config lies was recorded as %s", conc, ref)
		}
		tgt.Close()
	}
}
