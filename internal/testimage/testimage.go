// Package testimage builds small images in-process for tests: layers from
// lists of tar entries (hostile ones included), written as an OCI layout, a
// docker archive or pushed to an in-process registry.
package testimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entry is one tar entry. Zero Type means a regular file; Size overrides
// len(Body) in the header (to fake a truncated entry); zero Mode means
// 0644 (0755 for a directory).
type Entry struct {
	Name     string
	Body     []byte
	Type     byte
	Linkname string
	Size     int64
	Mode     int64
	// Xattrs are the entry's extended attributes (PAX SCHILY.xattr.*).
	Xattrs map[string]string
}

// File is a regular file entry.
func File(name string, body []byte) Entry { return Entry{Name: name, Body: body} }

// Sized is a regular file of n deterministic bytes.
func Sized(name string, n int) Entry {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + len(name))
	}
	return Entry{Name: name, Body: b}
}

// Safetensors is a file analyze sniffs as weights (and kiln weights strip
// moves out): a u64 header length and a JSON header, then n bytes of
// tensor data that differ with the name.
func Safetensors(name string, n int) Entry {
	hdr := []byte(`{"w":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}`)
	b := make([]byte, 8, 8+len(hdr)+n)
	binary.LittleEndian.PutUint64(b, uint64(len(hdr)))
	b = append(b, hdr...)
	for i := 0; i < n; i++ {
		b = append(b, byte(i*31+len(name)))
	}
	return File(name, b)
}

// Dir is a directory entry.
func Dir(name string) Entry { return Entry{Name: name, Type: tar.TypeDir} }

// Symlink is a symlink entry.
func Symlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeSymlink, Linkname: target}
}

// Whiteout deletes path from lower layers.
func Whiteout(path string) Entry {
	dir, base := split(path)
	return Entry{Name: dir + ".wh." + base}
}

// Opaque hides lower layers' contents of dir.
func Opaque(dir string) Entry { return Entry{Name: dir + "/.wh..wh..opq"} }

func split(p string) (string, string) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i+1], p[i+1:]
		}
	}
	return "", p
}

// Tar serialises entries into an uncompressed tar.
func Tar(t testing.TB, entries []Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(1700000000, 0)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		size := int64(len(e.Body))
		if typ != tar.TypeReg {
			size = 0
		}
		h := &tar.Header{Name: e.Name, Typeflag: typ, Linkname: e.Linkname, Size: size, Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX}
		if typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if e.Mode != 0 {
			h.Mode = e.Mode
		}
		for k, v := range e.Xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write(e.Body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Layer builds a layer from entries with the given compression ("gzip",
// "zstd" or "none").
func Layer(t testing.TB, entries []Entry, comp string) v1.Layer {
	t.Helper()
	b := Tar(t, entries)
	opener := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	var l v1.Layer
	var err error
	switch comp {
	case "zstd":
		l, err = tarball.LayerFromOpener(opener, tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	case "none":
		return RawLayer(b, types.OCIUncompressedLayer)
	default:
		l, err = tarball.LayerFromOpener(opener, tarball.WithMediaType(types.OCILayer))
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Config describes the image config of a built image.
type Config struct {
	Env        []string
	Labels     map[string]string
	CreatedBy  []string
	Entrypoint []string
	Cmd        []string
	WorkingDir string
}

// Image stacks layers onto an empty linux/amd64 image.
func Image(t testing.TB, cfg Config, ls ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	var adds []mutate.Addendum
	for i, l := range ls {
		cb := fmt.Sprintf("layer %d", i)
		if i < len(cfg.CreatedBy) {
			cb = cfg.CreatedBy[i]
		}
		adds = append(adds, mutate.Addendum{Layer: l, History: v1.History{CreatedBy: cb}})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = cfg.Env
	cf.Config.Labels = cfg.Labels
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.WorkingDir = cfg.Entrypoint, cfg.Cmd, cfg.WorkingDir
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// WriteLayout writes img into an OCI layout at dir, tagged tag.
func WriteLayout(t testing.TB, dir, tag string, img v1.Image) {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		p, err = layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		t.Fatal(err)
	}
}

// WriteArchive writes img as a docker-save tarball tagged tag.
func WriteArchive(t testing.TB, file, tag string, img v1.Image) {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(file, ref, img); err != nil {
		t.Fatal(err)
	}
}

// Registry starts an in-process registry and returns its host:port.
func Registry(t testing.TB) string {
	t.Helper()
	s := RegistryServer(t)
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// RegistryServer starts an in-process registry, closed when the test ends
// or earlier by the test (to show that what follows needs no registry).
func RegistryServer(t testing.TB) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(s.Close)
	return s
}

// Push writes img to ref.
func Push(t testing.TB, ref string, img v1.Image) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
}

// rawLayer serves fixed blob bytes under a digest and diff ID that may lie.
type rawLayer struct {
	blob   []byte
	digest v1.Hash
	diffID v1.Hash
	mt     types.MediaType
}

// RawLayer is a layer whose blob is exactly b (any encoding), with honest
// digests: the diff ID equals the digest, so use it for uncompressed blobs
// or override with Lying.
func RawLayer(b []byte, mt types.MediaType) v1.Layer {
	h := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(b))}
	return &rawLayer{blob: b, digest: h, diffID: h, mt: mt}
}

// Lying is a layer whose descriptor names digest but whose bytes are b.
func Lying(b []byte, digest, diffID v1.Hash, mt types.MediaType) v1.Layer {
	return &rawLayer{blob: b, digest: digest, diffID: diffID, mt: mt}
}

// SizeLie is l under a descriptor that names size instead of l's own
// (F13: a descriptor that reuses another layer's digest with a false size).
func SizeLie(l v1.Layer, size int64) v1.Layer { return sizeLie{l, size} }

type sizeLie struct {
	v1.Layer
	size int64
}

func (l sizeLie) Size() (int64, error) { return l.size, nil }

func (l *rawLayer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *rawLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *rawLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.blob)), nil
}
func (l *rawLayer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.blob)), nil
}
func (l *rawLayer) Size() (int64, error)                { return int64(len(l.blob)), nil }
func (l *rawLayer) MediaType() (types.MediaType, error) { return l.mt, nil }

