package hostcheck_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/kiln-build/kiln/hostcheck"
	"github.com/kiln-build/kiln/internal/testdaemon"
)

// Host check on a containerd 2.x with the EROFS snapshotter as
// scripts/containerd2.sh erofs-config writes it: the engine reports the
// snapshotter loaded, whether its root has fs-verity, mkfs.erofs, and
// what kiln warm --unpack writes (native EROFS images into erofs); and
// with --fsverity on a root without fs-verity (containerd then refuses
// the snapshotter) the runtime item warns and names the setting.
func TestHostCheckErofs(t *testing.T) {
	testdaemon.SkipShort(t)
	t.Setenv("KILN_CONTAINERD_BIN", testdaemon.Containerd2Bin(t))
	script, err := testdaemon.RepoFile("scripts/containerd2.sh")
	if err != nil {
		t.Fatal(err)
	}
	// The test's root is a temporary directory: fs-verity needs ext4 (or
	// f2fs, btrfs) with the feature on, which a test cannot count on.
	for _, tc := range []struct {
		name, arg string
	}{
		{"erofs", ""},
		{"erofs with fs-verity", "--fsverity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := exec.Command("bash", script, "erofs-config", tc.arg).Output()
			if err != nil {
				t.Fatal(err)
			}
			cd := testdaemon.StartContainerd(t, testdaemon.ExtraConfig("\n"+string(conf)))
			h, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: t.TempDir(), NvidiaSMI: "-", ContainerdSockets: []string{cd.Socket},
				DockerSockets: []string{}, BuildkitSockets: []string{}, ContainerdConfig: cd.Config, ContainerdBin: cd.Bin, Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var x *hostcheck.Erofs
			for _, e := range h.Engines {
				if e.Kind == hostcheck.EngineContainerd {
					x = e.Erofs
				}
			}
			if x == nil {
				t.Fatal("no EROFS report for containerd 2.x")
			}
			r := hostcheck.Check(h, nil, hostcheck.Options{})
			it := r.Item(hostcheck.IDRuntime)
			if tc.arg == "" {
				if !x.Snapshotter || x.Root == "" || x.FsVerity == "unknown" || x.WarmNative != "erofs" || x.WarmTar != "overlayfs" {
					t.Fatalf("erofs = %+v", x)
				}
				assertItem(t, it, it.Status, nil, []string{"containerd EROFS snapshotter: loaded (root " + x.Root + "), fs-verity " + x.FsVerity,
					"kiln warm --unpack writes: EROFS images into erofs (no untar), and TAG-erofs for a TAG that names it; tar images into overlayfs"}, nil)
				return
			}
			if x.FsVerity == "supported" {
				t.Skip("the test's root has fs-verity: the snapshotter loads")
			}
			if x.Snapshotter || x.InitError == "" {
				t.Fatalf("erofs = %+v: want it refused for enable_fsverity", x)
			}
			assertItem(t, it, hostcheck.Warn, []string{"EROFS snapshotter did not load: its root has no fs-verity"},
				[]string{"containerd EROFS snapshotter: did not load: "}, []string{"remove enable_fsverity"})
		})
	}
}
