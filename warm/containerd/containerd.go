package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/identifiers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/internal/unixsock"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Containerd writes into a containerd content store through its gRPC
// content API, the way containerd's own pull does: one named ingest per
// blob ("kiln-warm-<digest>"), so a killed run resumes from the bytes the
// daemon already holds; Commit(size, digest) verifies before the blob is
// visible. A lease protects blobs while the warm runs; the image record and
// the gc.ref labels on index, manifest and config protect them after.
type Containerd struct {
	addr        string
	ns          string
	snapshotter string
	c           *client.Client
	cs          content.Store
	leaseID     string

	// ingest is the ingest mode (IngestAuto, IngestDirect, IngestGRPC);
	// root is the content store directory kiln writes ingests into
	// directly ("" when bytes go through the gRPC stream), directWhy why
	// not. See ingest_direct.go.
	ingest    string
	mu        sync.Mutex
	root      string
	directWhy string
	// live: direct ingests being written, for the pipelined unpack;
	// streamed counts layers applied while they downloaded, local those
	// applied in-process from committed blob files, inprocFailures the
	// in-process applies that fell back to the daemon's diff service.
	live           liveIngests
	streamed       atomic.Int64
	local          atomic.Int64
	inprocFailures atomic.Int64
	// criSn is the snapshotter the kubelet's CRI runs pods on, asked
	// once (criSnapshotter, cri.go).
	criOnce sync.Once
	criSn   string
	criErr  error
	// noLink: the EROFS snapshotter marks layer images immutable, so
	// native EROFS layers are copied into their snapshots, not linked.
	noLink    atomic.Bool
	streamErr error // the last fallback's reason
	// earlyHits and earlyMisses count direct ingests whose early open
	// (startEarly) hashed the whole blob, or caught up too soon.
	earlyHits, earlyMisses atomic.Int64

	// unpackConcurrency is Options.UnpackConcurrency; stage the
	// stage mode the last unpack used (stageWhy why it was off), trace
	// what it did per layer, unpackStart when it began (unpack_staged.go).
	unpackConcurrency int
	stage, stageWhy   string
	trace             []*warm.LayerTrace
	unpackStart       time.Time

	// erofsCache is Options.ErofsCache.
	erofsCache string
}

// Streamed returns how many layers --unpack applied in kiln's process
// while they were still downloading (streamed) or from the committed blob
// file (local), and how many in-process applies fell back to containerd's
// diff service (with the last reason).
func (t *Containerd) Streamed() (streamed, local, fellBack int64, lastErr error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.streamed.Load(), t.local.Load(), t.inprocFailures.Load(), t.streamErr
}

// IngestRef is the ingest name kiln uses for a blob.
func IngestRef(d digest.Digest) string { return "kiln-warm-" + d.String() }

// Options configure Open.
type Options struct {
	// Namespace is the containerd namespace (default "default").
	Namespace string
	// Snapshotter for --unpack: "" or "auto" picks overlayfs when the
	// daemon has it working, else native.
	Snapshotter string
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
	// layer_content_caches (targets.Options.ErofsCache).
	ErofsCache string
}

// socketHint says what to do when addr has no socket: start containerd,
// or name where its socket is (never the path that just failed).
func socketHint(addr string) string {
	for _, p := range []string{warm.DefaultContainerdSocket, "/run/k3s/containerd/containerd.sock", "/var/snap/microk8s/common/run/containerd.sock"} {
		if p == addr {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return "a containerd listens at " + p + ": --target containerd:" + p
		}
	}
	if addr == warm.DefaultContainerdSocket {
		return "is containerd running? (systemctl start containerd), or name its socket: --target containerd:SOCKET"
	}
	return "is containerd running? its default socket is " + warm.DefaultContainerdSocket + " (--target containerd)"
}

// Open connects to the containerd daemon listening on the socket addr.
func Open(ctx context.Context, addr string, o Options) (*Containerd, error) {
	if _, err := os.Stat(addr); err != nil {
		return nil, fmt.Errorf("target containerd:%s: no socket there: %s", addr, socketHint(addr))
	}
	if err := unixsock.Check(ctx, addr, unixsock.Containerd); err != nil {
		return nil, fmt.Errorf("target containerd:%s: %w", addr, err)
	}
	ns := o.Namespace
	if ns == "" {
		ns = "default"
	}
	if err := identifiers.Validate(ns); err != nil {
		return nil, fmt.Errorf("--namespace: %v", err)
	}
	c, err := client.New(addr, client.WithDefaultNamespace(ns), client.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("target containerd:%s: %v", addr, err)
	}
	t := &Containerd{addr: addr, ns: ns, snapshotter: o.Snapshotter, c: c, cs: c.ContentStore(), ingest: o.Ingest, unpackConcurrency: o.UnpackConcurrency, erofsCache: o.ErofsCache}
	if _, err := c.Version(t.nsCtx(ctx)); err != nil {
		c.Close()
		return nil, fmt.Errorf("target containerd:%s: %v", addr, err)
	}
	if err := t.setupDirect(ctx, o); err != nil {
		c.Close()
		return nil, err
	}
	return t, nil
}

// setupDirect decides whether ingests are written directly: the content
// root comes from --containerd-root or the daemon's introspection API (the
// content plugin exports it), and must be readable and writable here.
// Whether it is the daemon's own directory (not a same-named path on
// another host) is checked per blob, when the ingest containerd just
// created must show up under it.
func (t *Containerd) setupDirect(ctx context.Context, o Options) error {
	switch t.ingest {
	case "":
		t.ingest = IngestAuto
	case IngestAuto, IngestDirect:
	case IngestGRPC:
		t.directWhy = "--ingest grpc"
		return nil
	default:
		return fmt.Errorf("--ingest %q: want auto, direct or grpc", t.ingest)
	}
	root := ""
	if o.ContainerdRoot != "" {
		r, err := contentRootFor(o.ContainerdRoot)
		if err != nil {
			return err
		}
		root = r
	} else {
		r, _, err := t.Free(ctx)
		if err != nil {
			t.directWhy = "content root unknown: " + err.Error()
		}
		root = r
	}
	if root != "" {
		if why := writableDir(root); why != "" {
			t.directWhy = why
			root = ""
		}
	}
	if root == "" && t.ingest == IngestDirect {
		return fmt.Errorf("target %s: --ingest direct: %s", t, t.directWhy)
	}
	t.root = root
	return nil
}

// Direct returns the content root ingests are written into directly, or ""
// and why bytes go through the gRPC content API.
func (t *Containerd) Direct() (root, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.root, t.directWhy
}

func (t *Containerd) String() string { return "containerd:" + t.addr }

// Close implements Target.
func (t *Containerd) Close() error { return t.c.Close() }

func (t *Containerd) nsCtx(ctx context.Context) context.Context {
	ctx = namespaces.WithNamespace(ctx, t.ns)
	if t.leaseID != "" {
		ctx = leases.WithLease(ctx, t.leaseID)
	}
	return ctx
}

// Lease takes a lease of this run's own, so neither committed blobs nor
// half-written ingests are collected before the image record exists. Its
// name is the set's and the run's (kiln-warm-SET-RUN): concurrent runs of
// one set never share one, so the first to finish cannot release the
// lease that still protects another. A killed run's lease expires after a
// day; a resumed run's writers put the ingests it left under their new
// lease.
func (t *Containerd) Lease(ctx context.Context, s *warm.Set) error {
	h := digest.Canonical.Digester()
	for _, img := range s.Images {
		fmt.Fprintln(h.Hash(), img.Name, img.Target.Digest)
	}
	var run [6]byte
	if _, err := rand.Read(run[:]); err != nil {
		return fmt.Errorf("target %s: lease: %v", t, err)
	}
	id := "kiln-warm-" + h.Digest().Encoded()[:16] + "-" + hex.EncodeToString(run[:])
	ls := t.c.LeasesService()
	ctx = namespaces.WithNamespace(ctx, t.ns)
	if _, err := ls.Create(ctx, leases.WithID(id), leases.WithExpiration(24*time.Hour)); err != nil {
		return fmt.Errorf("target %s: lease: %v", t, err)
	}
	t.leaseID = id
	return nil
}

// Release drops the lease (the image record holds the blobs now).
func (t *Containerd) Release(ctx context.Context) error {
	if t.leaseID == "" {
		return nil
	}
	id := t.leaseID
	t.leaseID = ""
	return t.c.LeasesService().Delete(namespaces.WithNamespace(ctx, t.ns), leases.Lease{ID: id})
}

// Has implements Target.
func (t *Containerd) Has(ctx context.Context, d ocispec.Descriptor) (bool, error) {
	info, err := t.cs.Info(t.nsCtx(ctx), d.Digest)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("target %s: %v", t, err)
	}
	return info.Size == d.Size, nil
}

// Open implements warm.Opener: the committed blob d, read from the
// content store (the engine checks a layer's content against its diff ID
// before the image is recorded).
func (t *Containerd) Open(d ocispec.Descriptor) (io.ReadCloser, error) {
	ra, err := t.cs.ReaderAt(t.nsCtx(context.Background()), d)
	if err != nil {
		return nil, fmt.Errorf("target %s: blob %s: %v", t, d.Digest, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{content.NewReader(ra), ra}, nil
}

// Free implements Target: statfs of the content plugin's root, when this
// host can see it.
func (t *Containerd) Free(ctx context.Context) (string, int64, error) {
	resp, err := t.c.IntrospectionService().Plugins(t.nsCtx(ctx), `type=="io.containerd.content.v1"`)
	if err != nil {
		return "", 0, err
	}
	for _, p := range resp.Plugins {
		if root := p.Exports["root"]; root != "" {
			n, err := preflight.Free(root)
			return root, n, err
		}
	}
	return "", 0, errors.New("content root unknown")
}

// Writer implements Target.
func (t *Containerd) Writer(ctx context.Context, d ocispec.Descriptor) (blob.Writer, error) {
	ctx = t.nsCtx(ctx)
	ref := IngestRef(d.Digest)
	w, err := content.OpenWriter(ctx, t.cs, content.WithRef(ref), content.WithDescriptor(d))
	if errdefs.IsAlreadyExists(err) {
		return nil, blob.ErrAlreadyExists
	}
	if err != nil {
		return nil, fmt.Errorf("target %s: ingest %s: %v", t, ref, err)
	}
	st, err := w.Status()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("target %s: ingest %s: %v", t, ref, err)
	}
	// Nothing to write (containerd already holds the bytes, e.g. shared
	// from another namespace): the daemon's writer commits without any.
	// A complete ingest file is another matter: a direct writer may still
	// hold it (its lock, not the daemon's, says when it is done), so it is
	// waited for like an incomplete one; taking the daemon's writer there
	// let a second writer commit or abort under the first.
	if root, _ := t.Direct(); root != "" && (st.Offset < d.Size || t.ingestOnDisk(ref)) {
		// Close the daemon's writer before writing its file: the commit
		// opens a new one, which re-reads and hashes every byte.
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("target %s: ingest %s: %v", t, ref, err)
		}
		dw, err := t.openDirect(ctx, d, ref)
		if err == nil {
			return dw, nil
		}
		if errors.Is(err, errIngestMoved) {
			return t.Writer(ctx, d)
		}
		if t.ingest == IngestDirect || !isNotLocalIngest(err) {
			return nil, fmt.Errorf("target %s: ingest %s: direct write: %v", t, ref, err)
		}
		t.directFallback(err)
		return t.Writer(ctx, d)
	}
	return &ctrWriter{t: t, w: w, d: d, ref: ref, off: st.Offset}, nil
}

type ctrWriter struct {
	t   *Containerd
	w   content.Writer
	d   ocispec.Descriptor
	ref string
	off int64
}

func (w *ctrWriter) Offset() int64 { return w.off }

func (w *ctrWriter) Write(p []byte) (int, error) {
	if w.off+int64(len(p)) > w.d.Size {
		return 0, fmt.Errorf("blob %s: %w: more than the %d bytes its descriptor names", w.d.Digest, registry.ErrSizeMismatch, w.d.Size)
	}
	n, err := w.w.Write(p)
	w.off += int64(n)
	return n, err
}

func (w *ctrWriter) Commit(ctx context.Context) error {
	err := w.w.Commit(w.t.nsCtx(ctx), w.d.Size, w.d.Digest)
	switch {
	case err == nil:
		return nil
	case errdefs.IsAlreadyExists(err):
		return blob.ErrAlreadyExists
	case errdefs.IsFailedPrecondition(err):
		// containerd refused the bytes: wrong size or digest.
		kind := registry.ErrDigestMismatch
		if strings.Contains(err.Error(), "size") {
			kind = registry.ErrSizeMismatch
		}
		return fmt.Errorf("blob %s: %w: containerd refused the commit: %v", w.d.Digest, kind, err)
	}
	return fmt.Errorf("target %s: commit %s: %v", w.t, w.d.Digest, err)
}

func (w *ctrWriter) Close() error { return w.w.Close() }

// Abort removes the ingest before closing the writer: the daemon writes
// the ingest's timestamp file as it closes, and a removal racing that
// failed with "directory not empty".
func (w *ctrWriter) Abort(ctx context.Context) error {
	defer w.w.Close()
	err := w.t.cs.Abort(w.t.nsCtx(ctx), w.ref)
	if errdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// Record implements Target: labels as containerd's pull sets them (GC
// references from index to manifests, manifest to config and layers, and
// the distribution source), then an image record per image.
func (t *Containerd) Record(ctx context.Context, s *warm.Set) error {
	ctx = t.nsCtx(ctx)
	for _, b := range s.Blobs {
		if len(b.Labels) == 0 {
			continue
		}
		var paths []string
		for k := range b.Labels {
			paths = append(paths, "labels."+k)
		}
		if _, err := t.cs.Update(ctx, content.Info{Digest: b.Digest, Labels: b.Labels}, paths...); err != nil {
			return fmt.Errorf("labels on %s: %v", b.Digest, err)
		}
	}
	is := t.c.ImageService()
	for _, img := range s.Images {
		rec := images.Image{Name: img.Name, Target: img.Target}
		if _, err := is.Create(ctx, rec); err != nil {
			if !errdefs.IsAlreadyExists(err) {
				return fmt.Errorf("image %s: %v", img.Name, err)
			}
			if _, err := is.Update(ctx, rec, "target"); err != nil {
				return fmt.Errorf("image %s: %v", img.Name, err)
			}
		}
	}
	return nil
}

// pickSnapshotter is --snapshotter, or for auto: in the kubelet's
// namespace the snapshotter its CRI runs pods on (an image unpacked
// anywhere else is unpacked again when the pod starts), where that one is
// loaded; else overlayfs, else native.
func (t *Containerd) pickSnapshotter(ctx context.Context) (string, error) {
	if t.snapshotter != "" && t.snapshotter != "auto" {
		return t.snapshotter, nil
	}
	resp, err := t.c.IntrospectionService().Plugins(t.nsCtx(ctx), `type=="io.containerd.snapshotter.v1"`)
	if err != nil {
		return "", err
	}
	ok := map[string]bool{}
	for _, p := range resp.Plugins {
		ok[p.ID] = p.InitErr == nil
	}
	if t.ns == criNamespace {
		if sn, err := t.criSnapshotter(ctx); err == nil && ok[sn] {
			return sn, nil
		}
	}
	for _, name := range []string{"overlayfs", "native"} {
		if ok[name] {
			return name, nil
		}
	}
	return "", errors.New("neither the overlayfs nor the native snapshotter is loaded")
}

// Unpack implements Unpacker: every image's layers are applied into the
// snapshotter (overlayfs, or native where overlay does not work), so
// `ctr run` finds the rootfs ready.
func (t *Containerd) Unpack(ctx context.Context, s *warm.Set) error {
	sn, err := t.snapshotterFor(ctx, s)
	if err != nil {
		return err
	}
	t.snapshotter = sn
	ctx = t.nsCtx(ctx)
	for _, img := range s.Images {
		p, err := platforms.Parse(img.Platform)
		if err != nil {
			return err
		}
		ci := client.NewImageWithPlatform(t.c, images.Image{Name: img.Name, Target: img.Target}, platforms.Only(p))
		if err := ci.Unpack(ctx, sn); err != nil {
			return fmt.Errorf("image %s into %s: %v", img.Name, sn, err)
		}
	}
	return nil
}

// Snapshotter is the snapshotter --unpack used ("" before Unpack).
func (t *Containerd) Snapshotter() string { return t.snapshotter }

// Verify implements Verifier: each image record points at the warmed root.
func (t *Containerd) Verify(ctx context.Context, s *warm.Set) error {
	ctx = t.nsCtx(ctx)
	for _, img := range s.Images {
		rec, err := t.c.ImageService().Get(ctx, img.Name)
		if err != nil {
			return fmt.Errorf("target %s: image %s: %v", t, img.Name, err)
		}
		if rec.Target.Digest != img.Target.Digest {
			return fmt.Errorf("target %s: image %s points at %s, not %s", t, img.Name, rec.Target.Digest, img.Target.Digest)
		}
	}
	return nil
}

// The roles Containerd plays, checked at compile time: a target that silently
// lost one would still run, without its guarantee.
var (
	_ warm.Store             = (*Containerd)(nil)
	_ warm.Unpacker          = (*Containerd)(nil)
	_ warm.PipelinedUnpacker = (*Containerd)(nil)
	_ warm.Verifier          = (*Containerd)(nil)
	_ warm.Opener            = (*Containerd)(nil)
	_ warm.Leaser            = (*Containerd)(nil)
)
