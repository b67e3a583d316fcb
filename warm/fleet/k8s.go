package fleet

import (
	"bytes"
	"fmt"
	"math"
	"path"
	"regexp"
	"strings"

	"github.com/goccy/go-yaml"
)

// Kubernetes object kinds fleet emits.
const (
	KindDaemonSet = "DaemonSet"
	KindJob       = "Job"
)

// K8sOptions describe the objects EmitK8s prints.
type K8sOptions struct {
	Kind string // KindDaemonSet (default) or KindJob
	// Name of the object and its pods' app label (default kiln-warm).
	Name string
	// Namespace is the Kubernetes namespace of the object (empty: the
	// one kubectl applies to).
	Namespace string
	Refs      []string
	// KilnImage runs kiln in the pods.
	KilnImage string
	// PauseImage is the DaemonSet's main container, which only holds the
	// pod Ready once the warm init container succeeded (default
	// registry.k8s.io/pause:3.10, already on every node as the sandbox
	// image).
	PauseImage   string
	NodeSelector map[string]string
	// ContainerdSocket is the node's containerd socket (default
	// /run/containerd/containerd.sock); ContainerdNamespace the namespace
	// the kubelet's CRI uses (default k8s.io).
	ContainerdSocket    string
	ContainerdNamespace string
	// WarmArgs are extra kiln warm flags (--unpack, --limit-rate, ...).
	WarmArgs []string
	// Completions is the Job's pod count, one per node (default 1).
	Completions int
	// WeightsDir is kiln warm's --weights-into DIR: the node's directory
	// is mounted (hostPath, read-write) at the same path in the warm
	// container, so the weights volume lands on the node where the serving
	// pods mount it, not in the warm pod's throwaway filesystem.
	WeightsDir string
	// PerZone > 0 warms only PerZone nodes in each of Zones (values of
	// the topology.kubernetes.io/zone node label), leaving the other nodes
	// to pull from those through a peer-to-peer mirror (Spegel,
	// Dragonfly): BuildK8sObjects returns one Job per zone.
	PerZone int
	Zones   []string
	// Status emits, instead of the warm, pods that only ask each node's
	// containerd what it is missing: `kiln warm status --node NODE` (a
	// dry run, read-only) prints one JSON line per node, with the node's
	// name from the downward API, for `kubectl logs ... | kiln warm status
	// --from-logs -` to gather into the fleet table. WarmArgs are then
	// the status flags (--platform, --insecure-registry).
	Status bool
}

