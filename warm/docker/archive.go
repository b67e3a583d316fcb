package docker

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
	"github.com/opencontainers/go-digest"
)

// dockerManifest is one entry of a docker-archive's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// layerError is a staged layer that failed to stream into the archive.
type layerError struct {
	digest digest.Digest
	err    error
}

func (e *layerError) Error() string { return fmt.Sprintf("layer %s: %v", e.digest, e.err) }
func (e *layerError) Unwrap() error { return e.err }

// writeArchive writes the docker-archive: config, the layers to send from
// the stage (each verified against its digest again as it streams: the
// stage may hold an earlier run's file), manifest.json last.
func writeArchive(w io.Writer, s *warm.Set, img warm.Image, send []bool, st warm.Stage) error {
	tw := tar.NewWriter(w)
	cfgBlob, _ := s.Blob(img.Config.Digest)
	cfgName := img.Config.Digest.Encoded() + ".json"
	if err := writeTarFile(tw, cfgName, int64(len(cfgBlob.Data)), strings.NewReader(string(cfgBlob.Data))); err != nil {
		return err
	}
	dm := dockerManifest{Config: cfgName}
	if !strings.Contains(img.Name, "@") {
		dm.RepoTags = []string{img.Name}
	}
	for i, l := range img.Layers {
		ext := ".tar.gz"
		if warm.IsZstd(l.MediaType) {
			ext = ".tar.zst"
		}
		file := l.Digest.Encoded() + ext
		dm.Layers = append(dm.Layers, file)
		if !send[i] {
			continue
		}
		b, _ := s.Blob(l.Digest)
		if err := streamStaged(tw, file, b, st); err != nil {
			return &layerError{digest: l.Digest, err: err}
		}
	}
	mj, err := json.Marshal([]dockerManifest{dm})
	if err != nil {
		return err
	}
	if err := writeTarFile(tw, "manifest.json", int64(len(mj)), strings.NewReader(string(mj))); err != nil {
		return err
	}
	return tw.Close()
}

func writeTarFile(tw *tar.Writer, name string, size int64, r io.Reader) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	_, err := io.Copy(tw, r)
	return err
}

// streamStaged copies one staged layer into the archive, verified: a
// digest or size mismatch fails before the archive's manifest.json is
// written, so the engine loads nothing, and the staged blob is removed so
// the next try stages it again.
func streamStaged(tw *tar.Writer, file string, b *warm.Blob, st warm.Stage) error {
	f, err := st.Open(b.Descriptor)
	if err != nil {
		return fmt.Errorf("staged blob: %v", err)
	}
	defer f.Close()
	if err := tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: b.Size, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	h, err := v1.NewHash(b.Digest.String())
	if err != nil {
		return err
	}
	vr, err := registry.NewVerifyReader(f, h, b.Size)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(tw, vr, buf); err != nil {
		if registry.IsIntegrityError(err) {
			if rerr := st.Remove(b.Descriptor); rerr != nil {
				return fmt.Errorf("staged blob %s in %s: %v (and removing it: %v)", b.Digest, st, err, rerr)
			}
			return fmt.Errorf("staged blob %s in %s: %v (removed; it is staged again)", b.Digest, st, err)
		}
		return err
	}
	return nil
}
