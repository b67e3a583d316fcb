package fleet

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/layers"
)

// BlobSource hands out blobs by digest for push-mode hosts. Manifests come
// whole (they are small and their size is learnt by reading them); other
// blobs are streamed.
type BlobSource interface {
	// Manifest returns a manifest or index by digest, verified.
	Manifest(ctx context.Context, digest string) ([]byte, types.MediaType, error)
	// Blob opens a blob by digest. The caller verifies digest and size.
	Blob(ctx context.Context, digest string) (io.ReadCloser, error)
}

// RegistrySource reads blobs from the repositories of registry references,
// trying each in order (a blob found in none is an error naming them).
type RegistrySource struct {
	repos []name.Repository
	opts  []remote.Option
}

// NewRegistrySource returns a source over refs' repositories. Only registry
// references can feed push-mode hosts.
func NewRegistrySource(ctx context.Context, refs []string, opts ...layers.Option) (*RegistrySource, error) {
	s := &RegistrySource{opts: layers.RemoteOptions(ctx, opts...)}
	for _, r := range refs {
		ref, err := layers.ParseRef(r, opts...)
		if err != nil {
			return nil, err
		}
		if ref.Kind != layers.KindRegistry {
			return nil, fmt.Errorf("image %q: fleet warms registry images; push a local image to a registry first", r)
		}
		s.repos = append(s.repos, ref.Name.Context())
	}
	return s, nil
}

// Manifest implements BlobSource.
func (s *RegistrySource) Manifest(ctx context.Context, digest string) ([]byte, types.MediaType, error) {
	var errs []string
	for _, repo := range s.repos {
		d, err := remote.Get(repo.Digest(digest), append(s.opts, remote.WithContext(ctx))...)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		h, err := v1.NewHash(digest)
		if err != nil {
			return nil, "", err
		}
		if err := verifyBytes(d.Manifest, h); err != nil {
			return nil, "", fmt.Errorf("manifest from %s: %w", repo, err)
		}
		return d.Manifest, d.MediaType, nil
	}
	return nil, "", fmt.Errorf("manifest %s: not found in %s", digest, strings.Join(errs, "; "))
}

// Blob implements BlobSource.
func (s *RegistrySource) Blob(ctx context.Context, digest string) (io.ReadCloser, error) {
	var errs []string
	for _, repo := range s.repos {
		l, err := remote.Layer(repo.Digest(digest), append(s.opts, remote.WithContext(ctx))...)
		if err == nil {
			var rc io.ReadCloser
			if rc, err = l.Compressed(); err == nil {
				return rc, nil
			}
		}
		errs = append(errs, err.Error())
	}
	return nil, fmt.Errorf("blob %s: %s", digest, strings.Join(errs, "; "))
}

func verifyBytes(b []byte, h v1.Hash) error {
	vr, err := layers.NewVerifyReader(bytes.NewReader(b), h, int64(len(b)))
	if err != nil {
		return err
	}
	return vr.Drain()
}

// stagedBlob is one entry of the tar streamed to a push-mode host.
type stagedBlob struct {
	digest string
	size   int64
	data   []byte // manifests, configs and index.json: already here
}

// pushTag names the images in the staging layout; the host's kiln warm
// reads oci:STAGING:kiln-push-N.
func pushTag(i int) string { return fmt.Sprintf("kiln-push-%d", i) }

// planPush works out the staging layout for a host from its dry run: each
// image's manifest (and index, when the image is one) and config, which the
// host's kiln needs to read the layout, plus every blob the host reported
// missing. Only the missing blobs are large.
func planPush(ctx context.Context, src BlobSource, rep *WarmReport) ([]stagedBlob, []byte, error) {
	var staged []stagedBlob
	have := map[string]bool{}
	add := func(b stagedBlob) {
		if !have[b.digest] {
			have[b.digest] = true
			staged = append(staged, b)
		}
	}
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for i, img := range rep.Images {
		raw, mt, err := src.Manifest(ctx, img.Digest)
		if err != nil {
			return nil, nil, err
		}
		add(stagedBlob{digest: img.Digest, size: int64(len(raw)), data: raw})
		h, _ := v1.NewHash(img.Digest)
		index.Manifests = append(index.Manifests, v1.Descriptor{
			MediaType: mt, Digest: h, Size: int64(len(raw)),
			Annotations: map[string]string{
				"org.opencontainers.image.ref.name": pushTag(i),
				"io.containerd.image.name":          img.Ref,
			},
		})
		// An index: stage the children the host listed in its warm set.
		if mt.IsIndex() {
			im, err := v1.ParseIndexManifest(bytes.NewReader(raw))
			if err != nil {
				return nil, nil, fmt.Errorf("index %s: %v", img.Digest, err)
			}
			for _, d := range im.Manifests {
				if inReport(rep, d.Digest.String()) {
					if err := addManifest(ctx, src, d.Digest.String(), add); err != nil {
						return nil, nil, err
					}
				}
			}
			continue
		}
		if err := addConfig(raw, img.Digest, add); err != nil {
			return nil, nil, err
		}
	}
	for _, b := range rep.Blobs {
		if b.State == "missing" && !have[b.Digest] {
			if isManifestType(b.MediaType) {
				if err := addManifest(ctx, src, b.Digest, add); err != nil {
					return nil, nil, err
				}
				continue
			}
			add(stagedBlob{digest: b.Digest, size: b.Size})
		}
	}
	ij, err := json.Marshal(index)
	if err != nil {
		return nil, nil, err
	}
	return staged, ij, nil
}

