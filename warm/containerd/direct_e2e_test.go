package containerd_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/containerd"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/targets"
)

// The content root comes from --containerd-root (daemon root or content
// directory) or from the daemon; a root that is writable here but is not
// where the daemon's ingests appear (a same-named path of a remote host)
// falls back to the gRPC path under auto and is an error under direct.
func TestWarmContainerdIngestRoot(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	src := warmtest.FastSource()
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f.Ref)
	content := func(root string) string { return filepath.Join(root, "io.containerd.content.v1.content") }
	decoy := func(string) string {
		d := t.TempDir()
		if err := os.Mkdir(filepath.Join(d, "ingest"), 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	none := func(string) string { return "" }
	for _, tc := range []struct {
		name, ingest string
		root         func(daemonRoot string) string // --containerd-root
		direct       bool
		wantErr      string // at open or warm
	}{
		{name: "auto from introspection", ingest: containerd.IngestAuto, root: none, direct: true},
		{name: "daemon root given", ingest: containerd.IngestDirect, root: func(r string) string { return r }, direct: true},
		{name: "content dir given", ingest: containerd.IngestDirect, root: content, direct: true},
		{name: "not a content store", ingest: containerd.IngestAuto, root: func(string) string { return t.TempDir() }, wantErr: "holds containerd's content store"},
		{name: "decoy root, auto falls back", ingest: containerd.IngestAuto, root: decoy},
		{name: "decoy root, direct refuses", ingest: containerd.IngestDirect, root: decoy, wantErr: "no ingest for"},
		{name: "grpc", ingest: containerd.IngestGRPC, root: none},
		{name: "bad mode", ingest: "fast", root: none, wantErr: "want auto, direct or grpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A fresh daemon per case: containerd shares content between
			// namespaces, so a blob warmed once is never written again.
			ci := testdaemon.StartContainerd(t)
			tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{Ingest: tc.ingest, ContainerdRoot: tc.root(ci.Root)})
			if err == nil {
				defer tgt.Close()
				var rep *warm.Report
				rep, err = warm.Warm(ctx, set, tgt, warm.Options{Attempts: 1})
				if err == nil && (!rep.Ready || rep.FetchedBytes != warmtest.Find(set, f.Big).Size+warmtest.Find(set, f.Small).Size) {
					t.Fatalf("ready=%v fetched=%d", rep.Ready, rep.FetchedBytes)
				}
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			root, why := tgt.(*containerd.Containerd).Direct()
			if want := content(ci.Root); (root == want) != tc.direct || (!tc.direct && root != "") {
				t.Fatalf("direct root %q (%s), want direct=%v", root, why, tc.direct)
			}
			if out, err := ci.Ctr(t, "images", "check"); err != nil || !strings.Contains(out, "complete") {
				t.Fatalf("ctr images check: %v\n%s", err, out)
			}
			// No ingest is left behind.
			if out, _ := ci.Ctr(t, "content", "active"); strings.Contains(out, "kiln-warm") {
				t.Fatalf("ingests left: %s", out)
			}
		})
	}
}

// --unpack applies a layer while later layers still download, gives the
// snapshots containerd's own chain IDs (ctr images pull finds them all and
// creates none), and a run interrupted mid-unpack resumes.
func TestWarmPipelinedUnpack(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, true)
	ci := testdaemon.StartContainerd(t)
	tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	c := tgt.(*containerd.Containerd)
	sn, err := c.PickSnapshotter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var diffIDs []digest.Digest
	for _, h := range cfg.RootFS.DiffIDs {
		diffIDs = append(diffIDs, digest.Digest(h.String()))
	}
	if len(diffIDs) != 2 {
		t.Fatalf("fixture has %d layers", len(diffIDs))
	}
	nctx := namespaces.WithNamespace(ctx, "default")
	snaps := c.Client().SnapshotService(sn)
	src := warmtest.FastSource()
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f.Ref)

	// The large (second) layer stalls after 1 MiB; meanwhile the first
	// layer's snapshot must appear. Then the run is killed.
	runCtx, cancel := context.WithCancel(ctx)
	var sawFirst bool
	f.Reg.StallAfter(f.Big, 1<<20, func() {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, err := snaps.Stat(nctx, diffIDs[0].String()); err == nil {
				sawFirst = true
				break
			}
		}
		cancel()
	})
	rep, err := warm.Warm(runCtx, set, tgt, warm.Options{Unpack: true})
	if err == nil || rep.Ready {
		t.Fatalf("interrupted run: ready=%v err=%v", rep.Ready, err)
	}
	if !sawFirst {
		t.Fatal("the first layer was not unpacked while the second was still downloading")
	}
	// The resumed run: the large layer arrives slowly (~1 s), so it is
	// applied from the ingest while it downloads.
	f.Reg.Slow(f.Big, 5*time.Millisecond)
	rep, err = warm.Warm(ctx, set, tgt, warm.Options{Unpack: true})
	if err != nil || !rep.Ready || !rep.Unpacked {
		t.Fatalf("resumed run: ready=%v unpacked=%v err=%v", rep.Ready, rep.Unpacked, err)
	}
	f.Reg.Slow(f.Big, 0)
	if applied, _, fellBack, why := c.Streamed(); applied < 1 || fellBack != 0 {
		t.Fatalf("layers applied while downloading: %d (fell back: %d: %v), want the large one", applied, fellBack, why)
	}
	want := []string{identity.ChainID(diffIDs[:1]).String(), identity.ChainID(diffIDs).String()}
	listSnaps := func() []string {
		var names []string
		if err := snaps.Walk(nctx, func(_ context.Context, i snapshots.Info) error {
			names = append(names, i.Name)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		return names
	}
	got := listSnaps()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		_, _, _, why := c.Streamed()
		t.Fatalf("snapshots %v, want the chain IDs %v (last stream error: %v)", got, want, why)
	}
	if out, err := ci.Ctr(t, "images", "check"); err != nil || !strings.Contains(out, "complete") {
		t.Fatalf("ctr images check: %v\n%s", err, out)
	}
	// containerd's own pull (which unpacks) reads no bytes and makes no
	// snapshot: kiln's are the ones it would have made.
	f.Reg.ResetCounts()
	if out, err := ci.Ctr(t, append(ci.PullArgs(), "--plain-http", "--snapshotter", sn, f.Ref)...); err != nil {
		t.Fatalf("ctr images pull: %v\n%s", err, out)
	}
	if n := f.Reg.TotalServed(); n != 0 {
		t.Errorf("ctr pull after the warm read %d blob bytes", n)
	}
	if after := listSnaps(); !slices.Equal(after, want) {
		t.Errorf("ctr pull changed the snapshots: %v, want %v", after, want)
	}
	if out, err := ci.Ctr(t, "run", "--rm", "--snapshotter", sn, f.Ref, "kiln-warm-pipe", "/bin/true"); err != nil {
		t.Fatalf("ctr run: %v\n%s", err, out)
	}
}

