package layers

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func checkBlobDigest(b []byte, want v1.Hash) error {
	if want.Algorithm != "sha256" {
		return fmt.Errorf("unsupported digest algorithm %q", want.Algorithm)
	}
	got := fmt.Sprintf("%x", sha256.Sum256(b))
	if got != want.Hex {
		return fmt.Errorf("%w: %s hashes to sha256:%s", ErrDigestMismatch, want, got)
	}
	return nil
}

// parseConfig decodes an image config strictly enough to catch garbage
// (ggcr's parser accepts any JSON object).
func parseConfig(raw []byte) (*v1.ConfigFile, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("parsing JSON: %v", err)
	}
	if cfg.RootFS.Type != "" && cfg.RootFS.Type != "layers" {
		return nil, fmt.Errorf("rootfs.type %q: want \"layers\"", cfg.RootFS.Type)
	}
	return &cfg, nil
}
