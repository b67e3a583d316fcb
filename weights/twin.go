package weights

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/layers"
)

// The image-shaped twin of a weights volume, for runtimes that mount only
// images (Kubernetes image volumes on containerd 2.1+, `volumes[].image`,
// cannot mount a ModelPack artifact):
//   - laid out as a pulled volume is: the files in model/ (ModelDir), the
//     bookkeeping at the top level, so that the application mounts model/
//     (an image volume's subPath) and sees the model files alone;
//   - one layer per file: an uncompressed tar holding exactly that file at
//     model/ and its path below the mount, uid/gid 0, mtime 0, its own
//     mode, no directories, no whiteouts; so a layer's digest is fixed by
//     the path, mode and bytes of one file (the same weights in another
//     model or version are the same layer, and layers apply in any order);
//   - a last layer with the layout marker (.kiln-layout), the volume
//     manifest (.kiln-manifest.json) and the ready marker (.kiln-ready: the
//     set digest), so the whole image, mounted, verifies with `kiln weights
//     verify` like a pulled volume;
//   - the config names the artifact it twins (LabelWeightsTwinOf) and the
//     set digest; created at the epoch. Same volume, same digest.
// Layers stream from the collector's blobs; nothing is copied to disk.

// LabelTwinOf is the twin image's label naming its weights artifact by
// digest.
const LabelTwinOf = "dev.kiln.weights.twin-of"

// LabelTwin is the stripped image's label naming the twin image by digest
// (kiln weights run-args prints its image-volume form).
const LabelTwin = "dev.kiln.weights.image"

// Twin builds the image-shaped twin of m (as Publish wrote it from this
// collector) for platform; artifact names the artifact by digest.
func (c *Collector) Twin(m *Manifest, artifact string, platform v1.Platform) (v1.Image, error) {
	files := append([]File(nil), m.Files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	var ls []v1.Layer
	for _, f := range files {
		l, err := newFileLayer(ModelDir+"/"+f.Path, f, c.blobPath(f.SHA256))
		if err != nil {
			return nil, fmt.Errorf("weights twin: %s: %v", f.Path, err)
		}
		ls = append(ls, l)
	}
	mb, err := m.Encode()
	if err != nil {
		return nil, err
	}
	ml, err := newMemLayer([]memFile{{LayoutMarker, []byte(ModelDir + "\n")}, {ManifestFile, mb}, {ReadyMarker, []byte(m.SetDigest + "\n")}})
	if err != nil {
		return nil, err
	}
	ls = append(ls, ml)
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), ls...)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Labels = map[string]string{LabelTwinOf: artifact, layers.LabelWeightsSetDigest: m.SetDigest, layers.LabelWeightsMount: m.Mount}
	cf.History = nil
	return mutate.ConfigFile(img, cf)
}

// fileLayer is an uncompressed tar of one file, streamed from its blob:
// header, content, padding, end of archive.
type fileLayer struct {
	hdr  []byte
	blob string
	size int64
	pad  int
	dg   v1.Hash
	n    int64
}

var _ v1.Layer = (*fileLayer)(nil)

// tarHeader is the header block(s) of a file entry, as archive/tar writes
// them (PAX, so any path length works).
func tarHeader(name string, size int64, mode uint32) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: int64(mode), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	return append([]byte(nil), buf.Bytes()...), nil
}

// newFileLayer is the layer of f at name (its path in the twin).
func newFileLayer(name string, f File, blob string) (*fileLayer, error) {
	hdr, err := tarHeader(name, f.Size, f.Mode)
	if err != nil {
		return nil, err
	}
	l := &fileLayer{hdr: hdr, blob: blob, size: f.Size, pad: int((512 - f.Size%512) % 512)}
	l.n = int64(len(hdr)) + f.Size + int64(l.pad) + 1024
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return nil, err
	}
	l.dg = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	return l, nil
}

func (l *fileLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.blob)
	if err != nil {
		return nil, err
	}
	// The blob must be exactly the file (the collector stored it under
	// its sha256): a shorter one would shift the archive, and no more
	// than size bytes are read.
	body := io.LimitReader(f, l.size)
	r := io.MultiReader(bytes.NewReader(l.hdr), &exactly{r: body, n: l.size}, bytes.NewReader(make([]byte, l.pad+1024)))
	return struct {
		io.Reader
		io.Closer
	}{r, f}, nil
}

// exactly fails when r ends before n bytes.
type exactly struct {
	r io.Reader
	n int64
}

func (e *exactly) Read(p []byte) (int, error) {
	k, err := e.r.Read(p)
	e.n -= int64(k)
	if err == io.EOF && e.n > 0 {
		return k, fmt.Errorf("blob ended %d bytes early", e.n)
	}
	return k, err
}

func (l *fileLayer) Uncompressed() (io.ReadCloser, error) { return l.Compressed() }
func (l *fileLayer) Digest() (v1.Hash, error)             { return l.dg, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)             { return l.dg, nil }
func (l *fileLayer) Size() (int64, error)                 { return l.n, nil }
func (l *fileLayer) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }

type memFile struct {
	name string
	data []byte
}

// newMemLayer is an uncompressed tar of small files (the layout marker,
// the manifest and the ready marker), in the given order.
func newMemLayer(files []memFile) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Size: int64(len(f.data)), Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	s := sha256.Sum256(b)
	return &bytesLayer{b: b, dg: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}}, nil
}

type bytesLayer struct {
	b  []byte
	dg v1.Hash
}

func (l *bytesLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.b)), nil
}
func (l *bytesLayer) Uncompressed() (io.ReadCloser, error) { return l.Compressed() }
func (l *bytesLayer) Digest() (v1.Hash, error)             { return l.dg, nil }
func (l *bytesLayer) DiffID() (v1.Hash, error)             { return l.dg, nil }
func (l *bytesLayer) Size() (int64, error)                 { return int64(len(l.b)), nil }
func (l *bytesLayer) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }
