package layers

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

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
