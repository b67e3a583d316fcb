package weights

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// Media types of the volume manifest and of the artifact's parts. The
// artifact is shaped after the CNCF ModelPack model-spec so that ModelPack
// tooling (modctl, Dragonfly, the model CSI driver) can read it; the volume
// manifest rides along as one more blob of kiln's own media type.
const (
	MediaTypeManifest    = "application/vnd.kiln.weights.manifest.v1+json"
	ArtifactType         = "application/vnd.cncf.model.manifest.v1+json"
	MediaTypeModelConfig = "application/vnd.cncf.model.config.v1+json"
	MediaTypeWeightRaw   = "application/vnd.cncf.model.weight.v1.raw"
	MediaTypeWeightTar   = "application/vnd.cncf.model.weight.v1.tar"

	// ModelPack annotations on layers.
	AnnotationFilepath     = "org.cncf.model.filepath"
	AnnotationFileMetadata = "org.cncf.model.file.metadata+json"

	// kiln annotations on the artifact manifest.
	AnnotationSetDigest = "dev.kiln.weights.set-digest"
	AnnotationMount     = "dev.kiln.weights.mount"
	AnnotationSource    = "dev.kiln.weights.source-image"
)

// SchemaVersion is the volume manifest schema this package writes and reads.
const SchemaVersion = 1

// A volume directory DIR holds the model files in DIR/model (ModelDir),
// the directory the application mounts, and kiln's bookkeeping beside it
// at DIR's top level, where the application does not see it. These are
// the names kiln owns at that top level; IsBookkeeping tells them apart.
// This is the one place that names them.
const (
	// ModelDir is the directory of a volume that holds the model files:
	// what the application mounts (run-args' snippets mount DIR/model).
	ModelDir = "model"
	// LayoutMarker (holding ModelDir) says the volume keeps its files in
	// ModelDir. A volume without it but with kiln's bookkeeping is in the
	// old layout (model files at DIR's top level, beside the bookkeeping),
	// which the next pull migrates.
	LayoutMarker = ".kiln-layout"
	ReadyMarker  = ".kiln-ready"
	PartialDir   = ".kiln-partial"
	// LockFile is flocked by a pull for its whole run: a second pull into
	// the same directory waits for the first, then finds the volume ready.
	LockFile = ".kiln-lock"
	// ManifestFile is where Pull keeps the volume manifest inside the
	// volume, so that Verify can name a bad file offline.
	ManifestFile = ".kiln-manifest.json"
	// MigrateDir gathers an old-layout volume's files while a pull moves
	// them into ModelDir (renamed to ModelDir once they are all in).
	MigrateDir = ".kiln-migrate"
)

// IsBookkeeping reports whether name, a volume directory's top-level
// entry, is one of kiln's own (not a model file, nor ModelDir).
func IsBookkeeping(name string) bool {
	switch name {
	case ReadyMarker, PartialDir, LockFile, ManifestFile, LayoutMarker, MigrateDir:
		return true
	}
	return false
}

// Manifest is a volume manifest: what a weights volume holds and where each
// file comes from. Its JSON form is documented in docs/weights.md.
type Manifest struct {
	SchemaVersion int    `json:"schemaVersion"`
	MediaType     string `json:"mediaType"`
	// Mount is the absolute path where the image expects the volume.
	Mount string `json:"mount"`
	// SourceImage is the digest of the image the weights were taken from.
	SourceImage string `json:"sourceImage,omitempty"`
	// Repository is where the artifact's blobs can be fetched: a registry
	// repository (REGISTRY/REPO) or an OCI layout (oci:DIR).
	Repository string `json:"repository,omitempty"`
	// SetDigest is sha256 over the files' sha256sum lines; see SetDigest.
	SetDigest string `json:"setDigest"`
	// Size is the sum of the files' sizes.
	Size   int64   `json:"size"`
	Files  []File  `json:"files"`
	Layers []Layer `json:"layers"`
}

// File is one file of a volume. Collector.Files reports paths inside the
// source image (absolute); in a Manifest, Path is relative to Mount.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Mode holds permission bits only (e.g. 0644 → 420 in JSON).
	Mode uint32 `json:"mode"`
	// Layer is the digest of the artifact layer carrying the file.
	Layer string `json:"layer,omitempty"`
}

// Layer is one blob of the artifact.
type Layer struct {
	Digest    string `json:"digest"`
	MediaType string `json:"mediaType"`
	Size      int64  `json:"size"`
}

