package containerd

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
)

// hdr is one tar entry of a staged-unpack fixture layer, with the
// attributes testimage.Entry has no room for.
type hdr struct {
	name     string
	typ      byte
	mode     int64
	uid, gid int
	body     []byte
	link     string
}

// gzLayer is a gzip layer of hs with honest digest and diff ID.
func gzLayer(t *testing.T, hs ...hdr) v1.Layer {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	epoch := time.Unix(1700000000, 0)
	for _, h := range hs {
		typ := h.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := h.mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		th := &tar.Header{Name: h.name, Typeflag: typ, Mode: mode, Uid: h.uid, Gid: h.gid, Linkname: h.link, ModTime: epoch, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			th.Size = int64(len(h.body))
		}
		if err := tw.WriteHeader(th); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write(h.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw.Bytes())
	zw.Close()
	dg := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(gz.Bytes()))}
	diff := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(raw.Bytes()))}
	return testimage.Lying(gz.Bytes(), dg, diff, types.OCILayer)
}

// stagedFixture is an image whose upper layers need what a staged apply
// must get right without its parent: whiteouts and an opaque directory
// (overlay's own representation), and entries in directories the layer
// does not declare, whose owner and mode come from the layers below
// (archive.mkparent), including one that no lower layer has (0755) and one
// replaced by a file below. The top layer is large and arrives slowly, so
// it is applied while it downloads and before the middle one is committed.
func stagedFixture(t *testing.T) (*warmtest.Registry, string, []v1.Layer) {
	t.Helper()
	reg := warmtest.NewRegistry(t)
	base := testimage.RunnableLayer(t)
	lower := gzLayer(t,
		hdr{name: "etc/", typ: tar.TypeDir, mode: 0o711},
		hdr{name: "etc/gone", body: []byte("deleted above")},
		hdr{name: "etc/kept", body: []byte("kept")},
		hdr{name: "opt/", typ: tar.TypeDir},
		hdr{name: "opt/hidden", body: []byte("hidden by the opaque dir above")},
		hdr{name: "srv/", typ: tar.TypeDir, mode: 0o750, uid: 1000, gid: 1001},
		hdr{name: "srv/old", body: []byte("old")},
		hdr{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		hdr{name: "var/", typ: tar.TypeDir},
		hdr{name: "var/lib/", typ: tar.TypeDir, mode: 0o700, uid: 7, gid: 7},
		hdr{name: "data", body: []byte("a file here, a directory above")},
	)
	middle := gzLayer(t,
		hdr{name: "etc/.wh.gone"},
		hdr{name: "opt/", typ: tar.TypeDir},
		hdr{name: "opt/.wh..wh..opq"},
		hdr{name: "opt/new", body: []byte("new")},
		hdr{name: "srv/child", body: []byte("in an undeclared dir owned by 1000")},
		hdr{name: "tmp/x", body: []byte("in sticky /tmp")},
		hdr{name: "var/lib/app/state/db", body: []byte("two undeclared levels, one of them below")},
		hdr{name: "data/inside", body: []byte("the file below is replaced")},
		hdr{name: "usr/share/doc/new", body: []byte("no lower layer has usr")},
		hdr{name: "opt/link", typ: tar.TypeLink, link: "opt/new"},
		hdr{name: "opt/sym", typ: tar.TypeSymlink, link: "../etc/kept"},
	)
	big := make([]byte, 4<<20)
	rand.New(rand.NewSource(3)).Read(big)
	top := gzLayer(t,
		hdr{name: "srv/deeper/blob", body: big},
		hdr{name: "etc/.wh.kept"},
	)
	img := warmtest.WithCmd(t, testimage.Image(t, testimage.Config{}, base, lower, middle, top), "/bin/true")
	ref := reg.Host + "/kiln-warm/staged:v1"
	testimage.Push(t, ref, img)
	return reg, ref, []v1.Layer{base, lower, middle, top}
}

// layerTree describes a snapshot's own directory: per path its type,
// mode, owner, size, content, link target, device and xattrs; the
// directories' mtimes are left out (an undeclared directory's is the time
// of the apply on either path).
func layerTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(dir, p)
		line := fmt.Sprintf("%s %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %d %x nlink=%d mtime=%d", len(b), sha256.Sum256(b), st.Nlink, fi.ModTime().Unix())
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			line += " -> " + l
		case fi.Mode()&fs.ModeCharDevice != 0:
			line += fmt.Sprintf(" rdev=%d", st.Rdev)
		}
		keys, err := listXattrs(p)
		if err != nil {
			return err
		}
		slices.Sort(keys)
		for _, k := range keys {
			v, _ := getXattr(p, k)
			line += fmt.Sprintf(" %s=%q", k, v)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// layerDirs returns the directories of chainID's layers, bottom first,
// read from an overlay view of it.
func layerDirs(t *testing.T, sn snapshots.Snapshotter, ctx context.Context, chainID string) []string {
	t.Helper()
	key := "test-view-" + chainID
	mounts, err := sn.View(ctx, key, chainID)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Remove(ctx, key)
	var lowers []string
	for _, o := range mounts[0].Options {
		if v, found := strings.CutPrefix(o, "lowerdir="); found {
			lowers = strings.Split(v, ":")
		}
	}
	if len(mounts) != 1 || len(lowers) == 0 {
		t.Fatalf("view of %s: mounts %v", chainID, mounts)
	}
	slices.Reverse(lowers)
	return lowers
}

// kiln's --unpack, one layer at a time and with layers applied ahead of
// their parents, gives every layer snapshot exactly the directory
// containerd's own pull gives it (whiteouts, opaque directory, undeclared
// parents' owner and mode from below, hard links), under the same chain
// IDs; containerd's pull then finds every snapshot, and `ctr run` starts.
func TestWarmStagedUnpackMatchesPull(t *testing.T) {
	ctx := context.Background()
	nctx := namespaces.WithNamespace(ctx, "default")
	reg, ref, ls := stagedFixture(t)
	var diffs []digest.Digest
	for _, l := range ls {
		h, err := l.DiffID()
		if err != nil {
			t.Fatal(err)
		}
		diffs = append(diffs, digest.Digest(h.String()))
	}
	top := identity.ChainID(diffs).String()

	// containerd's own unpack, for reference.
	ref0 := testdaemon.StartContainerd(t)
	sn := ref0.Snapshotter(t)
	if sn != "overlayfs" {
		t.Skipf("snapshotter %s: layers are not independent directories", sn)
	}
	if out, err := ref0.Ctr(t, append(ref0.PullArgs(), "--plain-http", "--snapshotter", sn, ref)...); err != nil {
		t.Fatalf("ctr images pull: %v\n%s", err, out)
	}
	c0, err := Open(ctx, ref0.Socket, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close()
	var want [][]string
	for _, d := range layerDirs(t, c0.c.SnapshotService(sn), nctx, top) {
		want = append(want, layerTree(t, d))
	}

	for _, tc := range []struct {
		name        string
		concurrency int
		staged      bool
	}{
		{"one at a time", 1, false},
		{"staged", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ci := testdaemon.StartContainerd(t)
			tgt, err := Open(ctx, ci.Socket, Options{Ingest: IngestDirect, UnpackConcurrency: tc.concurrency})
			if err != nil {
				t.Fatal(err)
			}
			defer tgt.Close()
			c := tgt
			src := warmtest.FastSource()
			set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, ref)
			dg, _ := ls[3].Digest()
			reg.Slow(dg.String(), 2*time.Millisecond)
			defer reg.Slow(dg.String(), 0)
			rep, err := warm.Warm(ctx, set, tgt, warm.Options{Unpack: true, Log: t.Logf})
			if err != nil || !rep.Ready || !rep.Unpacked {
				t.Fatalf("ready=%v unpacked=%v err=%v", rep.Ready, rep.Unpacked, err)
			}
			trace, mode, why := c.UnpackTrace()
			if (mode != stageNone) != tc.staged {
				t.Fatalf("stage mode %q (%s), want staged=%v", mode, why, tc.staged)
			}
			if _, _, fellBack, last := c.Streamed(); fellBack != 0 {
				t.Fatalf("%d in-process applies fell back (last: %v)", fellBack, last)
			}
			for i, l := range trace {
				if l.How == warm.HowDaemon || l.How == warm.HowPresent {
					t.Errorf("layer %d: %s, want applied in-process", i, l.How)
				}
				if tc.staged && i > 0 && !l.Staged {
					t.Errorf("layer %d was not applied ahead of its parent", i)
				}
			}
			snaps := c.c.SnapshotService(sn)
			var names []string
			snaps.Walk(nctx, func(_ context.Context, i snapshots.Info) error {
				names = append(names, i.Name)
				return nil
			})
			var chains []string
			for i := range diffs {
				chains = append(chains, identity.ChainID(diffs[:i+1]).String())
			}
			slices.Sort(names)
			slices.Sort(chains)
			if !slices.Equal(names, chains) {
				t.Fatalf("snapshots %v, want the chain IDs %v and nothing else", names, chains)
			}
			for i, d := range layerDirs(t, snaps, nctx, top) {
				if got := layerTree(t, d); !slices.Equal(got, want[i]) {
					t.Errorf("layer %d differs from containerd's unpack:\n got %q\nwant %q", i, got, want[i])
				}
			}
			// The blobs' uncompressed labels are set, as containerd's
			// unpack sets them.
			for i, l := range ls {
				h, _ := l.Digest()
				info, err := c.cs.Info(nctx, digest.Digest(h.String()))
				if err != nil || info.Labels["containerd.io/uncompressed"] != diffs[i].String() {
					t.Errorf("layer %d: uncompressed label %q (%v)", i, info.Labels["containerd.io/uncompressed"], err)
				}
			}
			reg.ResetCounts()
			if out, err := ci.Ctr(t, append(ci.PullArgs(), "--plain-http", "--snapshotter", sn, ref)...); err != nil {
				t.Fatalf("ctr images pull: %v\n%s", err, out)
			}
			if n := reg.TotalServed(); n != 0 {
				t.Errorf("ctr pull after the warm read %d blob bytes", n)
			}
			if out, err := ci.Ctr(t, "run", "--rm", "--snapshotter", sn, ref, "kiln-staged-"+fmt.Sprint(tc.concurrency), "/bin/true"); err != nil {
				t.Fatalf("ctr run: %v\n%s", err, out)
			}
		})
	}
}

