package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/kiln-build/kiln/internal/redact"
)

// mirrored is what a read Client of a repository whose registry has
// mirrors reads through: each mirror's Client of the same repository,
// then the registry's, each made (and logged in to) when first needed.
// A manifest is read from the first source that serves it, as docker
// and containerd do; blobs (content-addressed, verified by the caller)
// from the source the last manifest came from, then the others.
type mirrored struct {
	o     *Options // no mirrors, no pool: the sources' own options
	fopts []FetchOption
	repo  name.Repository
	srcs  []*source // the mirrors in order, then the registry
	note  func(string)

	mu    sync.Mutex
	last  int
	via   map[string]string // reference → the mirror that served it
	noted map[string]bool
	made  []*Client // the sources' Clients made so far
}

// source is one place a mirrored repository is read from.
type source struct {
	mirror *Mirror // nil: the registry itself
	once   sync.Once
	c      *Client
	err    error
}

func newMirrored(r name.Repository, ms []Mirror, o *Options, fopts []FetchOption) *Client {
	so := *o
	so.mirrors, so.pool = nil, nil
	m := &mirrored{o: &so, fopts: fopts, repo: r, note: o.mirrorNote, via: map[string]string{}, noted: map[string]bool{}}
	for i := range ms {
		m.srcs = append(m.srcs, &source{mirror: &ms[i]})
	}
	m.srcs = append(m.srcs, &source{})
	return &Client{repo: r, m: m}
}

// client is the source's Client, made on first use.
func (m *mirrored) client(ctx context.Context, s *source) (*Client, error) {
	s.once.Do(func() {
		if s.mirror == nil {
			s.c, s.err = newClient(ctx, m.repo.Name(), m.o, m.fopts...)
			return
		}
		o := *m.o
		if s.mirror.HTTP {
			o.insecureHosts = append(o.insecureHosts[:len(o.insecureHosts):len(o.insecureHosts)], s.mirror.host())
		}
		s.c, s.err = newClient(ctx, s.mirror.repo(m.repo), &o, m.fopts...)
	})
	if s.c != nil {
		m.mu.Lock()
		if !slices.Contains(m.made, s.c) {
			m.made = append(m.made, s.c)
		}
		m.mu.Unlock()
	}
	return s.c, s.err
}

// on is ref (a tag or digest of the mirrored repository) in c's.
func on(c *Client, ref name.Reference) name.Reference {
	if d, ok := ref.(name.Digest); ok {
		return c.repo.Digest(d.DigestStr())
	}
	return c.repo.Tag(ref.Identifier())
}

// read reads ref from the first source that serves it: a mirror, else
// the registry. Failing everywhere, the error says what each mirror
// answered and is the registry's (errors.As still finds its cause).
func (m *mirrored) read(ctx context.Context, ref name.Reference, read func(c *Client, ref name.Reference) error) error {
	var failed []string
	var notFound error // the first mirror's "not found", if one said so
	for i, s := range m.srcs {
		c, err := m.client(ctx, s)
		if err == nil {
			if err = read(c, on(c, ref)); err == nil {
				m.served(i, ref, failed)
				return nil
			}
		}
		if ctx.Err() != nil {
			return err
		}
		if s.mirror == nil {
			var te *transport.Error
			if notFound != nil && !errors.As(err, &te) {
				// The registry gave no answer at all (its name does not
				// resolve, nothing listens: a host that only reaches its
				// mirror): a mirror's "not found" is the answer, so that
				// a caller looking for something optional (a signature
				// tag) finds it absent instead of failing.
				return m.failed(err, failed, notFound)
			}
			return m.failed(err, failed, nil)
		}
		if notFound == nil && IsNotFound(err) {
			notFound = err
		}
		failed = append(failed, fmt.Sprintf("mirror %s (%s): %v", s.mirror, s.mirror.Source, RedactError(err)))
	}
	return nil // not reached: the registry is the last source
}

// served records that source i answered ref and says so, once per
// source: through which mirror, or from the registry after which mirrors
// failed.
func (m *mirrored) served(i int, ref name.Reference, failed []string) {
	s := m.srcs[i]
	m.mu.Lock()
	m.last = i
	line := ""
	if s.mirror != nil {
		m.via[ref.String()] = s.mirror.String()
		line = fmt.Sprintf("%s: read through mirror %s (%s)", ref, s.mirror, s.mirror.Source)
	} else {
		delete(m.via, ref.String())
		if len(failed) > 0 {
			line = fmt.Sprintf("%s: read from %s after %s", ref, displayHost(m.repo.RegistryStr()), strings.Join(failed, "; "))
		}
	}
	// Said once per source (and what failed before it), not for each
	// manifest of an index read after its tag.
	key := fmt.Sprint(i, failed)
	say := line != "" && !m.noted[key] && m.note != nil
	m.noted[key] = true
	m.mu.Unlock()
	if say {
		m.note(line)
	}
}

