package warmcmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln warm's flags reach its options (runF stops before a target is
// opened or a fleet asked), and its target opener is the Factory's.
func TestNewCmdWarmOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdWarm, "reg/a:1", "reg/b:2", "--target", "containerd", "-n", "k8s.io", "--unpack", "--dry-run", "-j", "8", "--limit-rate", "100MiB", "--ready-file", "/run/r", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.Args, []string{"reg/a:1", "reg/b:2"}) || o.Target != "containerd" || o.Namespace != "k8s.io" || !o.Unpack || !o.DryRun || o.Concurrency != 8 || o.LimitRate != "100MiB" || o.ReadyFile != "/run/r" || !o.JSON {
		t.Fatalf("options %+v", o)
	}
	if o.OpenTarget == nil || o.Registry == nil {
		t.Fatalf("options %+v: want the Factory's target opener and registry options", o)
	}
}

// kiln warm status: each mode's flags reach the options, the warm flags
// it passes on to every host's dry run are collected, and a mistake is
// refused before runF.
func TestNewCmdWarmStatusOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdWarmStatus, "--hosts", "gpus.yaml", "reg/a:1", "--target", "containerd", "--platform", "linux/arm64", "--insecure-registry", "reg", "--parallel", "3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if o.HostsFile != "gpus.yaml" || !reflect.DeepEqual(o.Refs, []string{"reg/a:1"}) || o.Target != "containerd" || o.Parallel != 3 || !o.JSON || !o.DryRun ||
		!reflect.DeepEqual(o.WarmArgs, []string{"--platform=linux/arm64", "--insecure-registry=reg"}) {
		t.Fatalf("options %+v", o)
	}
	if n, err := cmdtest.Options(t, NewCmdWarmStatus, "--node", "gpu-7", "reg/a:1"); err != nil || n.Node != "gpu-7" {
		t.Fatalf("--node: %+v, %v", n, err)
	}
	if l, err := cmdtest.Options(t, NewCmdWarmStatus, "--from-logs", "-"); err != nil || l.FromLogs != "-" {
		t.Fatalf("--from-logs: %+v, %v", l, err)
	}
	for _, args := range [][]string{{"reg/a:1"}, {"--hosts", "h.yaml", "--node", "n", "reg/a:1"}, {"--from-logs", "-", "reg/a:1"}, {"--hosts", "h.yaml"}} {
		if o, err := cmdtest.Options(t, NewCmdWarmStatus, args...); err == nil || o != nil {
			t.Errorf("%v: options %+v, error %v; want refused before runF", args, o, err)
		}
	}
}