// Minimal typed mirrors of the Kubernetes objects fleet emits (fleet does
// not pull in k8s.io/api for a printer); field names and nesting follow
// the Kubernetes API so kubectl reads them as-is.
type (
	K8sObject struct {
		APIVersion string      `yaml:"apiVersion"`
		Kind       string      `yaml:"kind"`
		Metadata   K8sMeta     `yaml:"metadata"`
		Spec       K8sWorkload `yaml:"spec"`
	}
	K8sMeta struct {
		Name        string            `yaml:"name,omitempty"`
		Namespace   string            `yaml:"namespace,omitempty"`
		Labels      map[string]string `yaml:"labels,omitempty"`
		Annotations map[string]string `yaml:"annotations,omitempty"`
	}
	K8sWorkload struct {
		// DaemonSet
		Selector       *K8sSelector       `yaml:"selector,omitempty"`
		UpdateStrategy *K8sUpdateStrategy `yaml:"updateStrategy,omitempty"`
		// Job
		Completions             int `yaml:"completions,omitempty"`
		Parallelism             int `yaml:"parallelism,omitempty"`
		BackoffLimit            int `yaml:"backoffLimit,omitempty"`
		TTLSecondsAfterFinished int `yaml:"ttlSecondsAfterFinished,omitempty"`

		Template K8sPodTemplate `yaml:"template"`
	}
	K8sSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	K8sUpdateStrategy struct {
		Type          string            `yaml:"type"`
		RollingUpdate *K8sRollingUpdate `yaml:"rollingUpdate,omitempty"`
	}
	K8sRollingUpdate struct {
		MaxUnavailable string `yaml:"maxUnavailable"`
	}
	K8sPodTemplate struct {
		Metadata K8sMeta    `yaml:"metadata"`
		Spec     K8sPodSpec `yaml:"spec"`
	}
	K8sPodSpec struct {
		NodeSelector                  map[string]string `yaml:"nodeSelector,omitempty"`
		Tolerations                   []K8sToleration   `yaml:"tolerations,omitempty"`
		Affinity                      *K8sAffinity      `yaml:"affinity,omitempty"`
		RestartPolicy                 string            `yaml:"restartPolicy,omitempty"`
		TerminationGracePeriodSeconds int               `yaml:"terminationGracePeriodSeconds,omitempty"`
		InitContainers                []K8sContainer    `yaml:"initContainers,omitempty"`
		Containers                    []K8sContainer    `yaml:"containers"`
		Volumes                       []K8sVolume       `yaml:"volumes,omitempty"`
	}
	K8sToleration struct {
		Key      string `yaml:"key,omitempty"`
		Operator string `yaml:"operator"`
		Effect   string `yaml:"effect,omitempty"`
	}
	K8sAffinity struct {
		NodeAffinity    *K8sNodeAffinity    `yaml:"nodeAffinity,omitempty"`
		PodAntiAffinity *K8sPodAntiAffinity `yaml:"podAntiAffinity,omitempty"`
	}
	K8sNodeAffinity struct {
		Required *K8sNodeSelector `yaml:"requiredDuringSchedulingIgnoredDuringExecution"`
	}
	K8sNodeSelector struct {
		Terms []K8sNodeSelectorTerm `yaml:"nodeSelectorTerms"`
	}
	K8sNodeSelectorTerm struct {
		MatchExpressions []K8sNodeSelectorRequirement `yaml:"matchExpressions"`
	}
	K8sNodeSelectorRequirement struct {
		Key      string   `yaml:"key"`
		Operator string   `yaml:"operator"`
		Values   []string `yaml:"values"`
	}
	K8sPodAntiAffinity struct {
		Required []K8sAffinityTerm `yaml:"requiredDuringSchedulingIgnoredDuringExecution"`
	}
	K8sAffinityTerm struct {
		LabelSelector K8sSelector `yaml:"labelSelector"`
		TopologyKey   string      `yaml:"topologyKey"`
	}
	K8sContainer struct {
		Name            string              `yaml:"name"`
		Image           string              `yaml:"image"`
		Args            []string            `yaml:"args,omitempty"`
		Env             []K8sEnvVar         `yaml:"env,omitempty"`
		Resources       *K8sResources       `yaml:"resources,omitempty"`
		SecurityContext *K8sSecurityContext `yaml:"securityContext,omitempty"`
		VolumeMounts    []K8sVolumeMount    `yaml:"volumeMounts,omitempty"`
	}
	K8sEnvVar struct {
		Name      string        `yaml:"name"`
		ValueFrom *K8sEnvSource `yaml:"valueFrom,omitempty"`
	}
	K8sEnvSource struct {
		FieldRef *K8sFieldRef `yaml:"fieldRef"`
	}
	K8sFieldRef struct {
		FieldPath string `yaml:"fieldPath"`
	}
	K8sResources struct {
		Requests map[string]string `yaml:"requests,omitempty"`
		Limits   map[string]string `yaml:"limits,omitempty"`
	}
	K8sSecurityContext struct {
		RunAsUser                *int  `yaml:"runAsUser,omitempty"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation,omitempty"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem,omitempty"`
	}
	K8sVolumeMount struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly,omitempty"`
	}
	K8sVolume struct {
		Name     string       `yaml:"name"`
		HostPath *K8sHostPath `yaml:"hostPath,omitempty"`
	}
	K8sHostPath struct {
		Path string `yaml:"path"`
		Type string `yaml:"type,omitempty"`
	}
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Where the pods find the node's containerd and leave the readiness file.
const (
	podSocketPath = "/run/containerd/containerd.sock"
	podReadyDir   = "/var/run/kiln"
	hostReadyDir  = "/var/lib/kiln/ready"
)