// ImageFor is Image for another linux architecture.
func ImageFor(t testing.TB, arch string, cfg Config, ls ...v1.Layer) v1.Image {
	t.Helper()
	img := Image(t, cfg, ls...)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = arch
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Index builds a multi-platform index of imgs (platforms from their configs).
func Index(t testing.TB, imgs ...v1.Image) v1.ImageIndex {
	t.Helper()
	var adds []mutate.IndexAddendum
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture}}})
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
}

// PushIndex writes an index to ref.
func PushIndex(t testing.TB, ref string, idx v1.ImageIndex) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
}

// WriteLayoutIndex writes a nested index into a layout, tagged tag.
func WriteLayoutIndex(t testing.TB, dir, tag string, idx v1.ImageIndex) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		t.Fatal(err)
	}
}

// OneFileTars returns n uncompressed layer tars, the i-th holding one file
// named fmt.Sprintf(format, i).
func OneFileTars(t testing.TB, n int, format string) [][]byte {
	t.Helper()
	tars := make([][]byte, n)
	for i := range tars {
		tars[i] = Tar(t, []Entry{File(fmt.Sprintf(format, i), []byte{byte(i)})})
	}
	return tars
}

// WriteTarLayout writes an OCI layout at dir holding one linux/amd64
// image tagged tag whose layers are the uncompressed tars given, by hand:
// ggcr's mutate and layout writers take seconds over thousands of layers.
func WriteTarLayout(t testing.TB, dir, tag string, tars [][]byte) {
	t.Helper()
	blob := func(b []byte) v1.Hash {
		h := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(b))}
		p := filepath.Join(dir, "blobs", "sha256", h.Hex)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return h
	}
	cfg := v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers"}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for _, b := range tars {
		h := blob(b)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, h)
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCIUncompressedLayer, Size: int64(len(b)), Digest: h})
	}
	cb, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(cb)), Digest: blob(cb)}
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIManifestSchema1, Size: int64(len(mb)), Digest: blob(mb),
		Annotations: map[string]string{"org.opencontainers.image.ref.name": tag}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

// LimitOpenFiles lowers this process's open-file limit to n for the rest
// of the test (skipping the test when it cannot).
func LimitOpenFiles(t testing.TB, n uint64) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	lim := old
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// PushIndexSizeLie pushes img by digest beside ref, then at ref an index
// whose one descriptor (for platform p) names img's digest rightly and its
// size lie bytes off: a hostile registry's index (issue 27 D12).
func PushIndexSizeLie(t testing.TB, ref string, img v1.Image, p v1.Platform, lie int64) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r.Context().Digest(d.String()), img); err != nil {
		t.Fatal(err)
	}
	raw, _ := img.RawManifest()
	mt, _ := img.MediaType()
	idx, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: mt, Digest: d, Size: int64(len(raw)) + lie, Platform: &p,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(r, rawIndex(idx)); err != nil {
		t.Fatal(err)
	}
}

// rawIndex is an index manifest pushed as its bytes.
type rawIndex []byte

func (r rawIndex) RawManifest() ([]byte, error)        { return r, nil }
func (r rawIndex) MediaType() (types.MediaType, error) { return types.OCIImageIndex, nil }

// DiffIDLie is img with its config's rootfs.diff_ids[i] set to id: a
// manifest whose layers are not the image its config describes (D12).
func DiffIDLie(t testing.TB, img v1.Image, i int, id v1.Hash) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[i] = id
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
