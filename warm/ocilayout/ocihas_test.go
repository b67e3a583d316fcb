package ocilayout

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/opencontainers/go-digest"
)

// TestOCILayoutVerifiesPresentBlobs: a blob of the right size is present
// only when its bytes verify: one corrupted in place after a warm, or put
// there by another tool, is reported missing by a dry run and fetched
// again by a warm, never READY (F11).
func TestOCILayoutVerifiesPresentBlobs(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	src := warmtest.FastSource()
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f.Ref)
	dir := filepath.Join(t.TempDir(), "oci")
	tgt, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Another tool left a same-sized, wrong blob before kiln ever ran.
	small := warmtest.Find(set, f.Small)
	if err := os.WriteFile(tgt.blobPath(small.Digest), make([]byte, small.Size), 0o644); err != nil {
		t.Fatal(err)
	}
	if rep, err := warm.Warm(ctx, set, tgt, warm.Options{}); err != nil || !rep.Ready || warmtest.BlobOf(rep, f.Small).State != warm.StateFetched {
		t.Fatalf("foreign blob: ready=%v state=%s err=%v", rep.Ready, warmtest.BlobOf(rep, f.Small).State, err)
	}
	checkBlob(t, tgt, small.Digest)
	// Corrupt the large layer in place, keeping its size.
	big := warmtest.Find(set, f.Big)
	fh, err := os.OpenFile(tgt.blobPath(big.Digest), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	fh.ReadAt(b, big.Size/2)
	b[0] ^= 0xff
	fh.WriteAt(b, big.Size/2)
	fh.Close()
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{DryRun: true})
	if err != nil || rep.Ready || warmtest.BlobOf(rep, f.Big).State != warm.StateMissing {
		t.Fatalf("dry run over a corrupted blob: ready=%v state=%s err=%v", rep.Ready, warmtest.BlobOf(rep, f.Big).State, err)
	}
	f.Reg.ResetCounts()
	rep, err = warm.Warm(ctx, set, tgt, warm.Options{})
	if err != nil || !rep.Ready || warmtest.BlobOf(rep, f.Big).State != warm.StateFetched || f.Reg.Served(f.Big) != f.Size {
		t.Fatalf("warm over a corrupted blob: ready=%v state=%s served=%d err=%v", rep.Ready, warmtest.BlobOf(rep, f.Big).State, f.Reg.Served(f.Big), err)
	}
	checkBlob(t, tgt, big.Digest)
	// Verified blobs are not fetched again.
	f.Reg.ResetCounts()
	if rep, err := warm.Warm(ctx, set, tgt, warm.Options{}); err != nil || !rep.Ready || f.Reg.TotalServed() != 0 {
		t.Fatalf("rerun: ready=%v served=%d err=%v", rep.Ready, f.Reg.TotalServed(), err)
	}
}

func checkBlob(t *testing.T, l *OCILayout, d digest.Digest) {
	t.Helper()
	b, err := os.ReadFile(l.blobPath(d))
	if err != nil || digest.FromBytes(b) != d {
		t.Fatalf("blob %s does not verify after the warm (%v)", d, err)
	}
}
