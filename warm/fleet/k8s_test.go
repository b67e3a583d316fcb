package fleet

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func TestEmitK8sGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		opts   K8sOptions
	}{
		{"daemonset.yaml", K8sOptions{
			Refs: []string{"10.0.0.5:5000/acme/serve:1.2", "10.0.0.5:5000/acme/weights:7"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0",
			NodeSelector: map[string]string{"nvidia.com/gpu.present": "true", "pool": "spot"}, Namespace: "kube-system",
			WarmArgs: []string{"--unpack=true", "--limit-rate=200MiB"}, WeightsDir: "/var/lib/kiln/weights/",
		}},
		{"job.yaml", K8sOptions{
			Kind: KindJob, Name: "warm-serve", Refs: []string{"ghcr.io/acme/serve:1.2"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0",
			Completions: 3, ContainerdSocket: "/run/k3s/containerd/containerd.sock",
		}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			got, err := EmitK8s(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestEmitK8sGolden -update writes it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the emitted YAML (-update to accept):\n%s", path, got)
			}
			// The YAML reads back, strictly, into the typed objects, with
			// the fields Kubernetes acts on.
			var obj K8sObject
			if err := yaml.UnmarshalWithOptions(want, &obj, yaml.Strict()); err != nil {
				t.Fatal(err)
			}
			checkK8s(t, &obj, tc.opts)
		})
	}
}

func checkK8s(t *testing.T, obj *K8sObject, o K8sOptions) {
	t.Helper()
	pod := obj.Spec.Template.Spec
	var warm K8sContainer
	switch obj.Kind {
	case KindDaemonSet:
		if obj.APIVersion != "apps/v1" || obj.Spec.Selector == nil {
			t.Fatalf("DaemonSet: apiVersion %q selector %v", obj.APIVersion, obj.Spec.Selector)
		}
		// The selector must match the template's labels, or the API
		// server rejects the DaemonSet.
		for k, v := range obj.Spec.Selector.MatchLabels {
			if obj.Spec.Template.Metadata.Labels[k] != v {
				t.Errorf("selector %s=%s not on the pod template", k, v)
			}
		}
		if len(pod.InitContainers) != 1 || len(pod.Containers) != 1 || pod.Containers[0].Image != "registry.k8s.io/pause:3.10" {
			t.Fatalf("DaemonSet pods: init %v containers %v; want the warm as init and pause as main", pod.InitContainers, pod.Containers)
		}
		warm = pod.InitContainers[0]
	case KindJob:
		if obj.APIVersion != "batch/v1" || obj.Spec.Completions != o.Completions || obj.Spec.Parallelism != o.Completions || pod.RestartPolicy != "OnFailure" {
			t.Fatalf("Job: %+v restart %q", obj.Spec, pod.RestartPolicy)
		}
		if pod.Affinity == nil || pod.Affinity.PodAntiAffinity.Required[0].TopologyKey != "kubernetes.io/hostname" {
			t.Errorf("Job pods are not spread one per node: %+v", pod.Affinity)
		}
		warm = pod.Containers[0]
	default:
		t.Fatalf("kind %q", obj.Kind)
	}
	if obj.Metadata.Namespace != o.Namespace {
		t.Errorf("namespace %q, want %q", obj.Metadata.Namespace, o.Namespace)
	}
	if warm.Image != o.KilnImage || warm.Args[0] != "warm" {
		t.Errorf("warm container %s %v", warm.Image, warm.Args)
	}
	args := strings.Join(warm.Args, " ")
	for _, want := range append(slices.Clone(o.Refs), "--target containerd:/run/containerd/containerd.sock", "--namespace k8s.io", "--ready-file /var/run/kiln/") {
		if !strings.Contains(args, want) {
			t.Errorf("warm args %q lack %q", args, want)
		}
	}
	for _, a := range o.WarmArgs {
		if !slices.Contains(warm.Args, a) {
			t.Errorf("warm args lack %q", a)
		}
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tl K8sToleration) bool { return tl.Key == "nvidia.com/gpu" && tl.Operator == "Exists" }) {
		t.Errorf("no GPU toleration: %v", pod.Tolerations)
	}
	for k, v := range o.NodeSelector {
		if pod.NodeSelector[k] != v {
			t.Errorf("nodeSelector %s=%q, want %q", k, pod.NodeSelector[k], v)
		}
	}
	// The socket is the node's, mounted where the args point.
	sock := or(o.ContainerdSocket, "/run/containerd/containerd.sock")
	vols := map[string]K8sVolume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	for _, m := range warm.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok || v.HostPath == nil {
			t.Fatalf("mount %s has no hostPath volume", m.Name)
		}
		if m.MountPath == "/run/containerd/containerd.sock" && (v.HostPath.Path != sock || v.HostPath.Type != "Socket") {
			t.Errorf("containerd socket volume %+v, want %s (Socket)", v.HostPath, sock)
		}
	}
	wantMounts := 2
	if o.WeightsDir != "" {
		// --weights-into: the node's directory, read-write at the same
		// path, and the argument names that path.
		wantMounts = 3
		dir := strings.TrimSuffix(o.WeightsDir, "/")
		if !strings.Contains(args, "--weights-into "+dir+" ") {
			t.Errorf("warm args %q lack --weights-into %s", args, dir)
		}
		var found bool
		for _, m := range warm.VolumeMounts {
			if m.MountPath != dir {
				continue
			}
			found = true
			if v := vols[m.Name]; v.HostPath.Path != dir || v.HostPath.Type != "DirectoryOrCreate" || m.ReadOnly {
				t.Errorf("weights mount %+v volume %+v: want hostPath %s (DirectoryOrCreate), read-write", m, v.HostPath, dir)
			}
		}
		if !found {
			t.Errorf("no mount at %s: %v", dir, warm.VolumeMounts)
		}
	}
	if len(warm.VolumeMounts) != wantMounts {
		t.Errorf("mounts %v: want the socket, the ready dir and (with --weights-into) the weights dir", warm.VolumeMounts)
	}
}

func TestEmitK8sRejects(t *testing.T) {
	for _, tc := range []struct {
		o    K8sOptions
		want string
	}{
		{K8sOptions{KilnImage: "k"}, "no image"},
		{K8sOptions{Refs: []string{"a"}}, "--kiln-image"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", Name: "Bad_Name"}, "DNS label"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", Kind: "Deployment"}, "DaemonSet or Job"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", WeightsDir: "weights"}, "absolute path"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", WeightsDir: "/var/run"}, "overlaps"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", WeightsDir: "/var/run/kiln/w"}, "overlaps"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", WeightsDir: "/"}, "overlaps"},
		// Issue 27 (minor): a newline was cut off silently, a user
		// --ready-file came after kiln's own, an int32 overflowed.
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", WarmArgs: []string{"--limit-rate", "10M\nevil: true"}}, "control character"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", NodeSelector: map[string]string{"gpu": "h100\nx"}}, "control character"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k\n"}, "control character"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", WarmArgs: []string{"--ready-file", "/tmp/x"}}, "--ready-file"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", WarmArgs: []string{"--ready-file=/tmp/x"}}, "--ready-file"},
		{K8sOptions{Refs: []string{"a"}, KilnImage: "k", Kind: KindJob, Completions: 1 << 32}, "int32"},
	} {
		if _, err := EmitK8s(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.o, err, tc.want)
		}
	}
	if _, err := ParseSelector([]string{"a=b,c"}); err == nil {
		t.Error("selector without = accepted")
	}
}