// BuildK8s returns the object for o, with defaults applied.
func BuildK8s(o K8sOptions) (*K8sObject, error) {
	if o.Kind == "" {
		o.Kind = KindDaemonSet
	}
	if o.Name == "" {
		o.Name = "kiln-warm"
		if o.Status {
			o.Name = "kiln-warm-status"
		}
	}
	if !dnsLabel.MatchString(o.Name) {
		return nil, fmt.Errorf("name %q is not a DNS label (lowercase letters, digits, '-')", o.Name)
	}
	if o.Namespace != "" && !dnsLabel.MatchString(o.Namespace) {
		return nil, fmt.Errorf("namespace %q is not a DNS label", o.Namespace)
	}
	if len(o.Refs) == 0 {
		return nil, fmt.Errorf("no image to warm")
	}
	if err := o.checkValues(); err != nil {
		return nil, err
	}
	if o.KilnImage == "" {
		return nil, fmt.Errorf("no kiln image: pass --kiln-image")
	}
	if o.PauseImage == "" {
		o.PauseImage = "registry.k8s.io/pause:3.10"
	}
	if o.ContainerdSocket == "" {
		o.ContainerdSocket = "/run/containerd/containerd.sock"
	}
	if o.ContainerdNamespace == "" {
		o.ContainerdNamespace = "k8s.io"
	}
	if o.WeightsDir != "" {
		if err := checkWeightsDir(o.WeightsDir); err != nil {
			return nil, err
		}
		o.WeightsDir = path.Clean(o.WeightsDir)
	}
	if o.Status && o.WeightsDir != "" {
		return nil, fmt.Errorf("--status with --weights-into: the status pods check images only")
	}
	labels := map[string]string{"app.kubernetes.io/name": "kiln-warm", "app.kubernetes.io/instance": o.Name}
	root := 0
	no, yes := false, true
	args := append([]string{"warm"}, o.Refs...)
	args = append(args, "--target", "containerd:"+podSocketPath, "--namespace", o.ContainerdNamespace,
		"--ready-file", podReadyDir+"/"+o.Name)
	if o.WeightsDir != "" {
		args = append(args, "--weights-into", o.WeightsDir)
	}
	args = append(args, o.WarmArgs...)
	warm := K8sContainer{
		Name: "warm", Image: o.KilnImage, Args: args,
		Resources: &K8sResources{Requests: map[string]string{"cpu": "250m", "memory": "256Mi"}, Limits: map[string]string{"memory": "1Gi"}},
		// root only to reach the containerd socket; nothing else is granted.
		SecurityContext: &K8sSecurityContext{RunAsUser: &root, AllowPrivilegeEscalation: &no},
		VolumeMounts: []K8sVolumeMount{
			{Name: "containerd-sock", MountPath: podSocketPath},
			{Name: "kiln-ready", MountPath: podReadyDir},
		},
	}
	pod := K8sPodSpec{
		NodeSelector: o.NodeSelector,
		// GPU nodes carry this taint so ordinary pods stay off; the warm
		// pod must land exactly there.
		Tolerations: []K8sToleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
		Volumes: []K8sVolume{
			{Name: "containerd-sock", HostPath: &K8sHostPath{Path: o.ContainerdSocket, Type: "Socket"}},
			{Name: "kiln-ready", HostPath: &K8sHostPath{Path: hostReadyDir, Type: "DirectoryOrCreate"}},
		},
	}
	if o.Status {
		// Read-only: a dry run against the node's containerd, nothing
		// written (no ready file); the node's name comes from the
		// downward API so each log line says whose it is.
		warm.Name = "status"
		warm.Args = append(append([]string{"warm", "status", "--node", "$(NODE_NAME)"}, o.Refs...),
			"--target", "containerd:"+podSocketPath, "--namespace", o.ContainerdNamespace)
		warm.Args = append(warm.Args, o.WarmArgs...)
		warm.Env = []K8sEnvVar{{Name: "NODE_NAME", ValueFrom: &K8sEnvSource{FieldRef: &K8sFieldRef{FieldPath: "spec.nodeName"}}}}
		warm.SecurityContext.ReadOnlyRootFilesystem = &yes
		warm.VolumeMounts = warm.VolumeMounts[:1]
		pod.Volumes = pod.Volumes[:1]
	}
	if o.WeightsDir != "" {
		// Same path inside and out: the manifest kiln writes there and the
		// serving pods' mounts name one directory.
		warm.VolumeMounts = append(warm.VolumeMounts, K8sVolumeMount{Name: "kiln-weights", MountPath: o.WeightsDir})
		pod.Volumes = append(pod.Volumes, K8sVolume{Name: "kiln-weights", HostPath: &K8sHostPath{Path: o.WeightsDir, Type: "DirectoryOrCreate"}})
	}
	obj := &K8sObject{
		Kind:     o.Kind,
		Metadata: K8sMeta{Name: o.Name, Namespace: o.Namespace, Labels: labels, Annotations: map[string]string{"kiln.dev/images": strings.Join(o.Refs, ",")}},
	}
	switch o.Kind {
	case KindDaemonSet:
		// The warm runs as an init container: the pod turns Ready only
		// after every blob is verified present, so `kubectl rollout status`
		// is the fleet's readiness gate. The pause container then holds the
		// pod (and the node's ready file) without using resources.
		obj.APIVersion = "apps/v1"
		obj.Spec.Selector = &K8sSelector{MatchLabels: labels}
		obj.Spec.UpdateStrategy = &K8sUpdateStrategy{Type: "RollingUpdate", RollingUpdate: &K8sRollingUpdate{MaxUnavailable: "100%"}}
		pod.InitContainers = []K8sContainer{warm}
		pod.Containers = []K8sContainer{{Name: "ready", Image: o.PauseImage,
			Resources: &K8sResources{Requests: map[string]string{"cpu": "1m", "memory": "8Mi"}}}}
		pod.TerminationGracePeriodSeconds = 5
	case KindJob:
		// One pod per node: anti-affinity on the hostname spreads
		// Completions pods over distinct nodes.
		n := max(o.Completions, 1)
		obj.APIVersion = "batch/v1"
		obj.Spec.Completions, obj.Spec.Parallelism = n, n
		obj.Spec.BackoffLimit = 4
		obj.Spec.TTLSecondsAfterFinished = 3600
		pod.RestartPolicy = "OnFailure"
		pod.Affinity = &K8sAffinity{PodAntiAffinity: &K8sPodAntiAffinity{Required: []K8sAffinityTerm{{
			LabelSelector: K8sSelector{MatchLabels: labels}, TopologyKey: "kubernetes.io/hostname"}}}}
		pod.Containers = []K8sContainer{warm}
	default:
		return nil, fmt.Errorf("kind %q: emit DaemonSet or Job", o.Kind)
	}
	obj.Spec.Template = K8sPodTemplate{Metadata: K8sMeta{Labels: labels}, Spec: pod}
	return obj, nil
}

