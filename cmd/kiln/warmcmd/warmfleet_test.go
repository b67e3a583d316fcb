package warmcmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/warm/fleet"
)

// emitOne runs kiln with args and reads its output, strictly, as one
// emitted object.
func emitOne(t *testing.T, args ...string) fleet.K8sObject {
	t.Helper()
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	var obj fleet.K8sObject
	if err := yaml.UnmarshalWithOptions([]byte(out), &obj, yaml.Strict()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return obj
}

func TestWarmEmitK8s(t *testing.T) {
	obj := emitOne(t, "warm", "--emit", "k8s", "10.0.0.5:5000/acme/serve:1.2",
		"--node-selector", "pool=spot", "--kiln-image", "ghcr.io/kiln-build/kiln:v1", "--unpack", "--k8s-namespace", "kube-system")
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
	obj = emitOne(t, "warm", "--emit", "k8s", "r/x:1", "--weights-into", "/var/lib/kiln/weights")
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
	if code, _, errOut := run(t, "warm", "--emit", "k8s", "r/x:1", "--weights-into", "weights"); code != cmdutil.ExitUsage || !strings.Contains(errOut, "absolute") {
		t.Errorf("relative --weights-into: exit %d %s", code, errOut)
	}
	code, out, _ := run(t, "warm", "--emit", "k8s-job", "--completions", "2", "r/x:1")
	if code != 0 || !strings.Contains(out, "kind: Job") || !strings.Contains(out, "completions: 2") {
		t.Errorf("k8s-job: exit %d\n%s", code, out)
	}
	// --per-zone: a Job per zone, the warm flags passed on, the fleet
	// flags not.
	code, out, errOut := run(t, "warm", "--emit", "k8s", "--per-zone", "1", "--zones", "z-a,z-b", "r/x:1", "--unpack")
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
		if code, _, errOut := run(t, args...); code != cmdutil.ExitUsage || !strings.Contains(errOut, "zone") {
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
		if code != cmdutil.ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestPassThrough(t *testing.T) {
	cmd := verbkit.NewRoot(&verbkit.Factory{Factory: &cmdutil.Factory{IO: &cmdutil.IO{}}}, cmdutil.Leaf(NewCmdWarm))
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

// kiln warm status --node on this host, three times: a cold oci: cache, a
// warm one and a containerd socket that is not there, each printing one
// JSON line (exit 0, 0, 1); those real lines, as kubectl logs prints them
// (--prefix, a pod that reported twice, kubectl's own notes), are what
// --from-logs gathers into the --hosts table and exit codes.
func TestWarmStatusNodeFromLogs(t *testing.T) {
	host := testimage.Registry(t)
	ref := host + "/acme/serve:1"
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("app/bin", 3000)}, "gzip")))
	dir := t.TempDir()
	cold, warm := "oci:"+filepath.Join(dir, "a"), "oci:"+filepath.Join(dir, "b")
	node := func(name, target string, wantCode int) string {
		t.Helper()
		code, out, errOut := run(t, "warm", "status", "--node", name, ref, "--target", target)
		if code != wantCode || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "{") {
			t.Fatalf("status --node %s: exit %d, want %d; stdout %q\n%s", name, code, wantCode, out, errOut)
		}
		return out
	}
	coldLine := node("gpu-a", cold, 0)
	bColdLine := node("gpu-b", warm, 0)
	if code, _, errOut := run(t, "warm", ref, "--target", warm, "--progress", "none"); code != 0 {
		t.Fatalf("warm: exit %d %s", code, errOut)
	}
	bWarmLine := node("gpu-b", warm, 0)
	failedLine := node("gpu-c", "containerd:"+filepath.Join(dir, "no.sock"), 1)
	var r fleet.Result
	if err := json.Unmarshal([]byte(failedLine), &r); err != nil || r.State != fleet.StateFailed || r.Error == "" || r.ExitCode == 0 {
		t.Fatalf("failed node's line: %+v %v", r, err)
	}

	logs := filepath.Join(dir, "logs.txt")
	write := func(lines ...string) {
		t.Helper()
		if err := os.WriteFile(logs, []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("[pod/kiln-warm-status-x7k2p/status] "+coldLine, "[pod/kiln-warm-status-q9r4m/status] "+bColdLine,
		"[pod/kiln-warm-status-q9r4m/status] "+bWarmLine, failedLine, "Defaulted container \"ready\" out of: ready, status (init)\n")
	code, out, errOut := run(t, "warm", "status", "--from-logs", logs)
	if code != cmdutil.ExitFailure {
		t.Errorf("from-logs with a failed node: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"gpu-a  pull  cold    1.1 KiB", "gpu-b  pull  warm    0 B", "gpu-c  pull  failed", "no.sock", "3 host(s): 1 warm, 1 cold, 1 failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run(t, "warm", "status", "--from-logs", logs, "--json")
	var res struct {
		Schema string         `json:"schema"`
		Hosts  []fleet.Result `json:"hosts"`
	}
	err := json.Unmarshal([]byte(out), &res)
	rows := res.Hosts
	if err != nil || res.Schema != "kiln.warm-fleet/v1" || code != cmdutil.ExitFailure || len(rows) != 3 || rows[1].Host != "gpu-b" || rows[1].State != fleet.StateWarm || rows[0].MissingBytes == 0 {
		t.Errorf("--json: exit %d %v %+v", code, err, rows)
	}
	write(coldLine, bWarmLine)
	if code, _, _ := run(t, "warm", "status", "--from-logs", logs); code != cmdutil.ExitNotReady {
		t.Errorf("cold and warm: exit %d, want 5", code)
	}
	write(bWarmLine)
	if code, _, _ := run(t, "warm", "status", "--from-logs", logs); code != cmdutil.ExitOK {
		t.Errorf("all warm: exit %d, want 0", code)
	}
	for lines, want := range map[string]string{
		"no lines here\n":                      "no kiln warm status lines",
		coldLine + "{\"host\": 3}\n":           "logs.txt:2: not a kiln warm status line",
		"{\"host\":\"n\",\"state\":\"hot\"}\n": `logs.txt:1: state: "hot"`,
		"{\"state\":\"warm\"}\n":               "logs.txt:1: host: empty",
	} {
		write(lines)
		if code, _, errOut := run(t, "warm", "status", "--from-logs", logs); code != cmdutil.ExitFailure || !strings.Contains(errOut, want) {
			t.Errorf("%q: exit %d %s, want %q", lines, code, errOut, want)
		}
		// --json: one object on stdout, also on failure.
		code, out, _ := run(t, "warm", "status", "--from-logs", logs, "--json")
		var e struct{ Error, Field string }
		if err := json.Unmarshal([]byte(out), &e); err != nil || code != cmdutil.ExitFailure || !strings.Contains(e.Error, want) || e.Field != "from-logs" {
			t.Errorf("%q --json: exit %d %q %v", lines, code, out, err)
		}
	}
	for _, args := range [][]string{
		{"warm", "status", ref},
		{"warm", "status", "--node", "n", ref},
		{"warm", "status", "--from-logs", logs, ref},
		{"warm", "status", "--node", "n", "--from-logs", logs},
	} {
		if code, _, _ := run(t, args...); code != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// --emit k8s --status: the DaemonSet's init container is kiln warm status
// --node with the node's name from the downward API, read-only, passing on
// only the flags status takes.
func TestWarmEmitK8sStatus(t *testing.T) {
	obj := emitOne(t, "warm", "--emit", "k8s", "--status", "r/x:1", "--platform", "linux/arm64", "--unpack")
	pod := obj.Spec.Template.Spec
	if obj.Kind != "DaemonSet" || obj.Metadata.Name != "kiln-warm-status" || len(pod.InitContainers) != 1 {
		t.Fatalf("%+v", obj)
	}
	st := pod.InitContainers[0]
	args := strings.Join(st.Args, " ")
	if !strings.HasPrefix(args, "warm status --node $(NODE_NAME) r/x:1 --target containerd:/run/containerd/containerd.sock --namespace k8s.io") ||
		!strings.Contains(args, "--platform=linux/arm64") || strings.Contains(args, "unpack") || strings.Contains(args, "ready-file") {
		t.Errorf("status args %q", args)
	}
	if len(st.Env) != 1 || st.Env[0].Name != "NODE_NAME" || st.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" ||
		st.SecurityContext.ReadOnlyRootFilesystem == nil || !*st.SecurityContext.ReadOnlyRootFilesystem || len(st.VolumeMounts) != 1 || len(pod.Volumes) != 1 {
		t.Errorf("status container %+v volumes %+v", st, pod.Volumes)
	}
	for _, bad := range [][]string{{"--per-zone", "1", "--zones", "a"}, {"--weights-into", "/w"}} {
		if code, _, errOut := run(t, append([]string{"warm", "--emit", "k8s", "--status", "r/x:1"}, bad...)...); code != cmdutil.ExitUsage || !strings.Contains(errOut, "--status") {
			t.Errorf("%v: exit %d %s", bad, code, errOut)
		}
	}
}

// Issue 27: warm status --from-logs on a FIFO blocked for ever (a writer
// that never closes its end); a path that is not a regular file is now
// refused at once, by name, with the way to stream logs in (stdin). The
// test holds the FIFO's write end open, as such a writer does: before the
// fix the run never returned.
func TestWarmStatusFromLogsRefusesAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "logs")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, p := range []string{fifo, "/dev/zero"} {
		code, out, errOut := run(t, "warm", "status", "--from-logs", p, "--json")
		var e struct{ Error, Field string }
		if err := json.Unmarshal([]byte(out), &e); err != nil || code != cmdutil.ExitFailure || e.Field != "from-logs" ||
			!strings.Contains(e.Error, "not a regular file") || !strings.Contains(e.Error, "--from-logs -") {
			t.Errorf("%s: exit %d %q %v\n%s", p, code, out, err, errOut)
		}
	}
}

// TestEmitKubernetesIsK8s: --emit takes kubernetes as weights run-args
// --format does, for the same DaemonSet as k8s.
func TestEmitKubernetesIsK8s(t *testing.T) {
	c1, k8s, _ := run(t, "warm", "--emit", "k8s", "r/x:1")
	c2, kubernetes, _ := run(t, "warm", "--emit", "kubernetes", "r/x:1")
	if c1 != cmdutil.ExitOK || c2 != cmdutil.ExitOK || k8s == "" || k8s != kubernetes {
		t.Errorf("--emit kubernetes: code %d\n%s\nwant what k8s prints (code %d):\n%s", c2, kubernetes, c1, k8s)
	}
	if code, _, errOut := run(t, "warm", "--emit", "helm", "r/x:1"); code != cmdutil.ExitUsage || !strings.Contains(errOut, "kubernetes") {
		t.Errorf("--emit helm: code %d %s", code, errOut)
	}
}
