package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// MaxManifest bounds a manifest or index read from a registry.
const MaxManifest = 16 << 20

// manifestTypes are the media types a manifest GET accepts.
var manifestTypes = []types.MediaType{
	types.OCIManifestSchema1, types.OCIImageIndex,
	types.DockerManifestSchema2, types.DockerManifestList,
	types.DockerManifestSchema1Signed, types.DockerManifestSchema1,
}

// Manifest reads the manifest or index ref names (a tag or a digest of
// the Client's repository) and its descriptor: the digest of the bytes
// as read (checked against ref's digest, when ref is one), their size and
// media type. Errors are the registry's (RedactError puts them in words).
func (f *Client) Manifest(ctx context.Context, ref name.Reference) ([]byte, v1.Descriptor, error) {
	if ref.Context().Name() != f.repo.Name() {
		return nil, v1.Descriptor{}, fmt.Errorf("manifest %s: the client reads %s", ref, f.repo)
	}
	if f.m != nil {
		return f.m.manifest(ctx, ref)
	}
	hdr := manifestAccept()
	resp, err := f.send(ctx, http.MethodGet, f.base+"manifests/"+ref.Identifier(), hdr, "manifest "+ref.Identifier(), func(resp *http.Response) error {
		defer resp.Body.Close()
		return transport.CheckError(resp, http.StatusOK)
	})
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxManifest+1))
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("manifest %s: %w", ref.Identifier(), RedactError(err))
	}
	if len(raw) > MaxManifest {
		return nil, v1.Descriptor{}, fmt.Errorf("manifest %s: larger than the %d bytes kiln reads for one", ref.Identifier(), MaxManifest)
	}
	dg, size, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	if d, ok := ref.(name.Digest); ok && d.DigestStr() != dg.String() {
		return nil, v1.Descriptor{}, fmt.Errorf("manifest %s: %w: content hashes to %s", d.DigestStr(), ErrDigestMismatch, dg)
	}
	return raw, v1.Descriptor{MediaType: manifestType(resp.Header.Get("Content-Type"), raw), Digest: dg, Size: size}, nil
}

// Head asks what ref names without reading it (a manifests HEAD): its
// digest (the registry's Docker-Content-Digest), size and media type. A
// digest reference must be answered with that digest.
func (f *Client) Head(ctx context.Context, ref name.Reference) (v1.Descriptor, error) {
	if ref.Context().Name() != f.repo.Name() {
		return v1.Descriptor{}, fmt.Errorf("manifest %s: the client reads %s", ref, f.repo)
	}
	if f.m != nil {
		return f.m.head(ctx, ref)
	}
	hdr := manifestAccept()
	resp, err := f.send(ctx, http.MethodHead, f.base+"manifests/"+ref.Identifier(), hdr, "manifest "+ref.Identifier(), func(resp *http.Response) error {
		defer resp.Body.Close()
		return transport.CheckError(resp, http.StatusOK)
	})
	if err != nil {
		return v1.Descriptor{}, err
	}
	resp.Body.Close()
	dg, err := v1.NewHash(resp.Header.Get("Docker-Content-Digest"))
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("manifest %s: the registry's HEAD names no digest (Docker-Content-Digest: %q)", ref.Identifier(), resp.Header.Get("Docker-Content-Digest"))
	}
	if d, ok := ref.(name.Digest); ok && d.DigestStr() != dg.String() {
		return v1.Descriptor{}, fmt.Errorf("manifest %s: %w: the registry answers %s", d.DigestStr(), ErrDigestMismatch, dg)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return v1.Descriptor{MediaType: types.MediaType(mt), Digest: dg, Size: resp.ContentLength}, nil
}

// manifestAccept is the Accept header of a manifest GET or HEAD: every
// manifest and index type kiln reads.
func manifestAccept() http.Header {
	accept := make([]string, len(manifestTypes))
	for i, mt := range manifestTypes {
		accept[i] = string(mt)
	}
	return http.Header{"Accept": {strings.Join(accept, ",")}}
}

// manifestType is the media type a manifest is served as, else the one
// its mediaType field names.
func manifestType(contentType string, raw []byte) types.MediaType {
	if mt, _, err := mime.ParseMediaType(contentType); err == nil {
		for _, t := range manifestTypes {
			if types.MediaType(mt) == t {
				return t
			}
		}
	}
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
	}
	_ = json.Unmarshal(raw, &m)
	return m.MediaType
}

// Remote is go-containerregistry's remote options over the Client's
// authenticated transport, for what kiln leaves to remote in its
// repository (the referrers API; tags, manifests and blobs written by a
// Client made WithPush): no second token exchange.
func (f *Client) Remote(ctx context.Context) []remote.Option {
	if f.m != nil {
		return f.m.remote(ctx)
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithTransport(f.rt)}
}

// Referrers lists d's referrers in the Client's repository (the
// referrers API, else the referrers tag schema, as go-containerregistry
// reads them), through its mirrors first when it has any, as its
// manifests are read: a signature is looked for where the image was
// found.
func (f *Client) Referrers(ctx context.Context, d v1.Hash) (*v1.IndexManifest, error) {
	if f.m != nil {
		var im *v1.IndexManifest
		err := f.m.read(ctx, f.m.repo.Digest(d.String()), func(c *Client, ref name.Reference) error {
			var err error
			im, err = c.Referrers(ctx, d)
			return err
		})
		return im, err
	}
	idx, err := remote.Referrers(f.repo.Digest(d.String()), f.Remote(ctx)...)
	if err != nil {
		return nil, err
	}
	return idx.IndexManifest()
}

