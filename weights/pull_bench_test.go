package weights

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
)

// BenchmarkPull pulls the artifact named by KILN_WEIGHTS_BENCH_REF (bash
// bench/weights.sh publishes one: 127.0.0.1:5000/kiln-weights/bench:latest)
// into KILN_WEIGHTS_BENCH_DIR (default: a temp dir), comparing one
// connection per blob with Range chunks, and the durability steps: no sync
// at all (what durability costs; never used by kiln), fsync, fdatasync,
// and the default (sync_file_range per chunk, then fdatasync).
//
//	KILN_WEIGHTS_BENCH_REF=127.0.0.1:5000/kiln-weights/bench:latest \
//	  go test ./weights -run '^$' -bench Pull -benchtime 5x
func BenchmarkPull(b *testing.B) {
	ref := os.Getenv("KILN_WEIGHTS_BENCH_REF")
	if ref == "" {
		b.Skip("KILN_WEIGHTS_BENCH_REF not set")
	}
	ctx := context.Background()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = DefaultConcurrency
	res, err := Resolve(ctx, ref, "", registry.WithTransport(tr))
	if err != nil {
		b.Fatal(err)
	}
	root := os.Getenv("KILN_WEIGHTS_BENCH_DIR")
	if root == "" {
		root = b.TempDir()
	}
	cases := []struct {
		name string
		opts PullOptions
	}{
		{"one-conn/fsync", PullOptions{ChunkSize: -1, sync: blob.SyncFull}},
		{"one-conn/fdatasync", PullOptions{ChunkSize: -1, sync: blob.SyncData}},
		{"chunks/nosync", PullOptions{sync: blob.SyncNone}},
		{"chunks/fsync", PullOptions{sync: blob.SyncFull}},
		{"chunks/fdatasync", PullOptions{sync: blob.SyncData}},
		{"chunks/writeback+fdatasync", PullOptions{sync: blob.SyncEarly}},
		{"chunks-8MiB-c4", PullOptions{ChunkSize: 8 << 20, Concurrency: 4}},
		{"chunks-16MiB-c4", PullOptions{ChunkSize: 16 << 20, Concurrency: 4}},
		{"chunks-32MiB-c4", PullOptions{ChunkSize: 32 << 20, Concurrency: 4}},
		{"chunks-16MiB-c2", PullOptions{ChunkSize: 16 << 20, Concurrency: 2}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(res.Manifest.Size)
			for i := 0; i < b.N; i++ {
				dir := filepath.Join(root, "vol")
				b.StopTimer()
				os.RemoveAll(dir)
				b.StartTimer()
				if _, err := Pull(ctx, res.Manifest, res.Source, dir, tc.opts); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			os.RemoveAll(filepath.Join(root, "vol"))
		})
	}
}
