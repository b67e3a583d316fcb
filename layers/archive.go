package layers

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/registry"
)

// archiveEntry locates one member of a docker-save tarball.
type archiveEntry struct {
	off, size int64
}

type archiveManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// openArchive indexes a 'docker save' tarball once (headers only: file
// contents are skipped by seeking) and serves each layer as a section of
// the file, so walking a layer can seek past contents too.
func openArchive(r Ref, o *registry.Options) (*Image, error) {
	f, err := os.Open(r.Path)
	if err != nil {
		return nil, fmt.Errorf("image %q: %v", r.Raw, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	entries := map[string]archiveEntry{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("image %q: not a readable docker archive: %v", r.Raw, err)
		}
		if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeLink {
			continue
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if hdr.Typeflag != tar.TypeReg {
			// docker save links identical layers; resolve to the target.
			tgt := hdr.Linkname
			if hdr.Typeflag == tar.TypeSymlink {
				tgt = path.Join(path.Dir(name), tgt)
			}
			if e, found := entries[path.Clean(tgt)]; found {
				entries[name] = e
			}
			continue
		}
		// archive/tar reads headers exactly, so the file offset now is
		// the start of this entry's data.
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, fmt.Errorf("image %q: %v", r.Raw, err)
		}
		entries[name] = archiveEntry{off: off, size: hdr.Size}
	}
	me, found := entries["manifest.json"]
	if !found {
		return nil, fmt.Errorf("image %q: %s is not a docker archive (no manifest.json)", r.Raw, r.Path)
	}
	if me.size > 16<<20 {
		return nil, fmt.Errorf("image %q: manifest.json is implausibly large (%d bytes)", r.Raw, me.size)
	}
	mb := make([]byte, me.size)
	if _, err := f.ReadAt(mb, me.off); err != nil {
		return nil, fmt.Errorf("image %q: reading manifest.json: %v", r.Raw, err)
	}
	var ms []archiveManifest
	if err := json.Unmarshal(mb, &ms); err != nil {
		return nil, fmt.Errorf("image %q: manifest.json: %v", r.Raw, err)
	}
	var pick *archiveManifest
	var tags []string
	for i := range ms {
		tags = append(tags, ms[i].RepoTags...)
		if r.Tag == "" {
			continue
		}
		for _, t := range ms[i].RepoTags {
			if t == r.Tag || strings.HasSuffix(t, ":"+r.Tag) {
				pick = &ms[i]
			}
		}
	}
	switch {
	case len(ms) == 0:
		return nil, fmt.Errorf("image %q: manifest.json lists no images", r.Raw)
	case r.Tag != "" && pick == nil:
		return nil, fmt.Errorf("image %q: no image tagged %q (tags: %s)", r.Raw, r.Tag, strings.Join(tags, ", "))
	case r.Tag == "" && len(ms) > 1:
		return nil, fmt.Errorf("image %q: the archive holds %d images; name one as docker-archive:%s:TAG (tags: %s)", r.Raw, len(ms), r.Path, strings.Join(tags, ", "))
	case pick == nil:
		pick = &ms[0]
	}
	ce, found := entries[path.Clean(pick.Config)]
	if !found {
		return nil, fmt.Errorf("image %q: manifest.json: Config %q is not in the archive", r.Raw, pick.Config)
	}
	if ce.size > 64<<20 {
		return nil, fmt.Errorf("image %q: config %q is implausibly large", r.Raw, pick.Config)
	}
	raw := make([]byte, ce.size)
	if _, err := f.ReadAt(raw, ce.off); err != nil {
		return nil, fmt.Errorf("image %q: reading config %q: %v", r.Raw, pick.Config, err)
	}
	cfg, err := parseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("image %q: config %q: %v", r.Raw, pick.Config, err)
	}
	cdg := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(raw))}
	// Configs are named by their digest in every docker save format; a
	// mismatch means the archive was edited.
	if base := strings.TrimSuffix(path.Base(pick.Config), ".json"); len(base) == 64 && base != cdg.Hex {
		return nil, fmt.Errorf("image %q: config %q: %v: content hashes to %s", r.Raw, pick.Config, registry.ErrDigestMismatch, cdg)
	}
	img := &Image{Ref: r, Digest: cdg, MediaType: types.DockerManifestSchema2, Config: cfg, RawConfig: raw, Names: pick.RepoTags}
	img.Platform = v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	img.closers = append(img.closers, f)
	for _, lp := range pick.Layers {
		e, found := entries[path.Clean(lp)]
		if !found {
			return nil, fmt.Errorf("image %q: manifest.json: layer %q is not in the archive", r.Raw, lp)
		}
		img.Layers = append(img.Layers, &Layer{MediaType: types.DockerUncompressedLayer, Size: e.size, file: f, off: e.off, verifyDiffID: true})
	}
	if err := checkLayersAgainstConfig(r, cfg, img.Layers); err != nil {
		return nil, err
	}
	for _, l := range img.Layers {
		head := make([]byte, 4)
		n, _ := f.ReadAt(head, l.off)
		switch DetectCompression(head[:n]) {
		case Gzip:
			l.MediaType = types.DockerLayer
		case Zstd:
			l.MediaType = types.OCILayerZStd
		default:
			// Stored uncompressed: the blob digest is the diff ID.
			l.Digest = l.DiffID
		}
	}
	ok = true
	return img, nil
}
