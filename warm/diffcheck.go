package warm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/internal/bufpipe"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// What the engine checks of a layer before an image is recorded (D12,
// N1): its blob's digest and size are checked as it is written
// (blob.Copy); its uncompressed content must hash to the diff ID its
// image's config names for it, every tar header passing kiln's entry
// rule. The content is checked as the blob is written (streamCheck), read
// back from the target when the write could not be followed from its first
// byte, and left to the unpack when the target's unpack proves every
// layer it applies (ProvingUnpacker: decoding a layer twice on a host
// with two cores doubled the cost of a gzip warm --unpack); then the
// images are recorded only after the unpack. A manifest whose
// layers are not the image its config describes is never recorded under
// a name, and a variant beside a tag (REPO:TAG-zstd) that reuses TAG's
// config over other layers is set aside (VariantError) so that TAG is
// warmed as named.

// Opener is a Store that reads back a committed blob (containerd's
// content store, an OCI layout, a Loader's stage).
type Opener interface {
	Open(d ocispec.Descriptor) (io.ReadCloser, error)
}

// claim is what one image's config says a layer blob holds.
type claim struct {
	diffID  digest.Digest
	image   string // the image's name
	source  string // the reference read (the variant's, for a variant)
	variant bool
	form    string // the variant's Image.Form
}

// layerClaims maps every layer blob of s to what its images' configs
// say it holds.
func layerClaims(s *Set) (map[digest.Digest][]claim, error) {
	out := map[digest.Digest][]claim{}
	for _, img := range s.Images {
		cfg, err := s.ConfigFile(img)
		if err != nil {
			return nil, err
		}
		for i, l := range img.Layers {
			out[l.Digest] = append(out[l.Digest], claim{
				diffID: digest.Digest(cfg.RootFS.DiffIDs[i].String()),
				image:  img.Name, source: img.Source, variant: img.Variant(), form: img.Form,
			})
		}
	}
	return out, nil
}

// hasVariant says whether any of cs is a variant's.
func hasVariant(cs []claim) bool {
	for _, c := range cs {
		if c.variant {
			return true
		}
	}
	return false
}

// checkLayer reads the committed layer b back from t, decompresses it
// as its media type says, and compares the hash of its content with
// every claim. It returns the variants whose claim failed (image name →
// why) and an error naming the first failed claim.
func checkLayer(ctx context.Context, t Opener, b *Blob, cs []claim) (map[string]string, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	got, err := contentDigest(ctx, t, b)
	return judge(b, cs, got, err)
}

// judge compares b's content digest (got, or why it could not be had)
// with every claim: the variants whose claim failed (image name → why)
// and an error naming the first failed claim.
func judge(b *Blob, cs []claim, got digest.Digest, err error) (map[string]string, error) {
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", b.Digest, err)
	}
	var bad map[string]string
	var first error
	for _, c := range cs {
		if got == c.diffID {
			continue
		}
		why := fmt.Sprintf("layer %s's content hashes to %s, but the config says %s", b.Digest, got, c.diffID)
		if c.variant {
			if bad == nil {
				bad = map[string]string{}
			}
			form := c.form
			if form == FormErofs {
				form = "EROFS"
			}
			bad[c.image] = fmt.Sprintf("%s is not the %s form of %s: %s", c.source, form, c.image, why)
		}
		if first == nil {
			first = fmt.Errorf("image %s: %s: %w", c.image, why, registry.ErrDigestMismatch)
		}
	}
	return bad, first
}

// contentDigest is the sha256 of b's uncompressed content as committed
// in t.
func contentDigest(ctx context.Context, t Opener, b *Blob) (digest.Digest, error) {
	rc, err := t.Open(b.Descriptor)
	if err != nil {
		return "", fmt.Errorf("reading it back: %v", err)
	}
	defer rc.Close()
	return digestContent(ctx, rc, b)
}

