package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The emitted objects against the Kubernetes API of the version kiln
// targets (k8s.io/api v0.37, Kubernetes 1.37): decoded strictly into the
// API's own Go types (an unknown or misplaced field, a wrong type, a bad
// quantity or int-or-string is an error, as the API server's strict field
// validation makes it), then checked with apimachinery's validators for
// what the API server refuses: names, label keys and values, a selector
// that does not match its template, volume mounts without volumes, a
// Job's restart policy, hostPath types, container names.
func TestEmitK8sAgainstAPITypes(t *testing.T) {
	for _, o := range []K8sOptions{
		{Refs: []string{"10.0.0.5:5000/acme/serve:1.2", "10.0.0.5:5000/acme/weights:7"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0",
			NodeSelector: map[string]string{"nvidia.com/gpu.present": "true", "pool": "spot"}, Namespace: "kube-system",
			WarmArgs: []string{"--unpack=true", "--limit-rate=200MiB"}, WeightsDir: "/var/lib/kiln/weights/"},
		{Refs: []string{"ghcr.io/acme/serve:1.2"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0"},
		{Kind: KindJob, Name: "warm-serve", Refs: []string{"ghcr.io/acme/serve:1.2"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0",
			Completions: 3, ContainerdSocket: "/run/k3s/containerd/containerd.sock"},
		{Kind: KindJob, Refs: []string{"ghcr.io/acme/serve:1.2"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0", WeightsDir: "/models"},
		{Refs: []string{"ghcr.io/acme/serve:1.2", "ghcr.io/acme/weights-twin:7"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0",
			NodeSelector: map[string]string{"nvidia.com/gpu.present": "true"}, PerZone: 2, Zones: []string{"us-east-1a", "us-east-1b", "eu_West.3"}},
		{Refs: []string{"ghcr.io/acme/serve:1.2"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0", Status: true, WarmArgs: []string{"--platform=linux/arm64"}},
		{Kind: KindJob, Refs: []string{"ghcr.io/acme/serve:1.2"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0", Status: true, Completions: 2},
	} {
		name := o.kind() + "/" + or(o.Name, "default")
		if o.PerZone > 0 {
			name = fmt.Sprintf("Job-per-zone/%d-zones", len(o.Zones))
		}
		if o.Status {
			name += "/status"
		}
		t.Run(name, func(t *testing.T) {
			out, err := EmitK8s(o)
			if err != nil {
				t.Fatal(err)
			}
			docs := strings.Split(string(out), "\n---\n")
			if want := max(len(o.Zones), 1); len(docs) != want {
				t.Fatalf("%d YAML documents, want %d:\n%s", len(docs), want, out)
			}
			for _, doc := range docs {
				checkAgainstAPI(t, o, []byte(doc))
			}
		})
	}
}

// checkAgainstAPI decodes one emitted object strictly into its API type
// and applies validateObject.
func checkAgainstAPI(t *testing.T, o K8sOptions, doc []byte) {
	t.Helper()
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	kind := o.kind()
	if o.PerZone > 0 {
		kind = KindJob
	}
	strict := func(v any) {
		t.Helper()
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("not a valid %s for the Kubernetes API: %v\n%s", kind, err, doc)
		}
	}
	var meta metav1.ObjectMeta
	var tmpl corev1.PodTemplateSpec
	switch kind {
	case KindDaemonSet:
		var ds appsv1.DaemonSet
		strict(&ds)
		if ds.APIVersion != "apps/v1" || ds.Kind != "DaemonSet" {
			t.Fatalf("apiVersion %q kind %q", ds.APIVersion, ds.Kind)
		}
		meta, tmpl = ds.ObjectMeta, ds.Spec.Template
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(tmpl.Labels)) {
			t.Errorf("selector %v does not select the pod template's labels %v (%v): the API server refuses it", ds.Spec.Selector, tmpl.Labels, err)
		}
		if p := tmpl.Spec.RestartPolicy; p != "" && p != corev1.RestartPolicyAlways {
			t.Errorf("DaemonSet pods restart %q; only Always is allowed", p)
		}
	case KindJob:
		var job batchv1.Job
		strict(&job)
		if job.APIVersion != "batch/v1" || job.Kind != "Job" {
			t.Fatalf("apiVersion %q kind %q", job.APIVersion, job.Kind)
		}
		meta, tmpl = job.ObjectMeta, job.Spec.Template
		if p := tmpl.Spec.RestartPolicy; p != corev1.RestartPolicyNever && p != corev1.RestartPolicyOnFailure {
			t.Errorf("Job pods restart %q; a Job needs Never or OnFailure", p)
		}
		if c := job.Spec.Completions; c != nil && *c < 1 {
			t.Errorf("completions %d", *c)
		}
	}
	for _, e := range validateObject(meta, tmpl) {
		t.Error(e)
	}
}

// validateObject applies the API server's rules that a typed decode does
// not: what each field may hold, and that references resolve.
func validateObject(meta metav1.ObjectMeta, tmpl corev1.PodTemplateSpec) []string {
	var errs []string
	bad := func(field string, msgs []string) {
		if len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("%s: %s", field, strings.Join(msgs, "; ")))
		}
	}
	bad("metadata.name "+meta.Name, validation.IsDNS1123Subdomain(meta.Name))
	if meta.Namespace != "" {
		bad("metadata.namespace "+meta.Namespace, validation.IsDNS1123Label(meta.Namespace))
	}
	checkLabels := func(field string, m map[string]string) {
		for k, v := range m {
			bad(field+" key "+k, validation.IsQualifiedName(k))
			bad(field+" value "+v, validation.IsValidLabelValue(v))
		}
	}
	checkLabels("metadata.labels", meta.Labels)
	checkLabels("spec.template.metadata.labels", tmpl.Labels)
	checkLabels("spec.template.spec.nodeSelector", tmpl.Spec.NodeSelector)
	for k := range meta.Annotations {
		bad("metadata.annotations key "+k, validation.IsQualifiedName(k))
	}
	vols := map[string]corev1.Volume{}
	for _, v := range tmpl.Spec.Volumes {
		bad("volume "+v.Name, validation.IsDNS1123Label(v.Name))
		if _, dup := vols[v.Name]; dup {
			errs = append(errs, "volume "+v.Name+" declared twice")
		}
		vols[v.Name] = v
		if hp := v.HostPath; hp != nil {
			if !strings.HasPrefix(hp.Path, "/") {
				errs = append(errs, "volume "+v.Name+": hostPath must be absolute: "+hp.Path)
			}
			if hp.Type != nil {
				switch *hp.Type {
				case corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory, corev1.HostPathFileOrCreate,
					corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev:
				default:
					errs = append(errs, fmt.Sprintf("volume %s: hostPath type %q", v.Name, *hp.Type))
				}
			}
		}
	}
	names := map[string]bool{}
	for _, c := range append(append([]corev1.Container(nil), tmpl.Spec.InitContainers...), tmpl.Spec.Containers...) {
		bad("container "+c.Name, validation.IsDNS1123Label(c.Name))
		if names[c.Name] {
			errs = append(errs, "container name "+c.Name+" used twice")
		}
		names[c.Name] = true
		if c.Image == "" {
			errs = append(errs, "container "+c.Name+": no image")
		}
		for _, m := range c.VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				errs = append(errs, "container "+c.Name+": volumeMount "+m.Name+" names no volume")
			}
			if !strings.HasPrefix(m.MountPath, "/") {
				errs = append(errs, "container "+c.Name+": mountPath "+m.MountPath+" is not absolute")
			}
		}
		// The API server's downward-API field paths for env, and the
		// kubelet's $(VAR) expansion in args, which leaves a reference to
		// an undeclared variable as literal text (no error anywhere).
		env := map[string]bool{}
		for _, e := range c.Env {
			bad("container "+c.Name+" env "+e.Name, validation.IsEnvVarName(e.Name))
			env[e.Name] = true
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				switch e.ValueFrom.FieldRef.FieldPath {
				case "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
					"status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs":
				default:
					errs = append(errs, "container "+c.Name+" env "+e.Name+": fieldPath "+e.ValueFrom.FieldRef.FieldPath+" is not a downward API field")
				}
			}
		}
		for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
			for _, m := range envRef.FindAllStringSubmatch(a, -1) {
				if !env[m[1]] {
					errs = append(errs, "container "+c.Name+": argument "+a+" refers to $("+m[1]+"), which the container does not declare")
				}
			}
		}
		for name, q := range c.Resources.Limits {
			if r, ok := c.Resources.Requests[name]; ok && r.Cmp(q) > 0 {
				errs = append(errs, fmt.Sprintf("container %s: %s request %s above its limit %s", c.Name, name, r.String(), q.String()))
			}
		}
	}
	if len(tmpl.Spec.Containers) == 0 {
		errs = append(errs, "the pod has no containers")
	}
	if a := tmpl.Spec.Affinity; a != nil {
		errs = append(errs, validateAffinity(a)...)
	}
	return errs
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// validateAffinity is the API server's check of node affinity terms
// (operator and value count, keys, values) and pod (anti-)affinity terms
// (a topology key, a selector that parses).
func validateAffinity(a *corev1.Affinity) []string {
	var errs []string
	if na := a.NodeAffinity; na != nil && na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) == 0 {
			errs = append(errs, "nodeAffinity: no nodeSelectorTerms")
		}
		for _, term := range terms {
			for _, r := range term.MatchExpressions {
				for _, m := range validation.IsQualifiedName(r.Key) {
					errs = append(errs, "nodeAffinity key "+r.Key+": "+m)
				}
				switch r.Operator {
				case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
					if len(r.Values) == 0 {
						errs = append(errs, "nodeAffinity "+r.Key+": "+string(r.Operator)+" without values")
					}
				case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
					if len(r.Values) > 0 {
						errs = append(errs, "nodeAffinity "+r.Key+": "+string(r.Operator)+" with values")
					}
				case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
					if len(r.Values) != 1 {
						errs = append(errs, "nodeAffinity "+r.Key+": "+string(r.Operator)+" needs one value")
					}
				default:
					errs = append(errs, "nodeAffinity "+r.Key+": operator "+string(r.Operator))
				}
				for _, v := range r.Values {
					for _, m := range validation.IsValidLabelValue(v) {
						errs = append(errs, "nodeAffinity "+r.Key+" value "+v+": "+m)
					}
				}
			}
		}
	}
	if pa := a.PodAntiAffinity; pa != nil {
		for _, term := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
			if term.TopologyKey == "" {
				errs = append(errs, "podAntiAffinity: empty topologyKey")
			}
			if _, err := metav1.LabelSelectorAsSelector(term.LabelSelector); err != nil {
				errs = append(errs, "podAntiAffinity selector: "+err.Error())
			}
		}
	}
	return errs
}

// The checks above catch what the API server would refuse: mutations of
// a good DaemonSet that each must fail.
func TestAPIValidationCatchesMistakes(t *testing.T) {
	good, err := EmitK8s(K8sOptions{Refs: []string{"ghcr.io/acme/serve:1.2"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0"})
	if err != nil {
		t.Fatal(err)
	}
	refused := func(good []byte, mutations map[string]func(string) string) {
		t.Helper()
		for name, mutate := range mutations {
			bad := mutate(string(good))
			if bad == string(good) {
				t.Fatalf("%s: the mutation changed nothing (the emitted YAML moved?)", name)
			}
			j, err := yaml.YAMLToJSON([]byte(bad))
			if err != nil {
				t.Fatal(err)
			}
			var ds appsv1.DaemonSet
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&ds); err != nil {
				continue // refused by the typed decode
			}
			errs := validateObject(ds.ObjectMeta, ds.Spec.Template)
			if sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector); err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
				errs = append(errs, "selector")
			}
			if len(errs) == 0 {
				t.Errorf("%s: accepted", name)
			}
		}
	}
	refused(good, map[string]func(string) string{
		"misspelt field": func(s string) string { return strings.Replace(s, "initContainers:", "initContainer:", 1) },
		"quantity":       func(s string) string { return strings.Replace(s, "cpu: 250m", "cpu: lots", 1) },
		"selector misses template": func(s string) string {
			return strings.Replace(s, "matchLabels:\n      app.kubernetes.io/instance: kiln-warm", "matchLabels:\n      app.kubernetes.io/instance: other", 1)
		},
		"volume mount names none": func(s string) string {
			return strings.Replace(s, "- name: kiln-ready\n              mountPath", "- name: kiln-gone\n              mountPath", 1)
		},
		"bad name": func(s string) string { return strings.Replace(s, "name: kiln-warm\n", "name: Kiln_Warm\n", 1) },
	})
	// The status pods' $(NODE_NAME) must name a declared variable from a
	// real downward API field.
	st, err := EmitK8s(K8sOptions{Refs: []string{"ghcr.io/acme/serve:1.2"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0", Status: true})
	if err != nil {
		t.Fatal(err)
	}
	refused(st, map[string]func(string) string{
		"undeclared $(VAR)": func(s string) string { return strings.Replace(s, "- name: NODE_NAME", "- name: NODE", 1) },
		"bad field path": func(s string) string {
			return strings.Replace(s, "fieldPath: spec.nodeName", "fieldPath: spec.node", 1)
		},
	})
}

// --per-zone N --zones a,b: one Job per zone, decoded as the API reads it.
// Each Job's pods may only land on nodes of its zone (its node affinity
// matches a node labelled with that zone, not one of another zone or one
// without the label), N of them on N different nodes (completions,
// parallelism and a hostname anti-affinity that selects exactly that
// Job's pods), and every Job leaves the same ready file on its nodes.
func TestEmitK8sPerZone(t *testing.T) {
	zones := []string{"us-east-1a", "us-east-1b"}
	out, err := EmitK8s(K8sOptions{Refs: []string{"ghcr.io/acme/serve:1.2"}, KilnImage: "ghcr.io/kiln-build/kiln:v0.3.0", PerZone: 2, Zones: zones})
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "job-per-zone.yaml")
	if *update {
		if err := os.WriteFile(golden, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want, err := os.ReadFile(golden); err != nil || !bytes.Equal(out, want) {
		t.Errorf("%s differs from the emitted YAML (%v; -update to accept):\n%s", golden, err, out)
	}
	var jobs []batchv1.Job
	for _, doc := range strings.Split(string(out), "\n---\n") {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var job batchv1.Job
		if err := json.Unmarshal(j, &job); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, job)
	}
	if len(jobs) != len(zones) {
		t.Fatalf("%d Jobs for %d zones:\n%s", len(jobs), len(zones), out)
	}
	node := func(zone string) labels.Set {
		l := labels.Set{"kubernetes.io/hostname": "n-" + zone}
		if zone != "" {
			l[ZoneLabel] = zone
		}
		return l
	}
	for i, job := range jobs {
		zone := zones[i]
		if job.Name != "kiln-warm-"+zone || *job.Spec.Completions != 2 || *job.Spec.Parallelism != 2 {
			t.Errorf("job %s: completions %d parallelism %d", job.Name, *job.Spec.Completions, *job.Spec.Parallelism)
		}
		pod := job.Spec.Template.Spec
		terms := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 {
			t.Fatalf("job %s: node selector terms %+v", job.Name, terms)
		}
		var reqs []metav1.LabelSelectorRequirement
		for _, r := range terms[0].MatchExpressions {
			reqs = append(reqs, metav1.LabelSelectorRequirement{Key: r.Key, Operator: metav1.LabelSelectorOperator(r.Operator), Values: r.Values})
		}
		sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchExpressions: reqs})
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range append(slices.Clone(zones), "") {
			if sel.Matches(node(z)) != (z == zone) {
				t.Errorf("job %s: node in zone %q: matched %v", job.Name, z, sel.Matches(node(z)))
			}
		}
		anti := pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		if len(anti) != 1 || anti[0].TopologyKey != "kubernetes.io/hostname" {
			t.Fatalf("job %s: anti-affinity %+v", job.Name, anti)
		}
		own, _ := metav1.LabelSelectorAsSelector(anti[0].LabelSelector)
		for j, other := range jobs {
			if own.Matches(labels.Set(other.Spec.Template.Labels)) != (i == j) {
				t.Errorf("job %s: its anti-affinity selects job %s's pods: %v", job.Name, other.Name, i != j)
			}
		}
		if args := pod.Containers[0].Args; !slices.Contains(args, "/var/run/kiln/kiln-warm") {
			t.Errorf("job %s: args %q: want the base name's ready file /var/run/kiln/kiln-warm", job.Name, args)
		}
	}
	for _, bad := range []struct {
		o    K8sOptions
		want string
	}{
		{K8sOptions{PerZone: 1}, "name the zones"},
		{K8sOptions{Zones: []string{"a"}}, "without a per-zone count"},
		{K8sOptions{PerZone: 1, Zones: []string{"a b"}}, `zone "a b" is not a label value`},
		{K8sOptions{PerZone: 1, Zones: []string{"eu.1", "eu_1"}}, "both give the Job name kiln-warm-eu-1"},
		{K8sOptions{PerZone: 1, Zones: []string{strings.Repeat("z", 60)}}, "longer than 63"},
	} {
		bad.o.Refs, bad.o.KilnImage = []string{"a"}, "k"
		if _, err := EmitK8s(bad.o); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: error %v, want %q", bad.o, err, bad.want)
		}
	}
}
