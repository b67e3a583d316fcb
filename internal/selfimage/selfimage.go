// Package selfimage builds kiln's own container image: the static kiln
// binary and a CA certificate bundle in one layer, kiln as entrypoint.
// It is the image 'kiln weights run-args' names for its init container
// and 'kiln warm --emit' runs in its pods. The image is reproducible: the
// same binary and certificates give the same digest (fixed modes, owners
// and times, entries in a fixed order, gzip at a fixed level), and it is
// built with go-containerregistry, as kiln builds everything, not docker.
package selfimage

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths inside the image.
const (
	BinaryPath = "/usr/local/bin/kiln"
	CACertPath = "/etc/ssl/certs/ca-certificates.crt"
)

// Binary is a kiln binary built for Platform.
type Binary struct {
	Platform v1.Platform
	Path     string
}

type options struct {
	caCerts string
	created time.Time
	labels  map[string]string
}

// Option configures Image and Index.
type Option func(*options)

// WithCACerts takes the CA bundle from file (default: the build host's
// /etc/ssl/certs/ca-certificates.crt).
func WithCACerts(file string) Option { return func(o *options) { o.caCerts = file } }

// WithCreated stamps t as the image's creation time and its files'
// modification time (default: the Unix epoch); pass the commit's time
// (SOURCE_DATE_EPOCH) so the image says when its code was written.
func WithCreated(t time.Time) Option { return func(o *options) { o.created = t.UTC() } }

// WithLabels adds config labels (org.opencontainers.image.version, ...).
func WithLabels(l map[string]string) Option { return func(o *options) { o.labels = l } }

func newOptions(opts []Option) *options {
	o := &options{caCerts: CACertPath, created: time.Unix(0, 0).UTC()}
	for _, f := range opts {
		f(o)
	}
	return o
}

// entry is one tar entry; file is the host file a regular entry copies.
type entry struct {
	name string
	mode int64
	file string
}

// Image is kiln's image for b: one gzip layer holding the binary, the CA
// bundle and /tmp, kiln as the entrypoint.
func Image(b Binary, opts ...Option) (v1.Image, error) {
	o := newOptions(opts)
	for _, f := range []string{b.Path, o.caCerts} {
		st, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("kiln image: %v", err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("kiln image: %s is not a regular file", f)
		}
	}
	es := []entry{
		{name: "etc/", mode: 0o755}, {name: "etc/ssl/", mode: 0o755}, {name: "etc/ssl/certs/", mode: 0o755},
		{name: CACertPath[1:], mode: 0o644, file: o.caCerts},
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755}, {name: "usr/local/", mode: 0o755}, {name: "usr/local/bin/", mode: 0o755},
		{name: BinaryPath[1:], mode: 0o755, file: b.Path},
	}
	// The tar is written again each time the layer is read (digest, then
	// upload), streamed from the files: nothing is held in memory.
	open := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(pw, es, o.created)) }()
		return pr, nil
	}
	layer, err := tarball.LayerFromOpener(open, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return nil, fmt.Errorf("kiln image: %v", err)
	}
	cfg := &v1.ConfigFile{
		Architecture: b.Platform.Architecture, OS: b.Platform.OS, Variant: b.Platform.Variant,
		Created: v1.Time{Time: o.created},
		Config: v1.Config{
			Entrypoint: []string{BinaryPath},
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CACertPath},
			WorkingDir: "/",
			Labels:     o.labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: o.created}, CreatedBy: "kiln image: " + BinaryPath + ", " + CACertPath}})
}

// Index is kiln's multi-platform image: one Image per binary, in the
// order given.
func Index(bs []Binary, opts ...Option) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range bs {
		img, err := Image(b, opts...)
		if err != nil {
			return nil, err
		}
		p := b.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, nil
}

func writeTar(w io.Writer, es []entry, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range es {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX, Typeflag: tar.TypeDir}
		if e.file != "" {
			f, err := os.Open(e.file)
			if err != nil {
				return err
			}
			st, err := f.Stat()
			if err != nil {
				f.Close()
				return err
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
			if err := tw.WriteHeader(hdr); err != nil {
				f.Close()
				return err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %v", e.file, err)
			}
			if n != hdr.Size {
				return fmt.Errorf("%s changed while it was read (%d bytes, expected %d)", e.file, n, hdr.Size)
			}
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	}
	return tw.Close()
}

// ParseBinary reads PLATFORM=FILE (linux/arm64=dist/kiln-linux-arm64).
func ParseBinary(s string) (Binary, error) {
	for i := 0; i < len(s); i++ {
		if s[i] == '=' {
			p, err := v1.ParsePlatform(s[:i])
			if err != nil || p.OS == "" || p.Architecture == "" {
				return Binary{}, fmt.Errorf("%q: want PLATFORM=FILE, e.g. linux/amd64=dist/kiln-linux-amd64", s)
			}
			return Binary{Platform: *p, Path: s[i+1:]}, nil
		}
	}
	return Binary{}, fmt.Errorf("%q: want PLATFORM=FILE, e.g. linux/amd64=dist/kiln-linux-amd64", s)
}