// digestContent is the sha256 of the uncompressed content of r, b's
// bytes. The encoding must be the one the media type names: a zstd layer
// whose bytes are gzip (or a tar) is not what its manifest says; the
// content must be a tar whose every entry passes layers.CheckEntry.
func digestContent(ctx context.Context, r io.Reader, b *Blob) (digest.Digest, error) {
	dr, comp, closeDec, err := layers.Decompress(layers.ContextReader(ctx, r, nil))
	if err != nil {
		return "", err
	}
	defer closeDec()
	mt := types.MediaType(b.MediaType)
	if err := layers.CheckCompression(mt, comp); err != nil {
		return "", err
	}
	isTar := layers.CheckTar(mt) == nil
	if comp == layers.Uncompressed {
		if !isTar {
			// A native EROFS layer, not compressed: its content is the
			// blob, whose digest the writer verified over every byte (it
			// is checked by fsck.erofs where it is used).
			return b.Digest, nil
		}
		return hashContent(ctx, dr, isTar)
	}
	// Decoding is the check's cost (gzip: one core's worth at about 250
	// MB/s of content): it gets this goroutine, and the hash and the
	// entry rule another, so that they do not add to it.
	p := bufpipe.New(1<<20, 4)
	type result struct {
		d   digest.Digest
		err error
	}
	hashed := make(chan result, 1)
	go func() {
		d, err := hashContent(ctx, p, isTar)
		p.CloseRead(err)
		hashed <- result{d, err}
	}()
	// A decoding error reaches the hash as its read error; an entry the
	// rule refuses stops the decoding (the pipe's write fails).
	if _, err := io.CopyBuffer(p, dr, make([]byte, 1<<20)); err != nil {
		p.CloseWrite(fmt.Errorf("decompressing: %w", err))
	} else {
		p.CloseWrite(nil)
	}
	h := <-hashed
	return h.d, h.err
}

// hashContent is the sha256 of the content r yields, a tar's headers
// each passing kiln's one entry rule (layers.CheckEntry) as it is hashed,
// so that what an unpack (kiln's or containerd's) writes is what slim and
// the EROFS conversion accept.
func hashContent(ctx context.Context, r io.Reader, isTar bool) (digest.Digest, error) {
	h := sha256.New()
	if isTar {
		tr := io.TeeReader(r, h)
		if err := layers.WalkTar(ctx, tr, func(e *layers.Entry, _ io.Reader) error { return layers.CheckEntry(e) }); err != nil {
			return "", err
		}
	}
	// What follows the end marker is part of the content too.
	if _, err := io.CopyBuffer(h, r, make([]byte, 1<<20)); err != nil {
		return "", err
	}
	return digest.Digest("sha256:" + hex.EncodeToString(h.Sum(nil))), nil
}

// streamCheck computes digestContent as the blob is written
// (blob.CopyOptions.Follow) instead of reading the committed blob back:
// the bytes go through a bounded pipe to a goroutine that decodes,
// entry-checks and hashes them, so the check overlaps the transfer and
// the disk is read once. A writer never waits on the check for more than
// the pipe's few MiB; once the check has its verdict, the rest of the
// bytes are dropped (the follower's errors are ignored).
type streamCheck struct {
	*bufpipe.Pipe
	done chan struct{}
	got  digest.Digest
	err  error
}

// errTriedAgain ends the check of a try that failed.
var errTriedAgain = errors.New("the transfer was tried again")

func newStreamCheck(ctx context.Context, b *Blob) *streamCheck {
	c := &streamCheck{Pipe: bufpipe.New(1<<20, 8), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.got, c.err = digestContent(ctx, c.Pipe, b)
		c.CloseRead(c.err)
	}()
	return c
}

// result ends the input and waits for the check's verdict.
func (c *streamCheck) result() (digest.Digest, error) {
	c.CloseWrite(nil)
	<-c.done
	return c.got, c.err
}

// abandon stops the check without a verdict (its try failed).
func (c *streamCheck) abandon() {
	c.CloseWrite(errTriedAgain)
	<-c.done
}

// follower hands each try of one blob's copy a fresh streamCheck; last is
// the latest try's.
type follower struct {
	ctx  context.Context
	b    *Blob
	last *streamCheck
}

func (f *follower) next() io.Writer {
	if f.last != nil {
		f.last.abandon()
	}
	f.last = newStreamCheck(f.ctx, f.b)
	return f.last
}

// end stops what a failed copy left running.
func (f *follower) end() {
	if f != nil && f.last != nil {
		f.last.abandon()
	}
}

// VariantError says the variant warm chose for an image (REPO:TAG-zstd,
// REPO:TAG-erofs) is not that image: a layer's content is not the diff ID
// the config names (the shared config; the EROFS form's own). Run resolves again without the variant and warms the
// image as named.
type VariantError struct {
	// Images maps each such image's name to why.
	Images map[string]string
	Err    error
}

func (e *VariantError) Error() string {
	names := make([]string, 0, len(e.Images))
	for n := range e.Images {
		names = append(names, n)
	}
	sort.Strings(names)
	return e.Images[names[0]]
}

func (e *VariantError) Unwrap() error { return e.Err }
