package sign

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

// Signature formats (Format, SignOptions.Format).
const (
	FormatBundle = "bundle"
	FormatLegacy = "legacy"
)

// maxArtifact caps what is read of a signature manifest or blob: they are
// a few kilobytes; a registry serving more is not serving a signature.
const maxArtifact = 4 << 20

const (
	emptyJSONMediaType = "application/vnd.oci.empty.v1+json"
)

var emptyJSON = []byte("{}")

// SignOptions tune Sign.
type SignOptions struct {
	// Format is FormatBundle (default, cosign v3's) or FormatLegacy.
	Format string
	// Layers are the registry options (keychain, transport, insecure
	// registries): every call goes through layers' transport.
	Layers []registry.Option
	// Now stamps the referrer's org.opencontainers.image.created
	// (default time.Now).
	Now func() time.Time
}

// Signed is what Sign stored.
type Signed struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	Format string `json:"format"`
	KeyID  string `json:"key_id"`
	// Artifact is the signature manifest's digest (bundle) or the .sig
	// tag (legacy).
	Artifact string `json:"artifact"`
	// Referrers says how the referrer is listed: "api" (the registry's
	// referrers API) or "tag" (the referrers tag schema, sha256-<hex>).
	Referrers string `json:"referrers,omitempty"`
}

// Sign signs the manifest ref resolves to and stores the signature next
// to it in the same repository.
func Sign(ctx context.Context, ref string, s *Signer, o SignOptions) (*Signed, error) {
	r, err := layers.ParseRef(ref, o.Layers...)
	if err != nil {
		return nil, err
	}
	if r.Kind != layers.KindRegistry {
		return nil, fmt.Errorf("image %q: only registry images can be signed (a signature is stored in the registry)", ref)
	}
	// One client, whose token may push, resolves the tag and stores the
	// signature: one login.
	c, err := registry.ClientFor(ctx, r.Name.Context(), pushOptions(o.Layers)...)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, registry.RedactError(err))
	}
	desc, _, err := resolve(ctx, c, r.Name)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, err)
	}
	return signDigest(ctx, c, *desc, s, o)
}

// pushOptions are lopts for a client that writes (registry.WithPush).
func pushOptions(lopts []registry.Option) []registry.Option {
	return append(lopts[:len(lopts):len(lopts)], registry.WithPush())
}

// Resolve finds the manifest ref names the way warm does: it GETs the
// manifest and hashes the bytes served. A HEAD's digest header is not
// evidence: a registry (or a proxy) can answer one digest on HEAD and
// serve another manifest on GET, and what is signed or verified must be
// what a pull gets. A digest reference must hash to its digest.
func Resolve(ctx context.Context, ref name.Reference, lopts ...registry.Option) (*v1.Descriptor, error) {
	c, err := registry.ClientFor(ctx, ref.Context(), lopts...)
	if err != nil {
		return nil, registry.RedactError(err)
	}
	desc, _, err := resolve(ctx, c, ref)
	return desc, err
}

// resolve is Resolve through c, also returning the manifest's bytes: its
// descriptor is the digest and size of the bytes served (a digest
// reference's checked by registry.Client.Manifest).
func resolve(ctx context.Context, c *registry.Client, ref name.Reference) (*v1.Descriptor, []byte, error) {
	raw, desc, err := c.Manifest(ctx, ref)
	if err != nil {
		return nil, nil, registry.RedactError(err)
	}
	return &desc, raw, nil
}

// SignDigest signs the manifest desc in repo (kiln build/slim/convert
// sign what they just pushed, by its digest, with no tag lookup between).
func SignDigest(ctx context.Context, repo name.Repository, desc v1.Descriptor, s *Signer, o SignOptions) (*Signed, error) {
	c, err := registry.ClientFor(ctx, repo, pushOptions(o.Layers)...)
	if err != nil {
		return nil, fmt.Errorf("image %s: storing signature: %w", repo.Digest(desc.Digest.String()), registry.RedactError(err))
	}
	return signDigest(ctx, c, desc, s, o)
}