func addManifest(ctx context.Context, src BlobSource, digest string, add func(stagedBlob)) error {
	raw, _, err := src.Manifest(ctx, digest)
	if err != nil {
		return err
	}
	add(stagedBlob{digest: digest, size: int64(len(raw)), data: raw})
	return addConfig(raw, digest, add)
}

// addConfig stages an image manifest's config, which is small and which
// the host's kiln reads before anything else.
func addConfig(raw []byte, digest string, add func(stagedBlob)) error {
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("manifest %s: %v", digest, err)
	}
	if m.Config.Digest.Hex != "" {
		add(stagedBlob{digest: m.Config.Digest.String(), size: m.Config.Size})
	}
	return nil
}

func inReport(rep *WarmReport, digest string) bool {
	for _, b := range rep.Blobs {
		if b.Digest == digest {
			return true
		}
	}
	return false
}

func isManifestType(mt string) bool {
	m := types.MediaType(mt)
	return m.IsIndex() || m.IsImage()
}

// writeStaging streams the staging layout as a tar: blobs first, each
// verified as it passes, then oci-layout and index.json, so the receiver
// only sees an index once every blob it names has arrived.
func writeStaging(ctx context.Context, w io.Writer, src BlobSource, staged []stagedBlob, index []byte, sent *atomic.Int64) error {
	tw := tar.NewWriter(w)
	now := time.Unix(0, 0)
	file := func(name string, size int64) error {
		return tw.WriteHeader(&tar.Header{Name: name, Size: size, Mode: 0o644, Typeflag: tar.TypeReg, ModTime: now, Format: tar.FormatPAX})
	}
	for _, b := range staged {
		h, err := v1.NewHash(b.digest)
		if err != nil {
			return fmt.Errorf("blob %q: %v", b.digest, err)
		}
		if err := file("blobs/"+h.Algorithm+"/"+h.Hex, b.size); err != nil {
			return err
		}
		var r io.Reader
		var closer io.Closer
		if b.data != nil {
			r = bytes.NewReader(b.data)
		} else {
			rc, err := src.Blob(ctx, b.digest)
			if err != nil {
				return err
			}
			r, closer = rc, rc
		}
		vr, err := layers.NewVerifyReader(r, h, b.size)
		if err != nil {
			return err
		}
		n, err := io.CopyN(tw, vr, b.size)
		sent.Add(n)
		if err == nil {
			err = vr.Drain()
		}
		if closer != nil {
			closer.Close()
		}
		if err != nil {
			return fmt.Errorf("blob %s: %w", b.digest, err)
		}
	}
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := file("oci-layout", int64(len(layout))); err != nil {
		return err
	}
	if _, err := tw.Write(layout); err != nil {
		return err
	}
	if err := file("index.json", int64(len(index))); err != nil {
		return err
	}
	if _, err := tw.Write(index); err != nil {
		return err
	}
	return tw.Close()
}

// pushScript receives the staging layout into a fresh directory under
// ~/.cache/kiln/staging (same disk as the host's caches, unlike a tmpfs
// /tmp), warms the target from it, and removes it however the shell ends.
func pushScript(kiln string, warm []string) string {
	return fmt.Sprintf(`set -e; base="${KILN_STAGING_DIR:-$HOME/.cache/kiln/staging}"; mkdir -p "$base"; s=$(mktemp -d "$base/push.XXXXXX"); trap 'rm -rf "$s"' EXIT; trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; %s warm fleet-receive "$s"; %s`,
		shq(kiln), strings.ReplaceAll(command(kiln, warm), shq(stagingMarker), `"$s"`))
}

// stagingMarker stands for the staging directory in a warm command line
// until pushScript swaps in the shell variable.
const stagingMarker = "@STAGING@"

// push streams the blobs a host is missing to it and warms from them.
func (c *Conn) push(ctx context.Context, h Host, kiln, target string, dry *WarmReport, o Options) Result {
	staged, index, err := planPush(ctx, o.Source, dry)
	if err != nil {
		r := result(h, target, dry, nil, -1, err)
		r.Error = "push: " + err.Error()
		return r
	}
	var refs []string
	for i := range dry.Images {
		refs = append(refs, "oci:"+stagingMarker+":"+pushTag(i))
	}
	args := warmArgs(nil, target, or(h.Namespace, o.Namespace), o.WarmArgs)
	args = append(append([]string{"warm"}, refs...), args[1:]...)
	script := pushScript(kiln, args)
	pr, pw := io.Pipe()
	var sent atomic.Int64
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	werr := make(chan error, 1)
	go func() {
		err := writeStaging(wctx, pw, o.Source, staged, index, &sent)
		pw.CloseWithError(err)
		werr <- err
	}()
	rep, raw, code, err := c.warmCmd(ctx, script, pr, func() { o.event(h.Name, "push started") })
	pr.CloseWithError(errors.New("session ended"))
	cancel()
	if serr := <-werr; serr != nil && err == nil && code != warmExitReady {
		err = fmt.Errorf("push: %w", serr)
	} else if serr != nil && err != nil && !errors.Is(serr, io.ErrClosedPipe) && !strings.Contains(serr.Error(), "session ended") {
		err = fmt.Errorf("%v (push: %v)", err, serr)
	}
	r := result(h, target, rep, raw, code, err)
	if rep == nil {
		r.MissingBytes = dry.MissingBytes
	}
	r.PushedBytes = sent.Load()
	return r
}
