package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/kiln-build/kiln/warm/fleet"
)

func TestWarmEmitK8s(t *testing.T) {
	code, out, errOut := run(t, "warm", "--emit", "k8s", "10.0.0.5:5000/acme/serve:1.2",
		"--node-selector", "pool=spot", "--kiln-image", "ghcr.io/kiln-build/kiln:v1", "--unpack", "--k8s-namespace", "kube-system")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var obj fleet.K8sObject
	if err := yaml.UnmarshalWithOptions([]byte(out), &obj, yaml.Strict()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	pod := obj.Spec.Template.Spec
	if obj.Kind != "DaemonSet" || obj.Metadata.Namespace != "kube-system" || pod.NodeSelector["pool"] != "spot" || len(pod.InitContainers) != 1 {
		t.Fatalf("%+v", obj)
	}
	args := pod.InitContainers[0].Args
	// --unpack passes through; the containerd namespace defaults to the
	// kubelet's, not warm's "default".
	for _, want := range []string{"--unpack=true", "k8s.io", "10.0.0.5:5000/acme/serve:1.2"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %q", args, want)
		}
	}
	// --weights-into: the node's directory is mounted read-write at the
	// same path and named once, as the pod sees it.
	code, out, errOut = run(t, "warm", "--emit", "k8s", "r/x:1", "--weights-into", "/var/lib/kiln/weights")
	if code != 0 {
		t.Fatalf("--weights-into: exit %d: %s", code, errOut)
	}
	obj = fleet.K8sObject{}
	if err := yaml.UnmarshalWithOptions([]byte(out), &obj, yaml.Strict()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	pod = obj.Spec.Template.Spec
	warm := pod.InitContainers[0]
	if i := slices.Index(warm.Args, "--weights-into"); i < 0 || warm.Args[i+1] != "/var/lib/kiln/weights" || strings.Contains(strings.Join(warm.Args, " "), "--weights-into=") {
		t.Errorf("args %v: want --weights-into /var/lib/kiln/weights once", warm.Args)
	}
	var mounted bool
	for _, m := range warm.VolumeMounts {
		for _, v := range pod.Volumes {
			if m.Name == v.Name && m.MountPath == "/var/lib/kiln/weights" && v.HostPath != nil && v.HostPath.Path == "/var/lib/kiln/weights" && !m.ReadOnly {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("no read-write hostPath mount of /var/lib/kiln/weights: %v %v", warm.VolumeMounts, pod.Volumes)
	}
	if code, _, errOut := run(t, "warm", "--emit", "k8s", "r/x:1", "--weights-into", "weights"); code != ExitUsage || !strings.Contains(errOut, "absolute") {
		t.Errorf("relative --weights-into: exit %d %s", code, errOut)
	}
	code, out, _ = run(t, "warm", "--emit", "k8s-job", "--completions", "2", "r/x:1")
	if code != 0 || !strings.Contains(out, "kind: Job") || !strings.Contains(out, "completions: 2") {
		t.Errorf("k8s-job: exit %d\n%s", code, out)
	}
	// --per-zone: a Job per zone, the warm flags passed on, the fleet
	// flags not.
	code, out, errOut = run(t, "warm", "--emit", "k8s", "--per-zone", "1", "--zones", "z-a,z-b", "r/x:1", "--unpack")
	if code != 0 {
		t.Fatalf("--per-zone: exit %d: %s", code, errOut)
	}
	docs := strings.Split(out, "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("--per-zone: %d documents\n%s", len(docs), out)
	}
	for i, zone := range []string{"z-a", "z-b"} {
		var job fleet.K8sObject
		if err := yaml.UnmarshalWithOptions([]byte(docs[i]), &job, yaml.Strict()); err != nil {
			t.Fatalf("%v\n%s", err, docs[i])
		}
		aff := job.Spec.Template.Spec.Affinity
		args := job.Spec.Template.Spec.Containers[0].Args
		if job.Kind != "Job" || job.Metadata.Name != "kiln-warm-"+zone || job.Spec.Completions != 1 || aff.NodeAffinity.Required.Terms[0].MatchExpressions[0].Values[0] != zone ||
			!slices.Contains(args, "--unpack=true") || strings.Contains(strings.Join(args, " "), "zone") {
			t.Errorf("zone %s: %s", zone, docs[i])
		}
	}
	for _, tc := range [][]string{
		{"--per-zone", "1"},
		{"--zones", "a"},
		{"--per-zone", "-1", "--zones", "a"},
		{"--emit", "k8s-job", "--completions", "3", "--per-zone", "1", "--zones", "a"},
	} {
		args := append([]string{"warm", "--emit", "k8s", "r/x:1"}, tc...)
		if code, _, errOut := run(t, args...); code != ExitUsage || !strings.Contains(errOut, "zone") {
			t.Errorf("%v: exit %d %s", tc, code, errOut)
		}
	}
}

func TestWarmFleetUsage(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "gpus.yaml")
	if err := os.WriteFile(bad, []byte("hosts:\n  - address: a\n    mode: carry\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"warm", "--emit", "helm", "r/x:1"}, "not k8s"},
		{[]string{"warm", "--emit", "k8s", "--target", "oci:/x", "r/x:1"}, "--target does not apply"},
		{[]string{"warm", "--emit", "k8s", "--hosts", bad, "r/x:1"}, "choose one"},
		{[]string{"warm", "--hosts", bad, "r/x:1"}, "gpus.yaml:3:11: hosts[0].mode"},
		{[]string{"warm", "status", "r/x:1"}, "needs --hosts"},
		{[]string{"warm", "--hosts", bad, "--parallel", "0", "r/x:1"}, "--parallel"},
		{[]string{"warm", "--emit", "k8s", "--node-selector", "nokey", "r/x:1"}, "key=value"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestPassThrough(t *testing.T) {
	cmd := NewRootCmd(&IO{})
	w, _, err := cmd.Find([]string{"warm"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ParseFlags([]string{"--hosts", "h.yaml", "--unpack", "--limit-rate", "10MiB", "--insecure-registry", "a:5000", "--insecure-registry", "b:5000", "--target", "containerd", "--json", "--parallel", "3", "--weights-into", "/w"}); err != nil {
		t.Fatal(err)
	}
	got := passThrough(w.Flags())
	slices.Sort(got)
	// --weights-into passes through to hosts (a path on each host).
	want := []string{"--insecure-registry=a:5000", "--insecure-registry=b:5000", "--limit-rate=10MiB", "--unpack=true", "--weights-into=/w"}
	if !slices.Equal(got, want) {
		t.Errorf("passThrough = %v, want %v (fleet's own flags, --target and --json stay here)", got, want)
	}
}