// SetDigest is the packing-independent digest of a file set:
//
//	sha256( for each file, sorted by path in byte order: "<sha256 hex>  <path>\n" )
//
// which is exactly what `cd DIR/model && find . -type f -printf '%P\n' |
// LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum` prints (the model
// directory holds the files alone, kiln's bookkeeping is beside it).
// Paths with a backslash or newline are refused by Validate, so sha256sum
// never escapes a line.
func SetDigest(files []File) string {
	fs := append([]File(nil), files...)
	sort.Slice(fs, func(i, j int) bool { return fs[i].Path < fs[j].Path })
	h := sha256.New()
	for _, f := range fs {
		fmt.Fprintf(h, "%s  %s\n", f.SHA256, f.Path)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// ReadManifest reads and validates a volume manifest from a file.
func ReadManifest(file string) (*Manifest, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := DecodeManifest(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", file, err)
	}
	return m, nil
}

// maxManifestBytes bounds what a manifest may weigh: a million files is far
// past any model, and a hostile server must not make us buffer gigabytes.
const maxManifestBytes = 256 << 20

// DecodeManifest parses and validates a volume manifest.
func DecodeManifest(r io.Reader) (*Manifest, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxManifestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a volume manifest: %v", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Encode writes m as indented JSON (the form stored in the artifact).
func (m *Manifest) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Validate refuses anything a puller must not act on: unknown versions,
// paths that are absolute, climb with "..", are not clean, collide, or that
// kiln reserves; sizes and digests that disagree with the layer that carries
// them; and a set digest that does not match the files.
func (m *Manifest) Validate() error {
	if m.SchemaVersion != SchemaVersion {
		return fmt.Errorf("schemaVersion %d: this kiln reads version %d", m.SchemaVersion, SchemaVersion)
	}
	if m.MediaType != MediaTypeManifest {
		return fmt.Errorf("mediaType %q: want %s", m.MediaType, MediaTypeManifest)
	}
	if !path.IsAbs(m.Mount) || path.Clean(m.Mount) != m.Mount || m.Mount == "/" {
		return fmt.Errorf("mount %q: want a clean absolute path below /", m.Mount)
	}
	layers := map[string]Layer{}
	for i, l := range m.Layers {
		if !isDigest(l.Digest) {
			return fmt.Errorf("layers[%d].digest %q: not a sha256 digest", i, l.Digest)
		}
		if l.MediaType != MediaTypeWeightRaw && l.MediaType != MediaTypeWeightTar {
			return fmt.Errorf("layers[%d].mediaType %q: want %s or %s", i, l.MediaType, MediaTypeWeightRaw, MediaTypeWeightTar)
		}
		if l.Size < 0 {
			return fmt.Errorf("layers[%d].size %d: negative", i, l.Size)
		}
		if _, dup := layers[l.Digest]; dup {
			return fmt.Errorf("layers[%d].digest %s: listed twice", i, l.Digest)
		}
		layers[l.Digest] = l
	}
	seen := map[string]bool{}
	var total int64
	for i, f := range m.Files {
		if err := CheckPath(f.Path); err != nil {
			return fmt.Errorf("files[%d].path: %v", i, err)
		}
		if seen[f.Path] {
			return fmt.Errorf("files[%d].path %q: listed twice", i, f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 {
			return fmt.Errorf("files[%d].size %d (%s): negative", i, f.Size, f.Path)
		}
		if !isHex64(f.SHA256) {
			return fmt.Errorf("files[%d].sha256 %q (%s): want 64 lowercase hex digits", i, f.SHA256, f.Path)
		}
		if f.Mode&^0o777 != 0 {
			return fmt.Errorf("files[%d].mode %#o (%s): only permission bits (0777) are allowed", i, f.Mode, f.Path)
		}
		l, ok := layers[f.Layer]
		if !ok {
			return fmt.Errorf("files[%d].layer %q (%s): not one of the manifest's layers", i, f.Layer, f.Path)
		}
		if l.MediaType == MediaTypeWeightRaw {
			// A raw layer is the file itself: its digest and size are the
			// file's, or someone is lying about one of them.
			if l.Digest != "sha256:"+f.SHA256 {
				return fmt.Errorf("files[%d] (%s): sha256 %s but its raw layer is %s", i, f.Path, f.SHA256, l.Digest)
			}
			if l.Size != f.Size {
				return fmt.Errorf("files[%d].size %d (%s): its raw layer %s has %d bytes", i, f.Size, f.Path, l.Digest, l.Size)
			}
		}
		total += f.Size
	}
	// A file may not also be a directory of another file ("a" and "a/b").
	for p := range seen {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if seen[d] {
				return fmt.Errorf("files: %q is a file but %q needs it to be a directory", d, p)
			}
		}
	}
	if total != m.Size {
		return fmt.Errorf("size %d: the files add up to %d", m.Size, total)
	}
	if got := SetDigest(m.Files); got != m.SetDigest {
		return fmt.Errorf("setDigest %q: the files hash to %s", m.SetDigest, got)
	}
	return nil
}

// CheckPath accepts a clean relative path that stays inside its root and
// does not touch kiln's own names in the volume.
func CheckPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q: absolute path", p)
	case strings.ContainsAny(p, "\\\n\r\x00"):
		return fmt.Errorf("%q: backslash, newline or NUL in path", p)
	}
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "..":
			return fmt.Errorf("%q: climbs out of the volume with \"..\"", p)
		case "", ".":
			return fmt.Errorf("%q: not a clean path", p)
		}
	}
	first, _, _ := strings.Cut(p, "/")
	if IsBookkeeping(first) {
		return fmt.Errorf("%q: reserved for kiln's own bookkeeping", p)
	}
	return nil
}

func isDigest(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	return ok && isHex64(h)
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
