package warm

import (
	"context"
	"fmt"
)

// TargetOptions configure OpenTarget.
type TargetOptions struct {
	// Namespace is the containerd namespace (default "default").
	Namespace string
	// Snapshotter for --unpack: "" or "auto" picks overlayfs when the
	// daemon has it working, else native.
	Snapshotter string
	// DockerStage is where the docker target stages layer blobs before
	// docker load (an OCI layout; default DefaultDockerStage()).
	DockerStage string
	// KeepStage keeps the staged blobs after a successful load.
	KeepStage bool
	// Ingest is how blob bytes reach containerd: IngestAuto (default),
	// IngestDirect or IngestGRPC (see ingest_direct.go).
	Ingest string
	// ContainerdRoot overrides the content root found through the
	// introspection API: the daemon's --root or its content directory.
	ContainerdRoot string
	// UnpackConcurrency is how many layers --unpack applies at once where
	// the snapshotter keeps layers independent (overlayfs); 0 means
	// DefaultUnpackConcurrency, 1 one layer at a time on its committed
	// parent.
	UnpackConcurrency int
	// ErofsCache is a directory of the EROFS snapshotter's
	// layer_content_caches: --unpack into it converts each tar layer
	// there, by diff ID, and the snapshots mount it from there.
	ErofsCache string
	// DryRun opens the target to be looked at, never changed: an oci:
	// layout that does not exist yet is not created (it holds nothing).
	DryRun bool
}

// OpenTarget connects to the target spec names.
func OpenTarget(ctx context.Context, spec TargetSpec, o TargetOptions) (Target, error) {
	switch spec.Kind {
	case "oci":
		if o.DryRun {
			return &OCILayout{Dir: spec.Addr}, nil
		}
		return NewOCILayout(spec.Addr)
	case "containerd":
		return openContainerd(ctx, spec.Addr, o)
	case "docker":
		return openDocker(ctx, spec.Addr, o)
	}
	return nil, fmt.Errorf("target %s: unknown kind", spec)
}
