package wheelcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/recipes/wheelkey"
	"github.com/kiln-build/kiln/registry"
)

// The artifact's media types and annotations.
const (
	// ArtifactType is the manifest's artifactType.
	ArtifactType = "application/vnd.kiln.wheel.v1"
	// MediaTypeWheel is the one layer's media type: the wheel file as is.
	MediaTypeWheel = "application/vnd.kiln.wheel.v1+zip"
	// KeyAnnotation holds the key's canonical JSON (Key.JSON).
	KeyAnnotation = "dev.kiln.wheel.key"
	// KeyDigestAnnotation holds Key.Digest.
	KeyDigestAnnotation = "dev.kiln.wheel.key.digest"
	// TitleAnnotation names the wheel file on its layer.
	TitleAnnotation = "org.opencontainers.image.title"

	emptyJSONMediaType = "application/vnd.oci.empty.v1+json"
	// maxManifest bounds what a lookup reads of a manifest.
	maxManifest = 1 << 20
	// maxWheel bounds a cached wheel (FlashAttention's are ~250 MB).
	maxWheel = 4 << 30
	// maxCandidates bounds the manifests a lookup for a wider wheel reads.
	maxCandidates = 256
)

// ErrCorrupt is returned (wrapped) by Fetch when a cached wheel's bytes do
// not match its manifest (digest or size): it is never installed.
var ErrCorrupt = errors.New("cached wheel is corrupt")

// Cache is a wheel cache: one registry repository.
type Cache struct {
	repo   name.Repository
	mirror *name.Repository  // read through it first, when set
	opts   []registry.Option // with the cache's pool: one client per repository
	wider  bool
	// readOnly: lookups and fetches only, whose token asks for pull
	// alone (kiln lock; a read-only credential on a registry that
	// refuses a push scope outright).
	readOnly bool
}

// Option configures a Cache.
type Option func(*cacheConfig)

type cacheConfig struct {
	mirror string
	wider  bool
	opts   []registry.Option
}

// WithMirror reads manifests and wheels through endpoint (host[:port]
// serving the same repository path) before the repository itself; pushes
// go to the repository.
func WithMirror(endpoint string) Option { return func(c *cacheConfig) { c.mirror = endpoint } }

// WithAllowWiderArchs lets a lookup that misses use a wheel compiled for
// more GPU architectures than asked for (correct, but larger).
func WithAllowWiderArchs(ok bool) Option { return func(c *cacheConfig) { c.wider = ok } }

// WithRegistryOptions are the options every registry request uses
// (credentials, insecure hosts, fetch retries).
func WithRegistryOptions(opts ...registry.Option) Option {
	return func(c *cacheConfig) { c.opts = append(c.opts, opts...) }
}

// Open returns the cache in repo ([REGISTRY/]REPO; Docker Hub short names
// as everywhere in kiln). Nothing is contacted yet.
func Open(repo string, opts ...Option) (*Cache, error) {
	var cfg cacheConfig
	for _, o := range opts {
		o(&cfg)
	}
	if strings.ContainsAny(repo, "@") || strings.Contains(repo[strings.LastIndex(repo, "/")+1:], ":") {
		return nil, fmt.Errorf("wheel cache %q: write a repository without a tag or digest (e.g. ghcr.io/acme/wheels); kiln names each wheel's tag itself", repo)
	}
	r, err := layers.ParseRef(repo, cfg.opts...)
	if err != nil {
		return nil, fmt.Errorf("wheel cache: %w", err)
	}
	if r.Kind != layers.KindRegistry {
		return nil, fmt.Errorf("wheel cache %q: want a registry repository (e.g. ghcr.io/acme/wheels)", repo)
	}
	// Its own pool, unless the caller's options name one: every lookup,
	// fetch and push of a repository goes through one client.
	lopts := append([]registry.Option{registry.WithPool(registry.NewPool(cfg.opts))}, cfg.opts...)
	c := &Cache{repo: r.Name.Context(), opts: lopts, wider: cfg.wider}
	if cfg.mirror != "" {
		if strings.Contains(cfg.mirror, "://") || strings.Contains(cfg.mirror, "/") {
			return nil, fmt.Errorf("wheel cache mirror %q: write host[:port], without scheme or path", cfg.mirror)
		}
		m, err := layers.ParseRef(cfg.mirror+"/"+c.repo.RepositoryStr(), cfg.opts...)
		if err != nil {
			return nil, fmt.Errorf("wheel cache mirror: %w", err)
		}
		mr := m.Name.Context()
		c.mirror = &mr
	}
	return c, nil
}

