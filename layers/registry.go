package layers

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/registry"
)

// The registry client (auth, transport, retries, redaction, verified
// reads) is the package registry, below layers and layers/blob; layers
// adds the options that select what an image reference means here.

// WithPlatform selects the image of an index for platform p.
func WithPlatform(p v1.Platform) registry.Option {
	return func(o *registry.Options) { o.Platform = p }
}

// WithExactPlatform selects platform p, as WithPlatform does, and also
// refuses a single-platform image of another platform: a user who asked
// for linux/arm64 must not be shown an amd64-only image's contents as if
// they were arm64's (what --platform, when given, means).
func WithExactPlatform(p v1.Platform) registry.Option {
	return func(o *registry.Options) { o.Platform, o.ExactPlatform = p, true }
}
