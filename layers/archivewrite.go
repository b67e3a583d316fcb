package layers

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/kiln-build/kiln/registry"
)

// writeDockerArchive writes img as the tarball `docker load` reads:
// manifest.json, the config, and every layer as an uncompressed tar under
// blobs/sha256/<diff ID> (the names Docker 25's docker save uses). The
// layers are uncompressed whatever the image's blobs are: every Docker
// loads a plain tar, while Docker before 23.0 refuses zstd ("archive/tar:
// invalid tar header") and a docker archive exists to be loaded. Each
// layer streams from img, is checked against the config's diff ID and
// size as it is written (a mismatch fails the write, naming the layer),
// and identical layers are stored once. Entry headers carry no time, so
// the archive's bytes depend only on img.
func writeDockerArchive(w io.Writer, tag name.Tag, img v1.Image) error {
	cfgName, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("config: %v", err)
	}
	cfgBlob, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("config: %v", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("config: %v", err)
	}
	ls, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %v", err)
	}
	if len(ls) != len(cfg.RootFS.DiffIDs) {
		return fmt.Errorf("config: rootfs.diff_ids has %d entries for %d layers", len(cfg.RootFS.DiffIDs), len(ls))
	}
	tw := tar.NewWriter(w)
	entry := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return err
		}
		n, err := io.Copy(tw, r)
		if err == nil && n != size {
			err = fmt.Errorf("%d of %d bytes", n, size)
		}
		return err
	}
	cfgFile := "blobs/sha256/" + cfgName.Hex
	if err := entry(cfgFile, int64(len(cfgBlob)), bytes.NewReader(cfgBlob)); err != nil {
		return fmt.Errorf("config: %v", err)
	}
	files := make([]string, len(ls))
	seen := map[v1.Hash]bool{}
	for i, l := range ls {
		diffID := cfg.RootFS.DiffIDs[i]
		files[i] = "blobs/sha256/" + diffID.Hex
		if seen[diffID] {
			continue
		}
		seen[diffID] = true
		if err := writeArchiveLayer(entry, files[i], l, diffID); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, diffID, err)
		}
	}
	man, err := json.Marshal([]archiveManifest{{Config: cfgFile, RepoTags: []string{tag.String()}, Layers: files}})
	if err != nil {
		return err
	}
	if err := entry("manifest.json", int64(len(man)), bytes.NewReader(man)); err != nil {
		return fmt.Errorf("manifest.json: %v", err)
	}
	return tw.Close()
}

func writeArchiveLayer(entry func(string, int64, io.Reader) error, file string, l v1.Layer, diffID v1.Hash) error {
	// The tar header needs the size first: layers that know it say so
	// (kiln's own blobs do), others are decoded once to count.
	size, err := partial.UncompressedSize(l)
	if err != nil {
		return fmt.Errorf("uncompressed size: %v", err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	vr, err := registry.NewVerifyReader(rc, diffID, size)
	if err != nil {
		return err
	}
	if err := entry(file, size, vr); err != nil {
		return err
	}
	// The tar entry is full; reading on to EOF checks the digest.
	return vr.Drain()
}