// failed is the registry's error after the mirrors': in words, the
// mirrors' first. What errors.As finds in it is the registry's error, or
// cause when one is given (a mirror's "not found").
func (m *mirrored) failed(err error, mirrors []string, cause error) error {
	red := RedactError(err)
	if len(mirrors) == 0 {
		return red
	}
	msg := strings.Join(mirrors, "; ") + "; then " + displayHost(m.repo.RegistryStr()) + ": " + red.Error()
	wrapped := red
	if cause != nil {
		wrapped = RedactError(cause)
	}
	return &redactedError{msg: redact.String(msg), err: wrapped, described: true}
}

// blob runs f on the source the last manifest came from, then on the
// others in order, until one answers.
func (m *mirrored) blob(ctx context.Context, f func(c *Client) error) error {
	m.mu.Lock()
	first := m.last
	m.mu.Unlock()
	order := []int{first}
	for i := range m.srcs {
		if i != first {
			order = append(order, i)
		}
	}
	var failed []string
	var regErr error
	for _, i := range order {
		s := m.srcs[i]
		c, err := m.client(ctx, s)
		if err == nil {
			if err = f(c); err == nil {
				return nil
			}
		}
		if ctx.Err() != nil {
			return err
		}
		if s.mirror == nil {
			regErr = err
			continue
		}
		failed = append(failed, fmt.Sprintf("mirror %s (%s): %v", s.mirror, s.mirror.Source, RedactError(err)))
	}
	return m.failed(regErr, failed, nil)
}

// Via is the mirror the Client last read ref's manifest through ("" for
// the registry itself, or a Client without mirrors).
func (f *Client) Via(ref name.Reference) string {
	if f.m == nil {
		return ""
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.m.via[ref.String()]
}

func (m *mirrored) manifest(ctx context.Context, ref name.Reference) (raw []byte, d v1.Descriptor, err error) {
	err = m.read(ctx, ref, func(c *Client, r name.Reference) error {
		raw, d, err = c.Manifest(ctx, r)
		return err
	})
	return raw, d, err
}

func (m *mirrored) head(ctx context.Context, ref name.Reference) (d v1.Descriptor, err error) {
	err = m.read(ctx, ref, func(c *Client, r name.Reference) error {
		d, err = c.Head(ctx, r)
		return err
	})
	return d, err
}

func (m *mirrored) open(ctx context.Context, dgst v1.Hash, off, n int64) (rc io.ReadCloser, err error) {
	err = m.blob(ctx, func(c *Client) error {
		rc, err = c.Open(ctx, dgst, off, n)
		return err
	})
	return rc, err
}

func (m *mirrored) size(ctx context.Context, dgst v1.Hash) (n int64, err error) {
	err = m.blob(ctx, func(c *Client) error {
		n, err = c.Size(ctx, dgst)
		return err
	})
	return n, err
}

func (m *mirrored) tags(ctx context.Context) (tags []string, err error) {
	err = m.blob(ctx, func(c *Client) error {
		tags, err = c.Tags(ctx)
		return err
	})
	return tags, err
}

// remote is the registry's own Client's remote options (what kiln leaves
// to go-containerregistry names the registry's repository), else fresh
// ones when it cannot be reached now.
func (m *mirrored) remote(ctx context.Context) []remote.Option {
	c, err := m.client(ctx, m.srcs[len(m.srcs)-1])
	if err != nil {
		return m.o.Remote(ctx)
	}
	return c.Remote(ctx)
}

func (m *mirrored) referrersAPI(ctx context.Context, d v1.Hash) bool {
	c, err := m.client(ctx, m.srcs[len(m.srcs)-1])
	return err == nil && c.ReferrersAPI(ctx, d)
}

func (m *mirrored) requests() int {
	m.mu.Lock()
	made := slices.Clone(m.made)
	m.mu.Unlock()
	n := 0
	for _, c := range made {
		n += c.Requests()
	}
	return n
}
