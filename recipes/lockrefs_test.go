package recipes

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRuntimeRefs(t *testing.T) {
	const amd, arm = "sha256:" + "aa" + "00000000000000000000000000000000000000000000000000000000000000", "sha256:bb00000000000000000000000000000000000000000000000000000000000000"
	l := &Lock{BaseImages: map[string]LockedImage{
		"devel":   {Ref: "nvidia/cuda:12.4.1-devel-debian13", Platforms: map[string]string{"linux/amd64": arm}},
		"runtime": {Ref: "127.0.0.1:5000/nvidia/cuda:12.4.1-base-debian13", Platforms: map[string]string{"linux/amd64": amd}},
	}}
	refs, err := l.RuntimeRefs("kiln.lock", "linux/amd64")
	if err != nil || len(refs) != 1 || refs[0] != "127.0.0.1:5000/nvidia/cuda@"+amd {
		t.Fatalf("refs %v, %v; want only the runtime base by its amd64 manifest", refs, err)
	}
	if _, err := l.RuntimeRefs("kiln.lock", "linux/arm64"); err == nil || !strings.Contains(err.Error(), "base_images.runtime") || !strings.Contains(err.Error(), "field platforms") {
		t.Fatalf("missing platform: %v", err)
	}
	delete(l.BaseImages, "runtime")
	if _, err := l.RuntimeRefs("kiln.lock", "linux/amd64"); err == nil || !strings.Contains(err.Error(), "no runtime image") {
		t.Fatalf("no runtime base: %v", err)
	}
}

// TestReadLockDigestsTheBytesRead: the lock digest a build records is the
// sha256 of the very bytes ReadLock decoded (one read, no second open
// that could see another file), and a marshalled lock does not carry it.
func TestReadLockDigestsTheBytesRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kiln.lock")
	l := &Lock{LockVersion: LockVersion, Plan: &Plan{CUDA: "12.8.1"}}
	if err := WriteLock(p, l); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadLock(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("sha256:%x", sha256.Sum256(b)); got.FileDigest != want {
		t.Fatalf("FileDigest = %q, want %q", got.FileDigest, want)
	}
	out, err := got.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, b) {
		t.Fatalf("a read lock marshals to other bytes:\n%s\nwant\n%s", out, b)
	}
}

// lock --check names the plan's fields that changed (it said "the
// resolved plan changed (other fields)") (issue 36 item 8).
func TestStaleNamesChangedFields(t *testing.T) {
	torch := "2.6.0"
	old := &Plan{Name: "x", CUDA: "12.4.1", Torch: &torch, CUDAArchs: []string{"8.0"}}
	cur := *old
	cur.CUDAArchs = []string{"8.0", "9.0"}
	if got := diffPlan(old, &cur); got != "fields cuda_archs" {
		t.Errorf("diffPlan = %q, want the field named", got)
	}
}