// signDigest is SignDigest through c, which may push.
func signDigest(ctx context.Context, c *registry.Client, desc v1.Descriptor, s *Signer, o SignOptions) (*Signed, error) {
	repo := c.Repository()
	out := &Signed{Ref: repo.Digest(desc.Digest.String()).String(), Digest: desc.Digest.String(), KeyID: s.Public().ID()}
	switch o.Format {
	case "", FormatBundle:
		out.Format = FormatBundle
		b, err := newBundle(s, desc.Digest)
		if err != nil {
			return nil, err
		}
		now := time.Now
		if o.Now != nil {
			now = o.Now
		}
		dg, via, err := pushReferrer(ctx, c, desc, BundleMediaType, b, map[string]string{
			"org.opencontainers.image.created": now().UTC().Format(time.RFC3339),
			"dev.sigstore.bundle.content":      "dsse-envelope",
			BundlePredicateAnnotation:          CosignSignPredicate,
		})
		if err != nil {
			return nil, fmt.Errorf("image %s: storing signature: %w", out.Ref, registry.RedactError(err))
		}
		out.Artifact, out.Referrers = dg, via
	case FormatLegacy:
		out.Format = FormatLegacy
		tag, err := pushLegacy(ctx, c, desc.Digest, s)
		if err != nil {
			return nil, fmt.Errorf("image %s: storing signature: %w", out.Ref, registry.RedactError(err))
		}
		out.Artifact = tag
	default:
		return nil, fmt.Errorf("signature format %q: want bundle or legacy", o.Format)
	}
	return out, nil
}

