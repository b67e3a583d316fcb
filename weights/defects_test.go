package weights

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// F1: a partial longer than its blob (a previous run for another volume, a
// bad copy) must be cut to the blob's size before it is hashed and renamed:
// only the recorded bytes count, and no extra byte reaches the volume.
func TestPullTruncatesLongPartial(t *testing.T) {
	ctx := context.Background()
	large := testFile{"m/big.safetensors", body("long partial", 4<<20+3), 0o644}
	s := &rangeServer{blob: "sha256:" + hexOf(large.data)}
	res := publishBehind(t, s, []testFile{large})
	size := int64(len(large.data))
	for _, tc := range []struct {
		name string
		done rangeSet
	}{
		{"complete record", rangeSet{{0, size}}},
		{"half record", rangeSet{{0, 2 << 20}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, PartialDir), 0o755)
			part := filepath.Join(dir, PartialDir, hexOf(large.data)+".part")
			long := append(append([]byte(nil), large.data...), []byte("EXTRA BYTES PAST THE BLOB")...)
			if err := os.WriteFile(part, long, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := writeSidecar(part, size, tc.done); err != nil {
				t.Fatal(err)
			}
			if _, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{ChunkSize: 1 << 20}); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(filepath.Join(dir, "big.safetensors"))
			if err != nil || fi.Size() != size {
				t.Fatalf("committed file: %v %v, want %d bytes", fi, err, size)
			}
			if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
				t.Errorf("volume: %+v %v", rep, err)
			}
		})
	}
}

// F2: a volume whose marker is there but whose files are not (removed,
// truncated, rewritten) is healed by the next pull, not reported ready.
func TestPullHealsDamagedReadyVolume(t *testing.T) {
	ctx := context.Background()
	res, _ := publishLayout(t, modelFiles)
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, file string)
	}{
		{"missing", func(t *testing.T, file string) { os.Remove(file) }},
		{"truncated", func(t *testing.T, file string) { os.Truncate(file, 100) }},
		{"rewritten", func(t *testing.T, file string) {
			f, err := os.OpenFile(file, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte("tampered"), 1000)
			f.Close()
			// After the marker, whatever the clock's granularity.
			later := time.Now().Add(2 * time.Second)
			os.Chtimes(file, later, later)
		}},
		{"manifest gone", func(t *testing.T, file string) {
			os.Remove(filepath.Join(filepath.Dir(file), "..", ManifestFile))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{}); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, filepath.Join(dir, "llm/model-00002.safetensors"))
			r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.AlreadyReady {
				t.Fatal("a damaged volume was reported already ready")
			}
			if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
				t.Errorf("after the healing pull: %+v %v", rep, err)
			}
			if r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{}); err != nil || !r.AlreadyReady {
				t.Errorf("healed volume not ready: %+v %v", r, err)
			}
		})
	}
}
