package weights

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// RunArgsInput says what to mount and where.
type RunArgsInput struct {
	// Mount is where the image expects the volume (Manifest.Mount).
	Mount string
	// SetDigest is shown so that operators can check .kiln-ready.
	SetDigest string
	// Volume is a named volume / PVC claim, or a host directory (absolute
	// or starting with ./).
	Volume string
	// Image is the slimmed application image ("IMAGE" when unknown).
	Image string
	// PullRef is what the init container pulls (the artifact by digest).
	PullRef string
	// InitImage is an image whose entrypoint is kiln.
	InitImage string
	// Twin is the volume's image-shaped twin by digest (kiln weights strip
	// --image-twin): set, the Kubernetes image-volume form is rendered too.
	Twin string
}

// Snippets are ready-to-paste mounts of a weights volume.
type Snippets struct {
	Docker     string `json:"docker"`
	Compose    string `json:"compose"`
	Kubernetes string `json:"kubernetes"`
	// KubernetesImageVolume mounts the twin as an image volume
	// (Kubernetes 1.33+ with containerd 2.1+ or CRI-O): no init container
	// and no PVC; the node's runtime pulls and verifies it like any image.
	KubernetesImageVolume string `json:"kubernetes_image_volume,omitempty"`
	// Warnings are about the snippets (an init image not pinned by
	// digest); [] when none.
	Warnings []string `json:"warnings"`
}

// UnpinnedInitImage is the warning for an init image named by tag, or ""
// when it is pinned by digest.
func UnpinnedInitImage(image string) string {
	if strings.Contains(image, "@sha256:") {
		return ""
	}
	repo := image
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return fmt.Sprintf("--init-image %s is not pinned by digest: the pod runs whatever that tag points to when the node pulls it; pin it: make image prints the digest, then pass --init-image %s@sha256:...", image, repo)
}

var volumeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// IsHostDir reports whether --volume names a host directory rather than a
// named volume.
func IsHostDir(v string) bool {
	return strings.HasPrefix(v, "/") || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") || v == "."
}

// RunArgs renders the docker run, Compose and Kubernetes snippets that
// mount the volume read-only at in.Mount. The Kubernetes pod fills the
// volume with an init container running `kiln weights pull`, which returns
// at once when the volume's marker already matches.
func RunArgs(in RunArgsInput) (*Snippets, error) {
	if in.Mount == "" || !strings.HasPrefix(in.Mount, "/") {
		return nil, fmt.Errorf("mount %q: want an absolute path", in.Mount)
	}
	host := IsHostDir(in.Volume)
	src := in.Volume
	if host {
		abs, err := filepath.Abs(in.Volume)
		if err != nil {
			return nil, err
		}
		src = abs
	} else if !volumeName.MatchString(in.Volume) {
		return nil, fmt.Errorf("--volume %q: not a volume name ([a-zA-Z0-9][a-zA-Z0-9_.-]*) nor a directory (/abs or ./rel)", in.Volume)
	}
	if in.Image == "" {
		in.Image = "IMAGE"
	}
	if in.InitImage == "" {
		in.InitImage = "ghcr.io/kiln-build/kiln:latest"
	}
	if in.PullRef == "" {
		in.PullRef = "WEIGHTS_REF"
	}
	s := &Snippets{Warnings: []string{}}
	if w := UnpinnedInitImage(in.InitImage); w != "" {
		s.Warnings = append(s.Warnings, w)
	}

	var d strings.Builder
	fmt.Fprintf(&d, "# fill the volume once (set digest %s), then mount it read-only\n", in.SetDigest)
	if host {
		fmt.Fprintf(&d, "kiln weights pull %s --into %s\n", shq(in.PullRef), shq(src))
	} else {
		fmt.Fprintf(&d, "docker run --rm -v %s:/weights %s weights pull %s --into /weights\n", shq(src), shq(in.InitImage), shq(in.PullRef))
	}
	fmt.Fprintf(&d, "docker run -v %s %s\n", shq(src+":"+in.Mount+":ro"), shq(in.Image))
	s.Docker = d.String()

	var c strings.Builder
	fmt.Fprintf(&c, "services:\n  app:\n    image: %s\n    volumes:\n", yq(in.Image))
	if host {
		fmt.Fprintf(&c, "      - type: bind\n        source: %s\n        target: %s\n        read_only: true\n", yq(src), yq(in.Mount))
	} else {
		fmt.Fprintf(&c, "      - type: volume\n        source: %s\n        target: %s\n        read_only: true\n", yq(src), yq(in.Mount))
		fmt.Fprintf(&c, "volumes:\n  %s:\n    external: true  # filled by: kiln weights pull %s --into <the volume>\n", yq(src), in.PullRef)
	}
	s.Compose = c.String()

	var k strings.Builder
	fmt.Fprintf(&k, "# Pod spec: an init container fills the volume (once filled, it hashes and heals it),\n# the app mounts it read-only where the image expects it.\nspec:\n")
	fmt.Fprintf(&k, "  initContainers:\n    - name: kiln-weights\n      image: %s\n      args: [\"weights\", \"pull\", %s, \"--into\", \"/weights\"]\n", yq(in.InitImage), jq(in.PullRef))
	fmt.Fprintf(&k, "      volumeMounts:\n        - name: weights\n          mountPath: /weights\n")
	fmt.Fprintf(&k, "  containers:\n    - name: app\n      image: %s\n      volumeMounts:\n        - name: weights\n          mountPath: %s\n          readOnly: true\n", yq(in.Image), yq(in.Mount))
	fmt.Fprintf(&k, "  volumes:\n    - name: weights\n")
	if host {
		fmt.Fprintf(&k, "      hostPath:\n        path: %s\n        type: DirectoryOrCreate\n", yq(src))
	} else {
		fmt.Fprintf(&k, "      persistentVolumeClaim:\n        claimName: %s\n", yq(src))
	}
	s.Kubernetes = k.String()

	if in.Twin != "" {
		var iv strings.Builder
		fmt.Fprintf(&iv, "# Pod spec: the volume's image-shaped twin mounted as an image volume (Kubernetes\n# ImageVolume, containerd 2.1+ or CRI-O); the runtime pulls it like any image.\nspec:\n")
		fmt.Fprintf(&iv, "  containers:\n    - name: app\n      image: %s\n      volumeMounts:\n        - name: weights\n          mountPath: %s\n          readOnly: true\n", yq(in.Image), yq(in.Mount))
		fmt.Fprintf(&iv, "  volumes:\n    - name: weights\n      image:\n        reference: %s\n        pullPolicy: IfNotPresent\n", yq(in.Twin))
		s.KubernetesImageVolume = iv.String()
	}
	return s, nil
}

// yq quotes a YAML scalar when it needs it (JSON strings are valid YAML).
func yq(s string) string {
	if regexp.MustCompile(`^[A-Za-z0-9_./@:-]+$`).MatchString(s) && !strings.HasPrefix(s, "-") && !strings.Contains(s, ": ") {
		return s
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// jq always quotes (inside flow sequences).
func jq(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// shq quotes a shell word when it needs it.
func shq(s string) string {
	if regexp.MustCompile(`^[A-Za-z0-9_./@:=,+-]+$`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
