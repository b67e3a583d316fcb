package containerd_test

import (
	"context"
	"os"
	"testing"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/targets"
)

// TestWarmProfileImage warms a real image into a fresh containerd, for
// profiling (go test ./warm -run TestWarmProfileImage -cpuprofile cpu.out):
// KILN_WARM_PROFILE_IMAGE=REF, KILN_WARM_PROFILE_UNPACK=1 for --unpack.
// Skipped unless the image is named.
func TestWarmProfileImage(t *testing.T) {
	ref := os.Getenv("KILN_WARM_PROFILE_IMAGE")
	if ref == "" {
		t.Skip("KILN_WARM_PROFILE_IMAGE not set")
	}
	ctx := context.Background()
	ci := testdaemon.StartContainerd(t)
	tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	src := registry.NewPool(nil)
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{Compression: warm.CompressionGzip}, ref)
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{Unpack: os.Getenv("KILN_WARM_PROFILE_UNPACK") == "1", Log: t.Logf})
	if err != nil || !rep.Ready {
		t.Fatalf("ready=%v err=%v", rep.Ready, err)
	}
	t.Logf("%d bytes in %.2fs", rep.FetchedBytes, rep.Seconds)
}