// A corrupted layer under --unpack: the stream's diff ID does not match
// (or the gzip breaks), the snapshot is never committed, containerd refuses
// the blob; the warm fails and leaves no snapshot of that layer.
func TestWarmPipelinedUnpackCorrupt(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, true)
	ci := testdaemon.StartContainerd(t)
	tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{Ingest: containerd.IngestDirect})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	c := tgt.(*containerd.Containerd)
	sn, err := c.PickSnapshotter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src := warmtest.FastSource()
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f.Ref)
	f.Reg.Corrupt(f.Big, true)
	f.Reg.Slow(f.Big, 5*time.Millisecond)
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{Unpack: true, Attempts: 2})
	if err == nil || rep.Ready {
		t.Fatalf("corrupt layer: ready=%v err=%v", rep.Ready, err)
	}
	cfg, _ := f.Img.ConfigFile()
	top := identity.ChainID([]digest.Digest{digest.Digest(cfg.RootFS.DiffIDs[0].String()), digest.Digest(cfg.RootFS.DiffIDs[1].String())})
	var names []string
	nctx := namespaces.WithNamespace(ctx, "default")
	c.Client().SnapshotService(sn).Walk(nctx, func(_ context.Context, i snapshots.Info) error {
		names = append(names, i.Name)
		return nil
	})
	for _, n := range names {
		if n == top.String() || strings.Contains(n, "extract-") {
			t.Fatalf("snapshot %s left after a corrupt layer (all: %v)", n, names)
		}
	}
	if ok, _ := tgt.(warm.Store).Has(ctx, warmtest.Find(set, f.Big)); ok {
		t.Fatal("corrupt blob committed")
	}
	// The stream was tried and refused.
	if _, _, fellBack, why := c.Streamed(); fellBack < 1 || why == nil {
		t.Fatalf("the corrupt layer was not streamed: fell back %d (%v); warm: %v", fellBack, why, err)
	}
}

// Direct ingests of large blobs open containerd's writer half-way, so the
// daemon hashes while the rest downloads. Whether it reached the end in
// time (a fast blob) or caught up first (a slow one: Commit re-opens), the
// blob commits verified; a corrupted one never does.
func TestWarmContainerdEarlyVerify(t *testing.T) {
	old := *containerd.EarlyMin
	*containerd.EarlyMin = 1 << 20
	defer func() { *containerd.EarlyMin = old }()
	for _, tc := range []struct {
		name    string
		slow    time.Duration
		corrupt bool
	}{
		{name: "fast"},
		{name: "slow", slow: 2 * time.Millisecond},
		{name: "corrupt", corrupt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := warmtest.PushFixture(t, false)
			ci := testdaemon.StartContainerd(t)
			tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{Ingest: containerd.IngestDirect})
			if err != nil {
				t.Fatal(err)
			}
			defer tgt.Close()
			c := tgt.(*containerd.Containerd)
			src := warmtest.FastSource()
			set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f.Ref)
			f.Reg.Slow(f.Big, tc.slow)
			f.Reg.Corrupt(f.Big, tc.corrupt)
			rep, err := warm.Warm(ctx, set, tgt, warm.Options{Attempts: 2})
			t.Logf("early opens: %d hashed the whole blob, %d caught up first", c.EarlyHits(), c.EarlyMisses())
			if c.EarlyHits()+c.EarlyMisses() == 0 {
				t.Fatal("no early open")
			}
			if tc.corrupt {
				if err == nil || rep.Ready {
					t.Fatalf("corrupt blob: ready=%v err=%v", rep.Ready, err)
				}
				if ok, _ := tgt.(warm.Store).Has(ctx, warmtest.Find(set, f.Big)); ok {
					t.Fatal("corrupt blob committed")
				}
				return
			}
			if err != nil || !rep.Ready {
				t.Fatalf("ready=%v err=%v", rep.Ready, err)
			}
			if out, err := ci.Ctr(t, "images", "check"); err != nil || !strings.Contains(out, "complete") {
				t.Fatalf("ctr images check: %v\n%s", err, out)
			}
		})
	}
}
