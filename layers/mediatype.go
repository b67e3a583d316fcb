package layers

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ErofsMediaType is a native EROFS layer's, as containerd names it
// (core/images.MediaTypeErofsLayer): the blob is a filesystem image, not
// a tar (layers/erofs writes them). "+zstd" may follow.
const ErofsMediaType = "application/vnd.erofs.layer.v1"

// IsErofs says whether mt is a native EROFS layer's (plain or +zstd).
func IsErofs(mt types.MediaType) bool {
	return strings.HasPrefix(string(mt), string(ErofsMediaType))
}

// ErrNotTar marks a layer whose media type says it holds no tar: read as
// one, a native EROFS layer (its first KiB is zeros, a tar's end marker)
// looks empty.
var ErrNotTar = errors.New("not a tar layer")

// CheckTar says, by its media type alone, whether a layer holds a tar:
// an error wrapping ErrNotTar names the type when it does not. A layer
// with no media type (a Docker archive's) is read as a tar.
func CheckTar(mt types.MediaType) error {
	switch {
	case mt == "" || isTarLayer(mt):
		return nil
	case IsErofs(mt):
		return fmt.Errorf("is an EROFS layer (%s), a filesystem image: %w", mt, ErrNotTar)
	default:
		return fmt.Errorf("has media type %s: %w", mt, ErrNotTar)
	}
}

// CheckCompression refuses a tar layer whose bytes (c, from their magic)
// are not in the compression its media type declares: kiln reads a layer
// as its descriptor says it is, or not at all.
func CheckCompression(mt types.MediaType, c Compression) error {
	want, ok := declaredCompression(mt)
	if !ok || want == c || want == Gzip && c == EStargz {
		return nil
	}
	return fmt.Errorf("its bytes are %s, but its media type %s says %s: refusing a layer that is not what its descriptor declares (push it again with its true media type)", c.words(), mt, want.words())
}

// isTarLayer says whether mt is an OCI or Docker tar layer's, however
// compressed and distributable.
func isTarLayer(mt types.MediaType) bool {
	s := string(mt)
	return mt.IsLayer() || strings.HasPrefix(s, "application/vnd.oci.image.layer.") ||
		strings.HasPrefix(s, "application/vnd.docker.image.rootfs.")
}

// declaredCompression is the compression a tar layer's media type names.
func declaredCompression(mt types.MediaType) (Compression, bool) {
	s := string(mt)
	switch {
	case !isTarLayer(mt):
		return "", false
	case strings.HasSuffix(s, "+gzip") || strings.HasSuffix(s, ".tar.gzip"):
		return Gzip, true
	case strings.HasSuffix(s, "+zstd"):
		return Zstd, true
	default:
		return Uncompressed, true
	}
}

func (c Compression) words() string {
	if c == Uncompressed {
		return "uncompressed"
	}
	return string(c)
}

// CheckTarLayers refuses an image with a layer that holds no tar (by its
// media type, CheckTar), before any of it is read, in words naming the
// layer and, for an EROFS layer, the image to use instead. verb is the
// command ("slim", "analyze").
func (img *Image) CheckTarLayers(verb string) error {
	for _, l := range img.Layers {
		err := CheckTar(l.MediaType)
		switch {
		case err == nil:
		case IsErofs(l.MediaType):
			return fmt.Errorf("layer %d (%s) %w: kiln %s does not support EROFS layers; %s the image it was converted from (TAG, not TAG%s)", l.Index, l.name(), err, verb, verb, ErofsTagSuffix)
		default:
			return fmt.Errorf("layer %d (%s) %w: kiln %s reads only tar layers", l.Index, l.name(), err, verb)
		}
	}
	return nil
}