// checkWeightsDir refuses a --weights-into directory a hostPath cannot
// name (relative: relative to what, on the node?) or one that would cover or
// sit inside the pod's own mounts (the containerd socket, the ready dir).
func checkWeightsDir(dir string) error {
	if !path.IsAbs(dir) {
		return fmt.Errorf("--weights-into %q: the node's directory must be an absolute path", dir)
	}
	d := path.Clean(dir)
	for _, m := range []string{podSocketPath, podReadyDir} {
		if d == "/" || d == m || strings.HasPrefix(m, d+"/") || strings.HasPrefix(d, m+"/") {
			return fmt.Errorf("--weights-into %q overlaps the warm pod's mount %s", dir, m)
		}
	}
	return nil
}

// ZoneLabel is the well-known node label naming a node's zone.
const ZoneLabel = "topology.kubernetes.io/zone"

// zoneLabelValue is what a label value may hold (the zone is matched
// against node labels, so it must be one).
var zoneLabelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$`)

// BuildK8sObjects returns the objects for o: BuildK8s's one object, or
// with PerZone one Job per zone.
//
// Why a Job per zone (nodeAffinity on the zone label, hostname
// anti-affinity among that Job's pods) and not one Job with a
// topologySpreadConstraint (maxSkew 1, DoNotSchedule): the spread counts
// only zones that have an eligible node at scheduling time, so a zone
// whose GPU nodes are all full, tainted or not yet up simply drops out
// and its share lands in the other zones, with the Job complete and the
// zone cold; maxSkew bounds differences, not "N in every zone". A Job
// per zone pins exactly PerZone pods to that zone; one that cannot be
// placed stays Pending under that zone's name, and `kubectl wait
// --for=condition=complete` per Job says which zones are seeded.
func BuildK8sObjects(o K8sOptions) ([]*K8sObject, error) {
	if o.Status && o.PerZone > 0 {
		return nil, fmt.Errorf("--status asks every selected node; --per-zone does not apply")
	}
	if o.PerZone <= 0 {
		if len(o.Zones) > 0 {
			return nil, fmt.Errorf("zones %v without a per-zone count (--per-zone N)", o.Zones)
		}
		obj, err := BuildK8s(o)
		if err != nil {
			return nil, err
		}
		return []*K8sObject{obj}, nil
	}
	if len(o.Zones) == 0 {
		return nil, fmt.Errorf("per-zone %d: name the zones (--zones a,b: values of the nodes' %s label)", o.PerZone, ZoneLabel)
	}
	base := or(o.Name, "kiln-warm")
	seen := map[string]string{}
	var objs []*K8sObject
	for _, z := range o.Zones {
		if !zoneLabelValue.MatchString(z) {
			return nil, fmt.Errorf("zone %q is not a label value (letters, digits, '-', '_', '.', at most 63)", z)
		}
		name := base + "-" + zoneSuffix(z)
		if len(name) > 63 {
			return nil, fmt.Errorf("zone %q: Job name %q is longer than 63 characters (shorten --name)", z, name)
		}
		if prev, dup := seen[name]; dup {
			return nil, fmt.Errorf("zones %q and %q both give the Job name %s", prev, z, name)
		}
		seen[name] = z
		zo := o
		zo.Kind, zo.Completions = KindJob, o.PerZone
		obj, err := BuildK8s(zo)
		if err != nil {
			return nil, err
		}
		// The Job and its pods are named per zone; the node's ready file
		// keeps the base name (--ready-file .../NAME), so serving pods look
		// for one path whichever zone they run in.
		labels := map[string]string{"app.kubernetes.io/name": "kiln-warm", "app.kubernetes.io/instance": name, "kiln.dev/zone": z}
		obj.Metadata.Name, obj.Metadata.Labels = name, labels
		obj.Spec.Template.Metadata.Labels = labels
		pod := &obj.Spec.Template.Spec
		pod.Affinity = &K8sAffinity{
			NodeAffinity: &K8sNodeAffinity{Required: &K8sNodeSelector{Terms: []K8sNodeSelectorTerm{{
				MatchExpressions: []K8sNodeSelectorRequirement{{Key: ZoneLabel, Operator: "In", Values: []string{z}}}}}}},
			PodAntiAffinity: &K8sPodAntiAffinity{Required: []K8sAffinityTerm{{
				LabelSelector: K8sSelector{MatchLabels: labels}, TopologyKey: "kubernetes.io/hostname"}}},
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// zoneSuffix is zone as a DNS label part: lowercase, other characters '-'.
func zoneSuffix(z string) string {
	b := []byte(strings.ToLower(z))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}

// checkValues refuses what YAML would carry but the pods would not mean:
// a control character (a newline cut a header comment short and split
// an argument), a --ready-file of the caller's (kiln's own, which the
// pods' readiness reads, must be the last word), and counts a Kubernetes
// int32 cannot hold.
func (o K8sOptions) checkValues() error {
	check := func(what, v string) error {
		if i := strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
			return fmt.Errorf("%s %q holds the control character %U: every value in the pod spec is one line", what, v, rune(v[i]))
		}
		return nil
	}
	vals := [][2]string{{"name", o.Name}, {"namespace", o.Namespace}, {"--kiln-image", o.KilnImage}, {"pause image", o.PauseImage},
		{"containerd socket", o.ContainerdSocket}, {"containerd namespace", o.ContainerdNamespace}, {"--weights-into", o.WeightsDir}}
	for _, r := range o.Refs {
		vals = append(vals, [2]string{"image", r})
	}
	for _, a := range o.WarmArgs {
		vals = append(vals, [2]string{"warm argument", a})
		if a == "--ready-file" || strings.HasPrefix(a, "--ready-file=") {
			return fmt.Errorf("warm argument %s: the pods' readiness reads kiln's own --ready-file; leave it out", a)
		}
	}
	for k, v := range o.NodeSelector {
		vals = append(vals, [2]string{"--node-selector key", k}, [2]string{"--node-selector value", v})
	}
	for _, z := range o.Zones {
		vals = append(vals, [2]string{"zone", z})
	}
	for _, v := range vals {
		if err := check(v[0], v[1]); err != nil {
			return err
		}
	}
	for _, n := range []struct {
		what string
		n    int
	}{{"--completions", o.Completions}, {"--per-zone", o.PerZone}} {
		if n.n < 0 || n.n > math.MaxInt32 {
			return fmt.Errorf("%s %d: Kubernetes counts pods in an int32 (at most %d)", n.what, n.n, math.MaxInt32)
		}
	}
	return nil
}

// EmitK8s prints the objects for o as YAML, one document each.
func EmitK8s(o K8sOptions) ([]byte, error) {
	objs, err := BuildK8sObjects(o)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if o.PerZone > 0 {
		fmt.Fprintf(&buf, "# kiln warm: a Job per zone pre-warms %s into containerd (namespace %s) on %d node(s) in each of %s;\n"+
			"# the other nodes pull through the cluster's peer-to-peer mirror (docs/fleet.md).\n",
			strings.Join(o.Refs, ", "), or(o.ContainerdNamespace, "k8s.io"), o.PerZone, strings.Join(o.Zones, ", "))
	} else if o.Status {
		fmt.Fprintf(&buf, "# kiln warm: %s %s asks each selected node's containerd (namespace %s) what it lacks of %s (read-only);\n"+
			"# kubectl logs -l app.kubernetes.io/instance=%s -c status --prefix --tail=-1 | kiln warm status --from-logs -\n",
			o.kind(), or(o.Name, "kiln-warm-status"), or(o.ContainerdNamespace, "k8s.io"), strings.Join(o.Refs, ", "), or(o.Name, "kiln-warm-status"))
	} else {
		fmt.Fprintf(&buf, "# kiln warm: %s %s pre-warms %s into containerd (namespace %s) on each selected node.\n",
			o.kind(), or(o.Name, "kiln-warm"), strings.Join(o.Refs, ", "), or(o.ContainerdNamespace, "k8s.io"))
	}
	for i, obj := range objs {
		b, err := yaml.MarshalWithOptions(obj, yaml.IndentSequence(true))
		if err != nil {
			return nil, err
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

func (o K8sOptions) kind() string { return or(o.Kind, KindDaemonSet) }

// ParseSelector parses k=v[,k=v] into a node selector.
func ParseSelector(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, p := range pairs {
		for _, kv := range strings.Split(p, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("node selector %q: want key=value", kv)
			}
			m[k] = v
		}
	}
	return m, nil
}
