package layers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/registry"
)

// Docker daemon images (docker-daemon:NAME, dive's default source) are read
// through the daemon's image-save API, what `docker save` does: the stream
// goes to a temporary file (never memory), which is then opened as the
// docker archive it is, so its layers are verified against the config's
// diff IDs and seeked like any archive's. The file is removed when the
// image is closed. The daemon is found as the docker CLI finds it
// (DOCKER_HOST, DOCKER_CERT_PATH, DOCKER_TLS_VERIFY, DOCKER_API_VERSION).

// SaveFromDaemon streams the image r names (a KindDaemon reference) out of
// the local Docker daemon into a new temporary docker archive and returns
// its path; the caller removes it.
func SaveFromDaemon(ctx context.Context, r Ref) (string, error) {
	if r.Kind != KindDaemon {
		return "", fmt.Errorf("image %q: not a docker-daemon: reference", r.Raw)
	}
	c, err := client.New(client.FromEnv)
	if err != nil {
		return "", fmt.Errorf("image %q: the Docker daemon's address: %v (set DOCKER_HOST, e.g. unix:///var/run/docker.sock)", r.Raw, err)
	}
	defer c.Close()
	// The saved archive holds the image's layers uncompressed: about the
	// size the daemon reports. The disk must hold it (with room for its
	// tar headers), and a stream past it is not this image's.
	limit, size := int64(-1), int64(0)
	if ii, err := c.ImageInspect(ctx, r.Tag); err == nil && ii.Size > 0 {
		size, limit = ii.Size, ii.Size+ii.Size/4+64<<20
		if err := preflight.Disk(os.TempDir(), ii.Size+ii.Size/10, "the archive of "+r.Tag+" the Docker daemon saves"); err != nil {
			return "", fmt.Errorf("image %q: %w (set TMPDIR to a larger disk)", r.Raw, err)
		}
	}
	rc, err := c.ImageSave(ctx, []string{r.Tag})
	if err != nil {
		return "", daemonError(r, c.DaemonHost(), err)
	}
	defer rc.Close()
	f, err := os.CreateTemp("", "kiln-docker-daemon-*.tar")
	if err != nil {
		return "", fmt.Errorf("image %q: %v", r.Raw, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	var in io.Reader = ContextReader(ctx, rc, nil)
	if limit > 0 {
		in = io.LimitReader(in, limit+1)
	}
	n, err := io.Copy(f, in)
	if err != nil {
		return "", daemonError(r, c.DaemonHost(), err)
	}
	if limit > 0 && n > limit {
		return "", fmt.Errorf("image %q: the Docker daemon at %s sent more than %d bytes for an image it says is %d: refusing the stream", r.Raw, c.DaemonHost(), limit, size)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("image %q: %v", r.Raw, err)
	}
	ok = true
	return f.Name(), nil
}

func daemonError(r Ref, host string, err error) error {
	switch {
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("image %q: the Docker daemon at %s has no image %s (docker images lists what it has; docker pull or docker build it first)", r.Raw, host, r.Tag)
	case errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "permission denied"):
		return fmt.Errorf("image %q: no permission to use the Docker daemon at %s (run as a member of the docker group, or set DOCKER_HOST to a daemon you may use)", r.Raw, host)
	case client.IsErrConnectionFailed(err):
		return fmt.Errorf("image %q: cannot reach the Docker daemon at %s (start it, or set DOCKER_HOST; docker-archive:FILE reads a docker save tarball instead)", r.Raw, host)
	}
	return fmt.Errorf("image %q: Docker daemon at %s: %v", r.Raw, host, registry.RedactError(err))
}

// openDaemon opens a docker-daemon: image as the archive the daemon saves.
func openDaemon(ctx context.Context, r Ref, o *registry.Options) (*Image, error) {
	p, err := SaveFromDaemon(ctx, r)
	if err != nil {
		return nil, err
	}
	// The saved archive holds this one image: select none by name (the
	// daemon writes RepoTags in its short form, ubuntu:24.04).
	img, err := openArchive(Ref{Kind: KindDockerArchive, Raw: r.Raw, Path: p}, o)
	if err != nil {
		os.Remove(p)
		return nil, err
	}
	img.Ref = r
	img.closers = append(img.closers, removeFile(p))
	return img, nil
}

// removeFile is an io.Closer that removes a temporary file.
type removeFile string

func (p removeFile) Close() error { return os.Remove(string(p)) }
