package warm

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
)

// TestOCILayoutVerifiesPresentBlobs: a blob of the right size is present
// only when its bytes verify: one corrupted in place after a warm, or put
// there by another tool, is reported missing by a dry run and fetched
// again by a warm, never READY (F11).
func TestOCILayoutVerifiesPresentBlobs(t *testing.T) {
	ctx := context.Background()
	f := pushFixture(t, false)
	src := fastSource()
	set := resolve(t, ctx, src, ResolveOptions{}, f.ref)
	dir := filepath.Join(t.TempDir(), "oci")
	tgt, err := NewOCILayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Another tool left a same-sized, wrong blob before kiln ever ran.
	small := set.find(f.small)
	if err := os.WriteFile(tgt.blobPath(small.Digest), make([]byte, small.Size), 0o644); err != nil {
		t.Fatal(err)
	}
	if rep, err := Warm(ctx, set, tgt, Options{}); err != nil || !rep.Ready || rep.blob(f.small).State != StateFetched {
		t.Fatalf("foreign blob: ready=%v state=%s err=%v", rep.Ready, rep.blob(f.small).State, err)
	}
	checkBlob(t, tgt, small.Digest)
	// Corrupt the large layer in place, keeping its size.
	big := set.find(f.big)
	fh, err := os.OpenFile(tgt.blobPath(big.Digest), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	fh.ReadAt(b, big.Size/2)
	b[0] ^= 0xff
	fh.WriteAt(b, big.Size/2)
	fh.Close()
	rep, err := Warm(ctx, set, tgt, Options{DryRun: true})
	if err != nil || rep.Ready || rep.blob(f.big).State != StateMissing {
		t.Fatalf("dry run over a corrupted blob: ready=%v state=%s err=%v", rep.Ready, rep.blob(f.big).State, err)
	}
	f.reg.ResetCounts()
	rep, err = Warm(ctx, set, tgt, Options{})
	if err != nil || !rep.Ready || rep.blob(f.big).State != StateFetched || f.reg.Served(f.big) != f.size {
		t.Fatalf("warm over a corrupted blob: ready=%v state=%s served=%d err=%v", rep.Ready, rep.blob(f.big).State, f.reg.Served(f.big), err)
	}
	checkBlob(t, tgt, big.Digest)
	// Verified blobs are not fetched again.
	f.reg.ResetCounts()
	if rep, err := Warm(ctx, set, tgt, Options{}); err != nil || !rep.Ready || f.reg.TotalServed() != 0 {
		t.Fatalf("rerun: ready=%v served=%d err=%v", rep.Ready, f.reg.TotalServed(), err)
	}
}

func checkBlob(t *testing.T, l *OCILayout, d digest.Digest) {
	t.Helper()
	b, err := os.ReadFile(l.blobPath(d))
	if err != nil || digest.FromBytes(b) != d {
		t.Fatalf("blob %s does not verify after the warm (%v)", d, err)
	}
}