// ReferrersAPI says whether the registry keeps d's referrers list itself:
// GET /v2/<repo>/referrers/<d> answers an OCI index, as
// go-containerregistry asks before it falls back to the referrers tag
// schema. One request, not retried; any failure is a no.
func (f *Client) ReferrersAPI(ctx context.Context, d v1.Hash) bool {
	if f.m != nil {
		return f.m.referrersAPI(ctx, d)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"referrers/"+d.String(), nil)
	if err != nil {
		return false
	}
	req.Header.Set("Accept", string(types.OCIImageIndex))
	f.mu.Lock()
	f.requests++
	f.mu.Unlock()
	resp, err := f.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Type") == string(types.OCIImageIndex)
}

// Pool hands out one Client per repository, all through one tuned
// transport (one connection pool for every repository of a host), each
// after one token exchange however often it is asked for.
type Pool struct {
	o     *Options
	fopts []FetchOption

	mu      sync.Mutex
	clients map[string]*Client
}

// NewPool returns the registry clients reached with opts. The transport
// keeps enough idle connections per host for parallel Range chunks and
// never asks for transfer compression (blobs are compressed already, and
// it would break Range offsets).
func NewPool(opts []Option, fopts ...FetchOption) *Pool {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.DisableCompression = true
	o := MakeOptions(append([]Option{WithTransport(t)}, opts...))
	o.pool = nil
	return &Pool{o: o, fopts: fopts, clients: map[string]*Client{}}
}

// WithPool makes ClientFor and RemoteFor take their clients from p, so
// that every package a run hands these options to (weights, sign) reads
// a repository through the one client its images were read with.
func WithPool(p *Pool) Option { return func(o *Options) { o.pool = p } }

// Pooled is opts with a Pool of their own when they have none
// (WithPool(NewPool(opts))), else opts: everything a run hands them to
// then reads and writes each repository through one client, after one
// token exchange. A command makes its options Pooled once, at the start.
func Pooled(opts []Option) []Option {
	if MakeOptions(opts).pool != nil {
		return opts
	}
	return append(opts[:len(opts):len(opts)], WithPool(NewPool(opts)))
}

// Repo returns the Client of repo, made on the first call.
func (p *Pool) Repo(ctx context.Context, repo name.Repository) (*Client, error) {
	return p.repo(ctx, repo, false)
}

// repo is Repo, for a Client that may push when push is set: one made to
// read only is replaced (its holders keep it), one that may push serves
// reads too.
func (p *Pool) repo(ctx context.Context, repo name.Repository, push bool) (*Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := repo.Name()
	if c, ok := p.clients[key]; ok && (c.push || !push) {
		return c, nil
	}
	o := *p.o
	o.push = o.push || push
	c, err := newClient(ctx, key, &o, p.fopts...)
	if err != nil {
		return nil, err
	}
	p.clients[key] = c
	return c, nil
}

// ClientFor is the Client of repo: the pool's (WithPool), else a new one.
func ClientFor(ctx context.Context, repo name.Repository, opts ...Option) (*Client, error) {
	return MakeOptions(opts).Client(ctx, repo)
}

// RemoteFor is go-containerregistry's remote options for repo: over the
// pool's client for it (WithPool: no second login; WithPush for writes),
// else RemoteOptions.
func RemoteFor(ctx context.Context, repo name.Repository, opts ...Option) []remote.Option {
	o := MakeOptions(opts)
	if o.pool != nil {
		if c, err := o.pool.repo(ctx, repo, o.push); err == nil {
			return c.Remote(ctx)
		}
	}
	return o.Remote(ctx)
}

// Client is the Client of repo under o: the pool's (WithPool), else a
// new one.
func (o *Options) Client(ctx context.Context, repo name.Repository) (*Client, error) {
	if o.pool != nil {
		return o.pool.repo(ctx, repo, o.push)
	}
	return newClient(ctx, repo.Name(), o)
}

// MaxTagPages and MaxTags bound a tag listing: a registry that answers
// every page with another Link: next (or one huge page) ends the listing
// in words instead of keeping kiln busy forever.
const (
	MaxTagPages = 100
	MaxTags     = 100_000
)

// ErrTooManyTags is returned (wrapped) by Tags when the listing goes on
// past MaxTagPages pages or MaxTags tags.
var ErrTooManyTags = fmt.Errorf("the tag list goes on past %d pages or %d tags", MaxTagPages, MaxTags)

// Tags lists the Client's repository's tags, following the registry's
// pages (Link: next) up to MaxTagPages of them and MaxTags tags in all.
func (f *Client) Tags(ctx context.Context) ([]string, error) {
	if f.m != nil {
		return f.m.tags(ctx)
	}
	p, err := remote.NewPuller(f.Remote(ctx)...)
	if err != nil {
		return nil, err
	}
	l, err := p.Lister(ctx, f.repo)
	if err != nil {
		return nil, err
	}
	var tags []string
	for pages := 0; l.HasNext(); pages++ {
		if pages >= MaxTagPages {
			return nil, fmt.Errorf("listing %s: %w", f.repo, ErrTooManyTags)
		}
		page, err := l.Next(ctx)
		if err != nil {
			return nil, err
		}
		tags = append(tags, page.Tags...)
		if len(tags) > MaxTags {
			return nil, fmt.Errorf("listing %s: %w", f.repo, ErrTooManyTags)
		}
	}
	return tags, nil
}
