package weights

import (
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/kiln-build/kiln/internal/testkit"
)

// The image-volume form mounts the twin's model directory (subPath), as
// the other forms mount the volume's: the application sees the model
// files, not the twin's bookkeeping layer; the comment says which
// Kubernetes it needs, and every line fits 80 columns.
func TestRunArgsTwinMountsModelDir(t *testing.T) {
	twin := "registry.local/acme/serve-weights@sha256:" + strings.Repeat("d", 64)
	s, err := RunArgs(RunArgsInput{Mount: "/app/models", SetDigest: "sha256:" + strings.Repeat("e", 64), Volume: "w",
		Image: "registry.local/acme/serve:1", Twin: twin})
	if err != nil {
		t.Fatal(err)
	}
	iv := s.KubernetesImageVolume
	var pod struct {
		Spec struct {
			Containers []struct {
				VolumeMounts []struct {
					Name      string `yaml:"name"`
					MountPath string `yaml:"mountPath"`
					SubPath   string `yaml:"subPath"`
					ReadOnly  bool   `yaml:"readOnly"`
				} `yaml:"volumeMounts"`
			} `yaml:"containers"`
			Volumes []struct {
				Image struct {
					Reference string `yaml:"reference"`
				} `yaml:"image"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal([]byte(iv), &pod); err != nil || len(pod.Spec.Containers) != 1 || len(pod.Spec.Volumes) != 1 {
		t.Fatalf("image-volume snippet: %v\n%s", err, iv)
	}
	vm := pod.Spec.Containers[0].VolumeMounts[0]
	if vm.MountPath != "/app/models" || vm.SubPath != ModelDir || !vm.ReadOnly || pod.Spec.Volumes[0].Image.Reference != twin {
		t.Errorf("image-volume snippet mounts %+v of %s, want the twin's %s directory read-only", vm, pod.Spec.Volumes[0].Image.Reference, ModelDir)
	}
	if flat := strings.Join(strings.Fields(strings.ReplaceAll(iv, "\n# ", "\n")), " "); !strings.Contains(flat, "subPath on an image volume needs Kubernetes 1.33+") {
		t.Errorf("the snippet does not say which Kubernetes mounts a subPath of an image volume:\n%s", iv)
	}
	for _, sn := range []string{s.Docker, s.Compose, s.Kubernetes, iv} {
		for _, l := range strings.Split(sn, "\n") {
			if !testkit.Fits(l, 80) {
				t.Errorf("line wider than 80 columns: %q", l)
			}
		}
	}
}