// Repo is the repository, in full.
func (c *Cache) Repo() string { return c.repo.Name() }

// AllowsWider says whether lookups may answer with a wider wheel.
func (c *Cache) AllowsWider() bool { return c.wider }

// Entry is a cached wheel.
type Entry struct {
	Key      wheelkey.Key `json:"key"`      // the wheel's own key (Archs wider than asked when Wider)
	Ref      layers.Ref   `json:"ref"`      // REPO:TAG it was found under (or pushed to), parsed once: a signer takes it as is
	Manifest string       `json:"manifest"` // the artifact manifest's digest
	Filename string       `json:"filename"` // the wheel's file name
	Digest   v1.Hash      `json:"digest"`   // the wheel's sha256
	Size     int64        `json:"size"`     // the wheel's bytes
	Wider    bool         `json:"wider"`    // compiled for more architectures than asked
	Via      string       `json:"via"`      // the endpoint read: the repository's registry or the mirror
	repo     name.Repository
}

// ReadRepo is the repository e was read from (the mirror, or the cache's
// own), where its artifact's signatures are read too.
func (e *Entry) ReadRepo() name.Repository { return e.repo }

// client is repo's registry client, the same for the cache's life. The
// repository's may push: a build pushes what it compiled after its
// lookup missed, with the token it looked up with (a token server grants
// a read-only credential the pull it allows). The mirror's only reads.
func (c *Cache) client(ctx context.Context, repo name.Repository) (*registry.Client, error) {
	opts := c.opts
	if repo.Name() == c.repo.Name() && !c.readOnly {
		opts = append(opts[:len(opts):len(opts)], registry.WithPush())
	}
	return registry.ClientFor(ctx, repo, opts...)
}

// ReadOnly is c for lookups and fetches alone: its logins ask for pull,
// never push, and Push fails.
func (c *Cache) ReadOnly() *Cache {
	ro := *c
	ro.readOnly = true
	return &ro
}

// readRepos are where lookups and fetches read: the mirror, then the
// repository.
func (c *Cache) readRepos() []name.Repository {
	if c.mirror != nil {
		return []name.Repository{*c.mirror, c.repo}
	}
	return []name.Repository{c.repo}
}

// Lookup finds the wheel for k: nil, nil on a miss. A tag whose manifest
// holds another key, or is not a kiln wheel, is a miss.
func (c *Cache) Lookup(ctx context.Context, k wheelkey.Key) (*Entry, error) {
	if err := k.Check(); err != nil {
		return nil, err
	}
	k = k.Normalize()
	// A miss is a miss when one endpoint answered; an error only when
	// none did (a mirror that is down does not hide the repository).
	var lastErr error
	answered := false
	for _, repo := range c.readRepos() {
		e, err := c.get(ctx, repo, k.Tag())
		if err != nil {
			lastErr = err
			continue
		}
		answered = true
		if e != nil && e.Key.JSON() == k.JSON() {
			return e, nil
		}
	}
	if c.wider {
		// A listing that failed everywhere is an error, not a miss: the
		// wheel asked for may be there (N5: a registry paging forever).
		listed := false
		var listErr error
		for _, repo := range c.readRepos() {
			e, err := c.wider1(ctx, repo, k)
			if err != nil {
				listErr = err
				continue
			}
			listed = true
			if e != nil {
				return e, nil
			}
		}
		if !listed {
			return nil, listErr
		}
	}
	if !answered {
		return nil, lastErr
	}
	return nil, nil
}

