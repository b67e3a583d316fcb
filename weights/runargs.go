package weights

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kiln-build/kiln/internal/termtable"
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
	return fmt.Sprintf("--init-image %s is not pinned by digest: the pod runs whatever that tag points to when the node pulls it; pin it by digest: pass --init-image %s@sha256:... (crane digest %s, or docker buildx imagetools inspect %s, prints it)", image, repo, image, image)
}

var volumeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// IsHostDir reports whether --volume names a host directory rather than a
// named volume.
func IsHostDir(v string) bool {
	return strings.HasPrefix(v, "/") || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") || v == "."
}

// RunArgs renders the docker run, Compose and Kubernetes snippets that
// mount the volume's model directory (DIR/model, ModelDir) read-only at
// in.Mount: the application sees the model files and none of kiln's
// bookkeeping, which lies beside that directory. The filling side (kiln
// weights pull, the init container) gets the whole volume. The Kubernetes
// pod fills the volume with an init container running `kiln weights pull`,
// which returns once it has hashed the files when the marker already
// matches.
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
	comment(&d, "", "fill the volume once (set digest "+in.SetDigest+"), then mount its "+ModelDir+" directory read-only: the app sees the model files, not kiln's bookkeeping beside them")
	if host {
		command(&d, "kiln", "weights", "pull", shq(in.PullRef), "--into", shq(src))
		command(&d, "docker", "run", "-v", shq(filepath.Join(src, ModelDir)+":"+in.Mount+":ro"), shq(in.Image))
	} else {
		command(&d, "docker", "run", "--rm", "-v", shq(src)+":/weights", shq(in.InitImage), "weights", "pull", shq(in.PullRef), "--into", "/weights")
		comment(&d, "", "volume-subpath needs Docker 26+")
		command(&d, "docker", "run", "--mount", shq("type=volume,src="+src+",dst="+in.Mount+",volume-subpath="+ModelDir+",ro"), shq(in.Image))
	}
	s.Docker = d.String()

	var c strings.Builder
	fmt.Fprintf(&c, "services:\n  app:\n    image: %s\n    volumes:\n", yq(in.Image))
	comment(&c, "      ", "the volume's "+ModelDir+" directory: the model files without kiln's bookkeeping")
	if host {
		fmt.Fprintf(&c, "      - type: bind\n        source: %s\n        target: %s\n        read_only: true\n", yq(filepath.Join(src, ModelDir)), yq(in.Mount))
	} else {
		fmt.Fprintf(&c, "      - type: volume\n        source: %s\n        target: %s\n        read_only: true\n", yq(src), yq(in.Mount))
		comment(&c, "        ", "subpath needs Docker 26+")
		fmt.Fprintf(&c, "        volume:\n          subpath: %s\n", ModelDir)
		fmt.Fprintf(&c, "volumes:\n  %s:\n", yq(src))
		comment(&c, "    ", "filled by: kiln weights pull "+in.PullRef+" --into <the volume>")
		fmt.Fprintf(&c, "    external: true\n")
	}
	s.Compose = c.String()

	var k strings.Builder
	comment(&k, "", "Pod spec: an init container fills the volume (once filled, it hashes and heals it); the app mounts its "+ModelDir+" directory (subPath) read-only where the image expects it, without kiln's bookkeeping.")
	fmt.Fprintf(&k, "spec:\n")
	fmt.Fprintf(&k, "  initContainers:\n    - name: kiln-weights\n      image: %s\n      args:\n", yq(in.InitImage))
	for _, a := range []string{"weights", "pull", in.PullRef, "--into", "/weights"} {
		fmt.Fprintf(&k, "        - %s\n", yq(a))
	}
	fmt.Fprintf(&k, "      volumeMounts:\n        - name: weights\n          mountPath: /weights\n")
	fmt.Fprintf(&k, "  containers:\n    - name: app\n      image: %s\n      volumeMounts:\n        - name: weights\n          mountPath: %s\n          subPath: %s\n          readOnly: true\n", yq(in.Image), yq(in.Mount), ModelDir)
	fmt.Fprintf(&k, "  volumes:\n    - name: weights\n")
	if host {
		fmt.Fprintf(&k, "      hostPath:\n        path: %s\n        type: DirectoryOrCreate\n", yq(src))
	} else {
		fmt.Fprintf(&k, "      persistentVolumeClaim:\n        claimName: %s\n", yq(src))
	}
	s.Kubernetes = k.String()

	if in.Twin != "" {
		var iv strings.Builder
		comment(&iv, "", "Pod spec: the volume's image-shaped twin mounted as an image volume (Kubernetes ImageVolume, containerd 2.1+ or CRI-O); the runtime pulls it like any image. The app mounts its "+ModelDir+" directory: subPath on an image volume needs Kubernetes 1.33+.")
		fmt.Fprintf(&iv, "spec:\n")
		fmt.Fprintf(&iv, "  containers:\n    - name: app\n      image: %s\n      volumeMounts:\n        - name: weights\n          mountPath: %s\n          subPath: %s\n          readOnly: true\n", yq(in.Image), yq(in.Mount), ModelDir)
		fmt.Fprintf(&iv, "  volumes:\n    - name: weights\n      image:\n        reference: %s\n        pullPolicy: IfNotPresent\n", yq(in.Twin))
		s.KubernetesImageVolume = iv.String()
	}
	return s, nil
}

// snippetWidth is the width the snippets are written to: they are
// printed to a terminal and pasted from it.
const snippetWidth = 80

// comment writes text as "# " comment lines at indent, wrapped within
// snippetWidth (a digest stays whole).
func comment(b *strings.Builder, indent, text string) {
	for _, l := range termtable.Wrap(text, snippetWidth-len(indent)-2, "") {
		fmt.Fprintf(b, "%s# %s\n", indent, l)
	}
}

// command writes a shell command of the words given (quoted already),
// continued with backslashes onto lines indented by four within
// snippetWidth; a word longer than a line (a reference with its digest)
// has a line of its own. Pasted, it is the one command.
func command(b *strings.Builder, words ...string) {
	line := ""
	for _, w := range words {
		switch {
		case line == "":
			line = w
		case termtable.Len(line)+1+termtable.Len(w)+2 <= snippetWidth:
			line += " " + w
		default:
			fmt.Fprintf(b, "%s \\\n", line)
			line = "    " + w
		}
	}
	fmt.Fprintf(b, "%s\n", line)
}

// yq quotes a YAML scalar when it needs it (JSON strings are valid YAML).
func yq(s string) string {
	if regexp.MustCompile(`^[A-Za-z0-9_./@:-]+$`).MatchString(s) && !strings.HasPrefix(s, "-") && !strings.Contains(s, ": ") {
		return s
	}
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
