package targets

import (
	"context"
	"fmt"

	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/containerd"
	"github.com/kiln-build/kiln/warm/docker"
	"github.com/kiln-build/kiln/warm/ocilayout"
)

// Options configure Open.
type Options struct {
	// Namespace is the containerd namespace (default "default").
	Namespace string
	// Snapshotter for --unpack: "" or "auto" picks overlayfs when the
	// daemon has it working, else native.
	Snapshotter string
	// DockerStage is where the docker target stages layer blobs before
	// docker load (an OCI layout; default docker.DefaultStage()).
	DockerStage string
	// KeepStage keeps the staged blobs after a successful load.
	KeepStage bool
	// Ingest is how blob bytes reach containerd: containerd.IngestAuto
	// (default), IngestDirect or IngestGRPC.
	Ingest string
	// ContainerdRoot overrides the content root found through the
	// introspection API: the daemon's --root or its content directory.
	ContainerdRoot string
	// UnpackConcurrency is how many layers --unpack applies at once where
	// the snapshotter keeps layers independent (overlayfs); 0 means
	// containerd.DefaultUnpackConcurrency, 1 one layer at a time on its
	// committed parent.
	UnpackConcurrency int
	// ErofsCache is a directory of the EROFS snapshotter's
	// layer_content_caches: --unpack into it converts each tar layer
	// there, by diff ID, and the snapshots mount it from there.
	ErofsCache string
	// DryRun opens the target to be looked at, never changed: an oci:
	// layout that does not exist yet is not created (it holds nothing).
	DryRun bool
}

// Open connects to the target spec names.
func Open(ctx context.Context, spec warm.TargetSpec, o Options) (warm.Target, error) {
	switch spec.Kind {
	case "oci":
		if o.DryRun {
			return &ocilayout.OCILayout{Dir: spec.Addr}, nil
		}
		return ocilayout.New(spec.Addr)
	case "containerd":
		t, err := containerd.Open(ctx, spec.Addr, containerd.Options{
			Namespace: o.Namespace, Snapshotter: o.Snapshotter, Ingest: o.Ingest,
			ContainerdRoot: o.ContainerdRoot, UnpackConcurrency: o.UnpackConcurrency, ErofsCache: o.ErofsCache,
		})
		if err != nil {
			return nil, err
		}
		return t, nil
	case "docker":
		t, err := docker.Open(ctx, spec.Addr, docker.Options{Stage: o.DockerStage, KeepStage: o.KeepStage})
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	return nil, fmt.Errorf("target %s: unknown kind", spec)
}
