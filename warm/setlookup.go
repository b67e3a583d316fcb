package warm

import (
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
)

// Blob returns the blob of s with digest d and its index in s.Blobs
// (nil, -1 when s has none).
func (s *Set) Blob(d digest.Digest) (*Blob, int) {
	for i, b := range s.Blobs {
		if b.Digest == d {
			return b, i
		}
	}
	return nil, -1
}

// ConfigFile is img's config, read from the set (resolution kept its
// verified bytes), with one diff ID per layer.
func (s *Set) ConfigFile(img Image) (*v1.ConfigFile, error) {
	b, _ := s.Blob(img.Config.Digest)
	if b == nil || b.Data == nil {
		return nil, fmt.Errorf("image %s: config %s not in the warm set", img.Name, img.Config.Digest)
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(b.Data, &cfg); err != nil {
		return nil, fmt.Errorf("image %s: config %s: %v", img.Name, img.Config.Digest, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(img.Layers) {
		return nil, fmt.Errorf("image %s: config %s has %d rootfs.diff_ids for %d layers", img.Name, img.Config.Digest, len(cfg.RootFS.DiffIDs), len(img.Layers))
	}
	return &cfg, nil
}