// wider1 lists repo's tags of k's package and returns the wheel with the
// fewest architectures that covers k's and differs in nothing else.
func (c *Cache) wider1(ctx context.Context, repo name.Repository, k wheelkey.Key) (*Entry, error) {
	rc, err := c.client(ctx, repo)
	if err != nil {
		return nil, fmt.Errorf("wheel cache %s: listing tags: %w", repo.Name(), registry.RedactError(err))
	}
	tags, err := rc.Tags(ctx)
	if err != nil {
		if registry.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("wheel cache %s: listing tags: %w", repo.Name(), registry.RedactError(err))
	}
	prefix := strings.SplitN(k.Tag(), "-"+strings.TrimPrefix(k.Digest(), "sha256:"), 2)[0] + "-"
	var best *Entry
	n := 0
	for _, t := range tags {
		if !strings.HasPrefix(t, prefix) || n >= maxCandidates {
			continue
		}
		n++
		e, err := c.get(ctx, repo, t)
		if err != nil || e == nil {
			continue
		}
		if !wheelkey.SameButArchs(e.Key, k) || !wheelkey.Covers(e.Key.Archs, k.Archs) {
			continue
		}
		if best == nil || len(e.Key.Archs) < len(best.Key.Archs) {
			e.Wider = len(e.Key.Archs) > len(k.Archs)
			best = e
		}
	}
	return best, nil
}

// get reads the artifact under repo:tag (nil, nil when there is none or
// it is not a kiln wheel).
func (c *Cache) get(ctx context.Context, repo name.Repository, tag string) (*Entry, error) {
	ref := repo.Tag(tag)
	rc, err := c.client(ctx, repo)
	if err != nil {
		return nil, fmt.Errorf("wheel cache %s: %w", repo.Name(), registry.RedactError(err))
	}
	raw, desc, err := rc.Manifest(ctx, ref)
	if err != nil {
		if registry.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("wheel cache %s: %w", repo.Name(), registry.RedactError(err))
	}
	if len(raw) > maxManifest {
		return nil, nil
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil
	}
	if m.ArtifactType != ArtifactType || len(m.Layers) != 1 || m.Layers[0].MediaType != MediaTypeWheel {
		return nil, nil
	}
	var k wheelkey.Key
	if err := json.Unmarshal([]byte(m.Annotations[KeyAnnotation]), &k); err != nil {
		return nil, nil
	}
	l := m.Layers[0]
	fn := l.Annotations[TitleAnnotation]
	// The file pip installs is the wheel its name says: the key's project
	// and version (pip trusts the name), and no larger than a wheel is.
	if !validWheelName(fn) || !wheelNameMatches(fn, k) || l.Size < 0 || l.Size > maxWheel || blob.CheckDigest(l.Digest) != nil {
		return nil, nil
	}
	return &Entry{
		Key: k.Normalize(), Ref: layers.RegistryRef(ref), Manifest: desc.Digest.String(), Filename: fn,
		Digest: l.Digest, Size: l.Size, Via: repo.RegistryStr(), repo: repo,
	}, nil
}

// wheelNameMatches says whether wheel file name fn (PROJECT-VERSION-...)
// names k's project (PEP 503 normalized) and version.
func wheelNameMatches(fn string, k wheelkey.Key) bool {
	parts := strings.Split(strings.TrimSuffix(fn, ".whl"), "-")
	if len(parts) < 5 {
		return false
	}
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(s))
	}
	return norm(parts[0]) == norm(k.Package) && parts[1] == k.Version
}

// validWheelName accepts a bare *.whl file name (never a path).
func validWheelName(s string) bool {
	return strings.HasSuffix(s, ".whl") && len(s) > 4 && len(s) < 256 && !strings.ContainsAny(s, "/\\\x00") && s != "." && s != ".." && !strings.HasPrefix(s, ".")
}

