package warm

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kiln-build/kiln/layers/blob"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Target is a host's image store that kiln warm fills: a Store (it holds
// blobs: containerd's content store, an OCI layout) or a Loader (its unit
// is the image: a Docker engine).
type Target interface {
	// String names the target as the user wrote it (reports, errors).
	String() string
	Close() error
}

// Store is a target that holds blobs, as the engine sees it: asked per
// blob, written through resumable, verifying Writers, then told to record
// the images (containerd's content store, an OCI layout directory).
type Store interface {
	Target
	// Has says whether blob d is committed in the store.
	Has(ctx context.Context, d ocispec.Descriptor) (bool, error)
	// Writer opens a resumable writer for d: its Offset is the number of
	// bytes an earlier, interrupted writer left. It returns
	// blob.ErrAlreadyExists when d is already committed.
	Writer(ctx context.Context, d ocispec.Descriptor) (blob.Writer, error)
	// Record makes the set's images visible under their names and safe
	// from garbage collection (image records, GC labels, index entries).
	Record(ctx context.Context, s *Set) error
	// Free returns the directory blobs land in and the bytes free there.
	Free(ctx context.Context) (dir string, avail int64, err error)
}

// Loader is a target whose unit is the image, not the blob (a Docker
// engine: no per-blob presence or ingest API). The engine asks it for a
// plan, fills the stage it opens with the blobs the plan stages (the
// engine's own fetch: resumable, Range chunks, verified), then has it
// load the images from there.
type Loader interface {
	Target
	// Plan says which blobs of s the target lacks.
	Plan(ctx context.Context, s *Set) (*LoadPlan, error)
	// Stage opens the stage the engine fills with the plan's Stage
	// blobs; with checkSpace it first checks that the stage and the
	// target have room for what is missing.
	Stage(ctx context.Context, s *Set, p *LoadPlan, checkSpace bool) (Stage, error)
	// Load loads the images of s the target lacks, their staged blobs
	// read from staged. A *StageError says kiln's side failed and the
	// target loaded nothing: staging again may succeed.
	Load(ctx context.Context, s *Set, staged Stage) error
	// Unstage drops what staged holds for s after the load (unless the
	// target keeps its stage).
	Unstage(ctx context.Context, s *Set, staged Stage) error
}

// LoadPlan is what a Loader lacks of a set.
type LoadPlan struct {
	// Missing are the indexes in Set.Blobs of the blobs the target
	// lacks (the images' configs and manifests among them: Load writes
	// those from the set).
	Missing []int
	// Stage are the blobs Load reads from the stage, each once.
	Stage []*Blob
}

// Stage is a Store a Loader reads back: the engine fills it, the Loader
// streams the blobs out of it (an OCI layout on the host).
type Stage interface {
	Store
	// Held is how many bytes of d the stage holds, committed or left by
	// an unfinished writer (for the space preflight and a re-stage).
	Held(d ocispec.Descriptor) int64
	// Open reads the committed blob d.
	Open(d ocispec.Descriptor) (io.ReadCloser, error)
	// Remove drops blob d, committed or partial.
	Remove(d ocispec.Descriptor) error
}

// StageError is a Loader's failure on kiln's side of a load (a staged
// blob that no longer verified and was removed, a stream cut short): the
// target loaded nothing, and staging again may succeed.
type StageError struct {
	Err error
	// Digest is the staged blob that failed ("" when none did) and
	// BlobErr why, for the blob's report.
	Digest  digest.Digest
	BlobErr error
}

func (e *StageError) Error() string { return e.Err.Error() }
func (e *StageError) Unwrap() error { return e.Err }

// Unpacker is a target that can unpack images into a snapshotter, so the
// first container start does no work.
type Unpacker interface {
	Unpack(ctx context.Context, s *Set) error
}

// UnpackReporter is an Unpacker that says how its last unpack went, for
// the log: how many layers were applied while downloading, from committed
// blobs or by the daemon (with the last fallback's reason), and per layer
// what was done when.
type UnpackReporter interface {
	Streamed() (streamed, local, fellBack int64, lastErr error)
	UnpackTrace() (trace []LayerTrace, mode, why string)
}

// Verifier is a target with a readiness check beyond its blobs (an image
// record, a loaded image).
type Verifier interface {
	Verify(ctx context.Context, s *Set) error
}

// Leaser is a target whose garbage collector needs a lease to spare blobs
// between their commit and the image record (containerd). Each run takes
// a lease of its own, and Release drops only that one.
type Leaser interface {
	Lease(ctx context.Context, s *Set) error
	Release(ctx context.Context) error
}

// ZstdChecker is a target that may not run zstd layers (old engines); the
// returned reason is empty when it can.
type ZstdChecker interface {
	NoZstd(ctx context.Context) string
}

// LayerTrace is what --unpack did with one layer, for the log.
type LayerTrace struct {
	Digest digest.Digest
	Size   int64
	How    string // present, streamed, local, daemon
	// Staged: applied before its parent was committed.
	Staged bool
	// Start, Applied, Verified and Committed are offsets from the
	// unpack's start: when the layer's apply began, when its bytes were
	// written, when containerd had committed (verified) its blob, and
	// when its snapshot was committed.
	Start, Applied, Verified, Committed time.Duration
}

// How a layer got into the snapshotter (LayerTrace.How).
const (
	HowPresent  = "present"  // its snapshot existed
	HowStreamed = "streamed" // applied from the ingest while it downloaded
	HowLocal    = "local"    // applied in-process from the committed blob file
	HowDaemon   = "daemon"   // applied by containerd's diff service
)

// TargetSpec is a parsed --target.
type TargetSpec struct {
	Kind string // containerd, oci, docker
	// Addr is the socket (containerd, docker) or directory (oci).
	Addr string
}

// Default sockets.
const (
	DefaultContainerdSocket = "/run/containerd/containerd.sock"
	DefaultDockerSocket     = "/var/run/docker.sock"
)

// ParseTarget parses containerd[:SOCKET], oci:DIR or docker[:SOCKET].
func ParseTarget(s string) (TargetSpec, error) {
	kind, addr, _ := strings.Cut(s, ":")
	switch kind {
	case "containerd":
		if addr == "" {
			addr = DefaultContainerdSocket
		}
	case "docker":
		if addr == "" {
			addr = DefaultDockerSocket
		}
	case "oci":
		if addr == "" {
			return TargetSpec{}, fmt.Errorf("target %q: oci needs a directory (oci:DIR)", s)
		}
	default:
		return TargetSpec{}, fmt.Errorf("target %q: want containerd[:SOCKET], oci:DIR or docker[:SOCKET]", s)
	}
	return TargetSpec{Kind: kind, Addr: addr}, nil
}

func (t TargetSpec) String() string { return t.Kind + ":" + t.Addr }