func TestDirRecorderImplicit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		want    []string
	}{
		{"declared parents", []tar.Header{{Name: "a/", Typeflag: tar.TypeDir}, {Name: "a/f"}}, nil},
		{"undeclared parents", []tar.Header{{Name: "a/b/c/f"}}, []string{"a", "a/b", "a/b/c"}},
		{"declared after its entries", []tar.Header{{Name: "a/b/f"}, {Name: "./a/", Typeflag: tar.TypeDir}}, []string{"a/b"}},
		{"whiteouts need their dir", []tar.Header{{Name: "etc/.wh.gone"}, {Name: "opt/.wh..wh..opq"}}, []string{"etc", "opt"}},
		{"top level only", []tar.Header{{Name: "f"}, {Name: "./g"}, {Name: "d/", Typeflag: tar.TypeDir}}, nil},
		{"unclean names", []tar.Header{{Name: "./x/../y//z/f"}}, []string{"y", "y/z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := dirRecorder{declared: map[string]bool{}, needed: map[string]bool{}}
			for _, h := range tc.entries {
				if ok, err := rec.see(&h); !ok || err != nil {
					t.Fatalf("see(%s) = %v, %v: the recorder must not filter", h.Name, ok, err)
				}
			}
			if got := rec.implicit(); !slices.Equal(got, tc.want) {
				t.Fatalf("implicit = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestExchangeDirs(t *testing.T) {
	mk := func(t *testing.T, files ...string) (staged, upper string) {
		root := t.TempDir()
		staged = filepath.Join(root, "snapshots", "1", "fs")
		upper = filepath.Join(root, "snapshots", "2", "fs")
		for _, d := range []string{staged, upper} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(root, f), []byte(f), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		os.WriteFile(filepath.Join(staged, "layer-file"), []byte("x"), 0o644)
		return staged, upper
	}
	for _, tc := range []struct {
		name    string
		files   []string
		swap    func(staged, upper string) (string, string)
		wantErr string
	}{
		{name: "moves the layer, leaves the empty dir"},
		{name: "upper not empty", files: []string{"snapshots/2/fs/x"}, wantErr: "not empty"},
		{name: "not two snapshots of one snapshotter", swap: func(s, u string) (string, string) {
			return s, filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(u))), "fs")
		}, wantErr: "not two snapshots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			staged, upper := mk(t, tc.files...)
			if tc.swap != nil {
				staged, upper = tc.swap(staged, upper)
				os.MkdirAll(upper, 0o755)
			}
			if err := os.Chmod(upper, 0o711); err != nil {
				t.Fatal(err)
			}
			err := exchangeDirs(staged, upper)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if _, serr := os.Stat(filepath.Join(staged, "layer-file")); serr != nil {
					t.Fatalf("a refused exchange moved the layer: %v", serr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(upper, "layer-file")); err != nil {
				t.Fatalf("layer not in place: %v", err)
			}
			if fi, err := os.Stat(upper); err != nil || fi.Mode().Perm() != 0o711 {
				t.Fatalf("upper mode %v (%v), want containerd's 0711", fi.Mode(), err)
			}
			ents, err := os.ReadDir(staged)
			if err != nil || len(ents) != 0 {
				t.Fatalf("staged dir after the exchange: %v %v, want empty", ents, err)
			}
		})
	}
}