// Fetch writes e's wheel into dir under its file name, streamed and
// verified (digest and size) before it is renamed into place: on a
// mismatch nothing is left and the error wraps ErrCorrupt.
func (c *Cache) Fetch(ctx context.Context, e *Entry, dir string) (string, error) {
	repo := e.repo
	if repo.Name() == "" {
		repo = c.repo
	}
	if !validWheelName(e.Filename) {
		return "", fmt.Errorf("wheel cache %s: %q is not a wheel file name", e.Ref, e.Filename)
	}
	f, err := c.client(ctx, repo)
	if err != nil {
		return "", fmt.Errorf("wheel cache: %w", err)
	}
	// A blob shorter or longer than its manifest says is refused before
	// a byte is read.
	if n, err := f.Size(ctx, e.Digest); err != nil {
		return "", fmt.Errorf("wheel cache %s: %w", e.Ref, registry.BlobError(e.Digest, err))
	} else if n != e.Size {
		return "", fmt.Errorf("%w: %s (%s): the registry holds %d bytes, the manifest names %d (truncated?)", ErrCorrupt, e.Ref, e.Filename, n, e.Size)
	}
	rc, err := f.Open(ctx, e.Digest, 0, e.Size)
	if err != nil {
		return "", fmt.Errorf("wheel cache %s: %w", e.Ref, registry.BlobError(e.Digest, err))
	}
	defer rc.Close()
	vr, err := registry.NewVerifyReader(rc, e.Digest, e.Size)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, e.Filename)
	out, err := atomicfile.Create(dst, 0o644)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, vr); err != nil {
		out.Abort()
		if errors.Is(err, registry.ErrDigestMismatch) || errors.Is(err, registry.ErrSizeMismatch) {
			return "", fmt.Errorf("%w: %s (%s): %v", ErrCorrupt, e.Ref, e.Filename, err)
		}
		return "", fmt.Errorf("wheel cache %s: %w", e.Ref, registry.RedactError(err))
	}
	if err := vr.Drain(); err != nil {
		out.Abort()
		return "", fmt.Errorf("%w: %s (%s): %v", ErrCorrupt, e.Ref, e.Filename, err)
	}
	if err := out.Commit(); err != nil {
		return "", err
	}
	return dst, nil
}

// Push stores the wheel file at path under k's tag, streamed from the
// file, and returns its entry.
func (c *Cache) Push(ctx context.Context, k wheelkey.Key, path string) (*Entry, error) {
	if c.readOnly {
		return nil, fmt.Errorf("wheel cache %s: opened to read only", c.repo.Name())
	}
	if err := k.Check(); err != nil {
		return nil, err
	}
	k = k.Normalize()
	fn := filepath.Base(path)
	if !validWheelName(fn) {
		return nil, fmt.Errorf("wheel cache: %s is not a wheel file", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("wheel cache: %s is not a regular file", path)
	}
	dg, err := blob.FileDigest(path)
	if err != nil {
		return nil, err
	}
	rc, err := c.client(ctx, c.repo)
	if err != nil {
		return nil, fmt.Errorf("wheel cache %s: pushing %s: %w", c.repo.Name(), fn, registry.RedactError(err))
	}
	ropts := rc.Remote(ctx)
	wheel := layers.NewFileLayer(path, dg, dg, fi.Size(), fi.Size(), MediaTypeWheel)
	cfg := static.NewLayer([]byte("{}"), emptyJSONMediaType)
	for _, l := range []v1.Layer{cfg, wheel} {
		if err := remote.WriteLayer(c.repo, l, ropts...); err != nil {
			return nil, fmt.Errorf("wheel cache %s: pushing %s: %w", c.repo.Name(), fn, registry.RedactError(err))
		}
	}
	cd, _ := cfg.Digest()
	m := manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactType,
		Config:        v1.Descriptor{MediaType: emptyJSONMediaType, Digest: cd, Size: 2},
		Layers: []v1.Descriptor{{
			MediaType: MediaTypeWheel, Digest: dg, Size: fi.Size(),
			Annotations: map[string]string{TitleAnnotation: fn},
		}},
		Annotations: map[string]string{KeyAnnotation: k.JSON(), KeyDigestAnnotation: k.Digest()},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	tag := c.repo.Tag(k.Tag())
	if err := remote.Put(tag, rawManifest(raw), ropts...); err != nil {
		return nil, fmt.Errorf("wheel cache %s: %w", tag, registry.RedactError(err))
	}
	md, _, _ := v1.SHA256(strings.NewReader(string(raw)))
	return &Entry{Key: k, Ref: layers.RegistryRef(tag), Manifest: md.String(), Filename: fn, Digest: dg, Size: fi.Size(), Via: c.repo.RegistryStr(), repo: c.repo}, nil
}

// manifest is the artifact's OCI image manifest (artifactType set).
type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     types.MediaType   `json:"mediaType"`
	ArtifactType  string            `json:"artifactType,omitempty"`
	Config        v1.Descriptor     `json:"config"`
	Layers        []v1.Descriptor   `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
