package refresh

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
)

// DefaultRepository is where the nvidia/cuda tags are listed (Docker Hub).
const DefaultRepository = "nvidia/cuda"

// Options are a refresh's sources and clients.
type Options struct {
	// Base is the data refreshed and diffed against (embedded or a file).
	Base *recipes.DB
	// IndexURL is the root of the per-variant wheel indexes:
	// IndexURL/cu126/torch/ (default: the base data's, download.pytorch.org/whl).
	IndexURL string
	// Variants are read besides those the base data and the release matrix
	// name (cu129 to catch unofficial rows, a new cu13x).
	Variants []string
	// MatrixURL is PyTorch's RELEASE.md (default DefaultMatrixURL).
	MatrixURL string
	// Repository is the nvidia/cuda repository whose tags are listed
	// (default DefaultRepository on Docker Hub; REGISTRY/REPO for a mirror).
	Repository string
	// HTTP reads the indexes and the matrix (default registry.HTTPClient).
	HTTP *http.Client
	// Registry configures the registry client (keychain, transport,
	// insecure hosts); Remote adds go-containerregistry options (tests
	// shorten its retry backoff).
	Registry []registry.Option
	Remote   []remote.Option
	// Now is when the sources are read (default time.Now).
	Now func() time.Time
}

func (o *Options) defaults() error {
	if o.Base == nil {
		db, err := recipes.Data()
		if err != nil {
			return err
		}
		o.Base = db
	}
	if o.IndexURL == "" {
		o.IndexURL = o.Base.Torch.IndexURL
	}
	o.IndexURL = strings.TrimSuffix(o.IndexURL, "/")
	if o.MatrixURL == "" {
		o.MatrixURL = DefaultMatrixURL
	}
	if o.Repository == "" {
		o.Repository = DefaultRepository
	}
	if o.HTTP == nil {
		o.HTTP = registry.HTTPClient(o.Registry)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	for _, v := range o.Variants {
		if _, ok := cudaOfVariant(v); !ok {
			return fmt.Errorf("variant %q: want cuXYZ (cu126, cu130, ...)", v)
		}
	}
	for _, u := range []string{o.IndexURL, o.MatrixURL} {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return fmt.Errorf("%q: want an http(s) URL", redactURL(u))
		}
	}
	return nil
}

// Run reads the sources and returns the refreshed data, its Changes the
// reviewed diff against o.Base.
func Run(ctx context.Context, o Options) (*recipes.DataFile, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	now := o.Now().UTC()
	r := &run{o: &o, date: now.Format(time.DateOnly)}
	matrix, err := o.fetchMatrix(ctx)
	if err != nil {
		return nil, err
	}
	r.source(o.MatrixURL, "PyTorch release matrix (official CUDA variants, cuDNN, Python)")
	torch, err := r.torch(ctx, matrix)
	if err != nil {
		return nil, err
	}
	images, err := r.images(ctx)
	if err != nil {
		return nil, err
	}
	f := &recipes.DataFile{
		Format:          recipes.DataFileFormat,
		DataVersion:     o.Base.Version() + "+refresh." + now.Format("20060102"),
		BaseDataVersion: o.Base.Version(),
		Generated:       now.Format(time.RFC3339),
		Sources:         r.sources,
		Torch:           torch,
		Images:          images,
	}
	f.Changes = r.diff(r.facts(o.Base.Torch, o.Base.Images), r.facts(f.Torch, f.Images))
	if f.Changes == nil {
		f.Changes = []recipes.DataChange{}
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("refreshed data: %w", err)
	}
	return f, nil
}

type run struct {
	o       *Options
	date    string
	sources []recipes.DataSource
	listURL string // the tags list read, for removed-tag changes
}

func (r *run) source(u, what string) {
	r.sources = append(r.sources, recipes.DataSource{URL: redactURL(u), What: what, Date: r.date})
}

// read is how a fact's source is written: the URL and the day it was read.
func (r *run) read(u string) string { return redactURL(u) + " (read " + r.date + ")" }

// knownCUDA says whether kiln's driver table has the CUDA minor of a tag
// (a tag it does not have is refused by the resolver: the diff says so).
func (r *run) knownCUDA(ver string) bool {
	_, err := cuda.MinDriver(ver)
	return err == nil
}

// redactURL drops a URL's user, password and query (index mirrors put
// tokens there): a source URL is printed and written to the data file.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable URL)"
	}
	u.RawQuery, u.Fragment, u.User = "", "", nil
	return u.String()
}