// artifactManifest is an OCI 1.1 artifact manifest with a subject.
type artifactManifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     types.MediaType   `json:"mediaType"`
	ArtifactType  string            `json:"artifactType,omitempty"`
	Config        v1.Descriptor     `json:"config"`
	Layers        []v1.Descriptor   `json:"layers"`
	Subject       *v1.Descriptor    `json:"subject,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type rawManifest struct {
	b  []byte
	mt types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.b, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }

var _ remote.Taggable = rawManifest{}

// PushReferrer stores blob as a one-layer OCI artifact whose subject is
// subj, returning the artifact manifest's digest and how the registry
// lists it ("api" or "tag"). go-containerregistry updates the referrers
// tag schema's index when the registry has no referrers API.
func PushReferrer(ctx context.Context, repo name.Repository, subj v1.Descriptor, artifactType string, blob []byte, annotations map[string]string, lopts ...registry.Option) (string, string, error) {
	c, err := registry.ClientFor(ctx, repo, pushOptions(lopts)...)
	if err != nil {
		return "", "", err
	}
	return pushReferrer(ctx, c, subj, artifactType, blob, annotations)
}

// pushReferrer is PushReferrer through c, which may push.
func pushReferrer(ctx context.Context, c *registry.Client, subj v1.Descriptor, artifactType string, blob []byte, annotations map[string]string) (string, string, error) {
	repo, ropts := c.Repository(), c.Remote(ctx)
	cfg := static.NewLayer(emptyJSON, emptyJSONMediaType)
	lay := static.NewLayer(blob, types.MediaType(artifactType))
	for _, l := range []v1.Layer{cfg, lay} {
		if err := remote.WriteLayer(repo, l, ropts...); err != nil {
			return "", "", err
		}
	}
	cd, _ := cfg.Digest()
	ld, _ := lay.Digest()
	m := artifactManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  artifactType,
		Config:        v1.Descriptor{MediaType: emptyJSONMediaType, Digest: cd, Size: int64(len(emptyJSON))},
		Layers:        []v1.Descriptor{{MediaType: types.MediaType(artifactType), Digest: ld, Size: int64(len(blob))}},
		Subject:       &v1.Descriptor{MediaType: subj.MediaType, Digest: subj.Digest, Size: subj.Size},
		Annotations:   annotations,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return "", "", err
	}
	dg := fmt.Sprintf("sha256:%x", sha256.Sum256(raw))
	put := func() error {
		return remote.Put(repo.Digest(dg), rawManifest{raw, types.OCIManifestSchema1}, ropts...)
	}
	t0 := time.Now()
	if err := put(); err != nil {
		return "", "", err
	}
	took := time.Since(t0)
	if c.ReferrersAPI(ctx, subj.Digest) {
		return dg, "api", nil
	}
	// Without the referrers API the listing is one index under the
	// sha256-<hex> tag that every signer reads, extends and writes back:
	// a concurrent signer can write a list without ours. Read it back;
	// putting the manifest again merges ours into the current list.
	listed := func() (bool, error) {
		idx, err := remote.Referrers(repo.Digest(subj.Digest.String()), ropts...)
		if err != nil {
			return false, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return false, err
		}
		for _, m := range im.Manifests {
			if m.Digest.String() == dg {
				return true, nil
			}
		}
		return false, nil
	}
	if err := confirmListed(ctx, "referrers tag "+subj.Digest.Algorithm+"-"+subj.Digest.Hex, took, put, listed); err != nil {
		return "", "", err
	}
	return dg, "tag", nil
}

// Read-back after a read-modify-write of a shared tag: how often and how
// long apart. A signature counts as stored when two reads, a settle
// interval apart, list it: a writer that read the list before ours was
// added has finished writing by then, or the second read sees its loss.
// The interval is at least confirmSettle and at least three times what
// our own read-modify-write took (another signer's takes about as long:
// on a loaded machine or a slow registry, 40 ms is not enough).
const (
	confirmAttempts = 8
	confirmSettle   = 40 * time.Millisecond
)

// confirmListed checks that what write stored (took is how long that
// write took) is listed, and writes again (write merges into the current
// list) until two reads a settle interval apart list it, with a growing,
// jittered pause; after confirmAttempts it fails saying the signature
// could not be kept.
func confirmListed(ctx context.Context, what string, took time.Duration, write func() error, listed func() (bool, error)) error {
	pause := max(confirmSettle, 3*took)
	for attempt := 1; ; attempt++ {
		ok, err := listedTwice(ctx, pause, listed)
		if err != nil {
			return fmt.Errorf("reading back %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if attempt == confirmAttempts {
			return fmt.Errorf("%s: another writer replaced it %d times without our signature (concurrent signers on a registry without the referrers API); sign again", what, attempt)
		}
		pause = min(2*pause, max(2*time.Second, 3*took))
		if err := sleepJitter(ctx, pause); err != nil {
			return err
		}
		t0 := time.Now()
		if err := write(); err != nil {
			return err
		}
		pause = max(pause, 3*time.Since(t0))
	}
}

func listedTwice(ctx context.Context, settle time.Duration, listed func() (bool, error)) (bool, error) {
	if ok, err := listed(); !ok || err != nil {
		return ok, err
	}
	if err := sleepJitter(ctx, settle); err != nil {
		return false, err
	}
	return listed()
}

// sleepJitter sleeps between d/2 and d, or until ctx ends: concurrent
// signers retrying in step would collide again.
func sleepJitter(ctx context.Context, d time.Duration) error {
	return registry.Sleep(ctx, d/2+rand.N(d/2+1))
}

// HasReferrersAPI asks GET /v2/<repo>/referrers/<digest> as ggcr does:
// an OCI index answer means the registry keeps the list itself.
func HasReferrersAPI(ctx context.Context, repo name.Repository, d v1.Hash, lopts ...registry.Option) bool {
	c, err := registry.ClientFor(ctx, repo, lopts...)
	return err == nil && c.ReferrersAPI(ctx, d)
}

// LegacyTag is cosign's .sig tag for digest d: sha256-<hex>.sig.
func LegacyTag(d v1.Hash) string { return d.Algorithm + "-" + d.Hex + ".sig" }

// legacyManifest is the .sig tag's manifest.
type legacyManifest struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     types.MediaType `json:"mediaType"`
	Config        v1.Descriptor   `json:"config"`
	Layers        []v1.Descriptor `json:"layers"`
}

func pushLegacy(ctx context.Context, c *registry.Client, d v1.Hash, s *Signer) (string, error) {
	repo, ropts := c.Repository(), c.Remote(ctx)
	payload, err := newSimpleSigning(repo.Name(), d)
	if err != nil {
		return "", err
	}
	sig, err := s.sign(payload)
	if err != nil {
		return "", err
	}
	tag := repo.Tag(LegacyTag(d))
	lay := static.NewLayer(payload, SimpleSigningMediaType)
	if err := remote.WriteLayer(repo, lay, ropts...); err != nil {
		return "", err
	}
	ld, _ := lay.Digest()
	ours := v1.Descriptor{
		MediaType: SimpleSigningMediaType, Digest: ld, Size: int64(len(payload)),
		Annotations: map[string]string{SignatureAnnotation: encodeB64(sig)},
	}
	// current reads the tag's manifest (none yet: an empty one).
	current := func() (legacyManifest, error) {
		var m legacyManifest
		raw, _, err := c.Manifest(ctx, tag)
		if err == nil {
			_ = json.Unmarshal(raw, &m)
		} else if !registry.IsNotFound(err) {
			return m, err
		}
		return m, nil
	}
	has := func(m legacyManifest) bool {
		for _, l := range m.Layers {
			if l.Digest == ours.Digest && l.Annotations[SignatureAnnotation] == ours.Annotations[SignatureAnnotation] {
				return true
			}
		}
		return false
	}
	// write keeps the signatures already there (other keys, other
	// signers): cosign appends. A registry has no compare-and-swap for a
	// tag, so the window between the read the new list is built on and
	// the PUT is kept to one GET: the config for the list is uploaded
	// first, then the tag read again, and a list another signer wrote
	// meanwhile is merged instead of overwritten (see confirmListed for
	// what is left of the race).
	write := func() error {
		m, err := current()
		if err != nil {
			return err
		}
		for reread := 0; ; reread++ {
			if has(m) {
				return nil
			}
			next, err := withSignature(ctx, c, m, ours)
			if err != nil {
				return err
			}
			now, err := current()
			if err != nil {
				return err
			}
			if reread == legacyRereads || sameLayers(now, m) {
				return remote.Put(tag, next, ropts...)
			}
			m = now
		}
	}
	t0 := time.Now()
	if err := write(); err != nil {
		return "", err
	}
	took := time.Since(t0)
	// Every signer rewrites the one tag: read it back (see confirmListed).
	listed := func() (bool, error) {
		m, err := current()
		return has(m), err
	}
	if err := confirmListed(ctx, "tag "+tag.TagStr(), took, write, listed); err != nil {
		return "", err
	}
	return tag.String(), nil
}

// legacyRereads is how many times a legacy signer builds its list again
// when the tag changed under it before it writes anyway (and relies on
// the read-back, confirmListed).
const legacyRereads = 4

// withSignature is the .sig manifest m with ours appended, its config
// (the layers' diff IDs) uploaded.
func withSignature(ctx context.Context, c *registry.Client, m legacyManifest, ours v1.Descriptor) (rawManifest, error) {
	m.Layers = append(slices.Clone(m.Layers), ours)
	diffIDs := make([]string, len(m.Layers))
	for i, l := range m.Layers {
		diffIDs[i] = l.Digest.String()
	}
	cfgRaw, _ := json.Marshal(map[string]any{
		"architecture": "", "os": "", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	cfg := static.NewLayer(cfgRaw, types.OCIConfigJSON)
	if err := remote.WriteLayer(c.Repository(), cfg, c.Remote(ctx)...); err != nil {
		return rawManifest{}, err
	}
	cd, _ := cfg.Digest()
	m.SchemaVersion, m.MediaType = 2, types.OCIManifestSchema1
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: cd, Size: int64(len(cfgRaw))}
	raw, err := json.Marshal(m)
	if err != nil {
		return rawManifest{}, err
	}
	return rawManifest{raw, types.OCIManifestSchema1}, nil
}

// sameLayers says whether two reads of the .sig tag list the same
// signatures, in the same order.
func sameLayers(a, b legacyManifest) bool {
	return slices.EqualFunc(a.Layers, b.Layers, func(x, y v1.Descriptor) bool {
		return x.Digest == y.Digest && x.Annotations[SignatureAnnotation] == y.Annotations[SignatureAnnotation]
	})
}

// readBlob reads a small blob and checks its size and digest.
func readBlob(ctx context.Context, c *registry.Client, d v1.Descriptor) ([]byte, error) {
	if d.Size > maxArtifact || d.Size < 0 {
		return nil, fmt.Errorf("blob %s: size %d is not a signature's", d.Digest, d.Size)
	}
	// Through the Client: from the mirror the image was read through, if
	// any, as the signature manifest was.
	rc, err := c.Open(ctx, d.Digest, 0, d.Size)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxArtifact+1))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %v", d.Digest, err)
	}
	if int64(len(b)) != d.Size {
		return nil, fmt.Errorf("blob %s: %d bytes, descriptor says %d", d.Digest, len(b), d.Size)
	}
	if got := fmt.Sprintf("sha256:%x", sha256.Sum256(b)); d.Digest.Algorithm != "sha256" || got != d.Digest.String() {
		return nil, fmt.Errorf("blob %s: content hashes to %s", d.Digest, got)
	}
	return b, nil
}

// readManifest reads a manifest by digest (checked by Client.Manifest).
func readManifest(ctx context.Context, c *registry.Client, d v1.Hash) ([]byte, error) {
	raw, _, err := c.Manifest(ctx, c.Repository().Digest(d.String()))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxArtifact {
		return nil, fmt.Errorf("manifest %s: %d bytes is not a signature's", d, len(raw))
	}
	return raw, nil
}

func encodeB64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
