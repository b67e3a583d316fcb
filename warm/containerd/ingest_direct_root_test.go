package containerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// contentRootFor recognizes containerd 1.6's store (ingest/ made at start)
// and a fresh 2.x store (ingest/ and blobs/ made only at the first write),
// given either the daemon root or the content directory.
func TestContentRootFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		dirs []string
		arg  string // relative to the temp dir
		want string // relative; "" for an error
	}{
		{"1.6 daemon root", []string{contentDirName + "/ingest"}, ".", contentDirName},
		{"1.6 content dir", []string{contentDirName + "/ingest"}, contentDirName, contentDirName},
		{"2.x fresh daemon root", []string{contentDirName}, ".", contentDirName},
		{"2.x fresh content dir", []string{contentDirName}, contentDirName, contentDirName},
		{"blobs only", []string{"store/blobs"}, "store", "store"},
		{"empty dir", nil, ".", ""},
		{"other plugin dir", []string{"io.containerd.snapshotter.v1.overlayfs"}, ".", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			for _, r := range tc.dirs {
				if err := os.MkdirAll(filepath.Join(d, r), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			got, err := contentRootFor(filepath.Join(d, tc.arg))
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "holds containerd's content store") {
					t.Fatalf("root %q, err %v; want an error", got, err)
				}
				return
			}
			if err != nil || got != filepath.Join(d, tc.want) {
				t.Fatalf("root %q, err %v; want %s", got, err, filepath.Join(d, tc.want))
			}
		})
	}
}

// writableDir checks ingest/ when it exists, else the root that containerd
// 2.x creates it in.
func TestWritableDir(t *testing.T) {
	d := t.TempDir()
	if why := writableDir(d); why != "" {
		t.Fatalf("fresh root: %s", why)
	}
	if why := writableDir(filepath.Join(d, "missing")); why == "" {
		t.Fatal("a missing root counted as writable")
	}
	if os.Geteuid() == 0 {
		return // root writes through any mode
	}
	if err := os.Mkdir(filepath.Join(d, "ingest"), 0o500); err != nil {
		t.Fatal(err)
	}
	if why := writableDir(d); !strings.Contains(why, "ingest") {
		t.Fatalf("read-only ingest/: %q", why)
	}
}
