package analyze_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/internal/testimage"
)

// TestHostileImage: entries that climb out of the root, absolute paths,
// symlinks pointing outside and duplicates within a layer give a correct
// report with warnings, not an error or a panic.
func TestHostileImage(t *testing.T) {
	dir := t.TempDir()
	l0 := testimage.Layer(t, []testimage.Entry{
		testimage.Sized("../../etc/cron.d/evil", 100),
		testimage.Sized("/abs/nvcc", 200),
		testimage.Symlink("usr/lib/escape", "../../../../../etc/shadow"),
		testimage.Sized("app/dup.bin", 300),
		testimage.Sized("app/dup.bin", 50), // the second copy wins
	}, "gzip")
	l1 := testimage.Layer(t, []testimage.Entry{
		testimage.Whiteout("does/not/exist"), // deleting nothing is fine
		testimage.Opaque("never/was"),
	}, "zstd")
	testimage.WriteLayout(t, dir, "x", testimage.Image(t, testimage.Config{Env: []string{"NVIDIA_REQUIRE_CUDA=cuda>>12 brand=", "CUDA_VERSION=99.1"}}, l0, l1))
	r := openAndAnalyze(t, "oci:"+dir+":x")
	if r.Waste.WastedBytes != 300 || len(r.Waste.Top) != 1 || r.Waste.Top[0].How != "duplicate" {
		t.Errorf("waste = %+v, want the 300-byte first copy as a duplicate", r.Waste)
	}
	if r.VisibleSize != 100+200+50 {
		t.Errorf("visible = %d", r.VisibleSize)
	}
	warn := strings.Join(r.Warnings, "\n")
	for _, want := range []string{`"../../etc/cron.d/evil" points outside the image root; counted as /etc/cron.d/evil`, `"/abs/nvcc" points outside`, "NVIDIA_REQUIRE_CUDA", "minimum driver"} {
		if !strings.Contains(warn, want) {
			t.Errorf("warnings lack %q:\n%s", want, warn)
		}
	}
}

// TestSquashThroughLinks: a layer that writes below a symlink is counted
// where a runtime puts the file (the link's target), so the copy it
// replaces there is waste; a file where a later layer needs a directory is
// replaced by it; an entry below a dangling link is left out, with a
// warning for the layer.
func TestSquashThroughLinks(t *testing.T) {
	dir := t.TempDir()
	l0 := testimage.Layer(t, []testimage.Entry{
		testimage.Dir("usr/"), testimage.Dir("usr/lib/"),
		testimage.Sized("usr/lib/libx.so", 1000),
		testimage.Symlink("lib", "usr/lib"),
		testimage.Sized("f", 100),
		testimage.Symlink("dangling", "nowhere"),
	}, "gzip")
	l1 := testimage.Layer(t, []testimage.Entry{
		testimage.Sized("lib/libx.so", 1500),
		testimage.Sized("f/g", 10),
		testimage.Sized("dangling/x", 5),
	}, "gzip")
	testimage.WriteLayout(t, dir, "x", testimage.Image(t, testimage.Config{}, l0, l1))
	r := openAndAnalyze(t, "oci:"+dir+":x")
	if r.Waste.WastedBytes != 1000+100 {
		t.Errorf("wasted = %d, want 1100 (usr/lib/libx.so replaced through lib, f replaced by a directory): %+v", r.Waste.WastedBytes, r.Waste.Top)
	}
	if r.VisibleSize != 1500+10 {
		t.Errorf("visible = %d, want 1510", r.VisibleSize)
	}
	warn := strings.Join(r.Warnings, "\n")
	for _, want := range []string{`layer 1: 2 entries could not be placed as written (the first: entry "lib/libx.so" is written through the symlink /lib → usr/lib)`, "1 counted where their symlinks lead", "1 lead nowhere"} {
		if !strings.Contains(warn, want) {
			t.Errorf("warnings lack %q:\n%s", want, warn)
		}
	}
}

// TestAnalyzeRefusesSparseAndOddEntries (N7, N12): a few hundred bytes
// declaring a 64 GiB GNU-sparse library are refused at their header, not
// read as 64 GiB of zeros (--kernels reads every library), and entries
// tar readers disagree on (type V, 7, data on a device) have no report.
func TestAnalyzeRefusesSparseAndOddEntries(t *testing.T) {
	hostile := testimage.HostileTars(t)
	for name, tb := range map[string][]byte{
		"sparse":     testimage.SparseTar("usr/lib/libhuge.so", 64<<30),
		"sparse-pax": testimage.SparsePAXTar("usr/lib/libhuge.so", 64<<30),
		"type-v":     hostile["type-v"],
		"type-7":     hostile["type-7"],
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l := testimage.RawLayer(gzipped(t, tb), types.OCILayer)
			testimage.WriteLayout(t, dir, "x", testimage.Image(t, testimage.Config{}, l))
			img, err := testkit.OpenImage(context.Background(), "oci:"+dir+":x")
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err = analyze.Image(ctx, img, analyze.Options{Kernels: true, SkipVerify: true})
			if err == nil || !strings.Contains(err.Error(), "refusing it") {
				t.Fatalf("err = %v, want the entry refused", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
