package layers_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"
	"go.uber.org/goleak"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// TestWalkBodyStopsWhenCancelled (N7): a sparse entry yields its zeros
// without reading the layer's stream, so the body handed to a WalkFunc
// must itself stop once the walk's context ends; a copy of a 1 TiB
// sparse entry would run for minutes.
func TestWalkBodyStopsWhenCancelled(t *testing.T) {
	b := testimage.SparseTar("huge", 1<<40)
	for _, comp := range []string{"gzip", "none"} {
		t.Run(comp, func(t *testing.T) {
			raw := map[string][]byte{"gzip": gz(b), "none": b}[comp]
			l := testimage.RawLayer(raw, types.MediaType("application/vnd.oci.image.layer.v1.tar"+map[string]string{"gzip": "+gzip", "none": ""}[comp]))
			dir := t.TempDir()
			testimage.WriteLayout(t, dir, "x", testimage.Image(t, testimage.Config{}, l))
			im, err := testkit.OpenImage(context.Background(), "oci:"+dir+":x")
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err = im.Layers[0].Walk(ctx, layers.WalkOptions{SkipVerify: true}, func(_ *layers.Entry, body io.Reader) error {
				_, err := io.Copy(io.Discard, body)
				return err
			})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want the context's", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the walk stopped %v after its context ended", d)
			}
		})
	}
}

// TestWalkTarStopsBetweenEntries: a cancelled walk reads no further
// header.
func TestWalkTarStopsBetweenEntries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tb := testimage.Tar(t, []testimage.Entry{testimage.File("a", nil), testimage.File("b", nil)})
	var seen int
	err := layers.WalkTar(ctx, bytes.NewReader(tb), func(*layers.Entry, io.Reader) error {
		seen++
		cancel()
		return nil
	})
	if seen != 1 || !errors.Is(err, context.Canceled) {
		t.Errorf("saw %d entries, err = %v; want 1 and the context's", seen, err)
	}
}

// TestWalkStoppedEarlyLeavesNoGoroutine: the walk's digest and diff ID
// hash in goroutines of their own (bufpipe.Hash); a walk that stops at
// its first entry, verified or not, ends them.
func TestWalkStoppedEarlyLeavesNoGoroutine(t *testing.T) {
	l := testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 3<<20), testimage.Sized("b", 3<<20)}, "gzip")
	ref := testimage.Registry(t) + "/walk/early:1"
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, l))
	stop := errors.New("stop")
	im, err := testkit.OpenImage(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	walk := func() {
		_, err := im.Layers[0].Walk(context.Background(), layers.WalkOptions{}, func(*layers.Entry, io.Reader) error { return stop })
		if !errors.Is(err, stop) {
			t.Fatalf("err = %v, want the WalkFunc's", err)
		}
	}
	walk() // the registry client's own goroutines start here
	current := goleak.IgnoreCurrent()
	for range 20 {
		walk()
	}
	// Only kiln's goroutines are counted: the HTTP client and the test
	// registry open and close connections (two goroutines each) on
	// their own schedule, so a count of every goroutine is not a
	// measure of this walk (it failed CI with one connection more).
	http := []goleak.Option{current,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*Transport).dialConnFor"),
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find(http...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left after 20 walks stopped early:\n%v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
