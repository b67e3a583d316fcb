package layers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/registry"
)

// CheckTarget checks that ref can be written: for a registry, that it answers
// and accepts kiln's credentials for a push to the repository (an upload is
// started and cancelled; nothing is stored); for an OCI layout, that its
// directory can be written; for a docker archive, its file's directory.
// flag names the option ref came from ("--to").
func CheckTarget(ctx context.Context, flag string, ref Ref, opts ...registry.Option) error {
	switch ref.Kind {
	case KindOCILayout:
		if err := preflight.Writable(ref.Path); err != nil {
			return fmt.Errorf("%s %s: %v", flag, ref.Raw, err)
		}
	case KindDockerArchive:
		if fi, err := os.Stat(ref.Path); err == nil && fi.IsDir() {
			return fmt.Errorf("%s %s: %s is a directory; a docker archive is a file", flag, ref.Raw, ref.Path)
		}
		if err := preflight.Writable(filepath.Dir(ref.Path)); err != nil {
			return fmt.Errorf("%s %s: %v", flag, ref.Raw, err)
		}
	case KindRegistry:
		if err := pushable(ctx, ref, opts); err != nil {
			return fmt.Errorf("%s %s: %w", flag, ref.Raw, err)
		}
	}
	return nil
}

// pushable starts a blob upload to ref's repository with push credentials
// and cancels it: the registry answers, the credentials are taken and the
// repository accepts pushes.
func pushable(ctx context.Context, ref Ref, opts []registry.Option) error {
	repo := ref.Name.Context()
	rt, err := registry.RegistryTransport(ctx, repo.Registry, []string{repo.Scope(transport.PushScope)}, opts...)
	if err != nil {
		return fmt.Errorf("cannot reach or log in to %s: %v", repo.RegistryStr(), err)
	}
	u := url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: "/v2/" + repo.RepositoryStr() + "/blobs/uploads/"}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach %s: %v", repo.RegistryStr(), err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusAccepted, http.StatusCreated:
		if loc := resp.Header.Get("Location"); loc != "" {
			if lu, err := u.Parse(loc); err == nil {
				if del, err := http.NewRequestWithContext(ctx, http.MethodDelete, lu.String(), nil); err == nil {
					if r, err := (&http.Client{Transport: rt}).Do(del); err == nil {
						r.Body.Close()
					}
				}
			}
		}
		return nil
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%s refused a push to %s (HTTP %d): run docker login %s with an account that may push there", repo.RegistryStr(), repo.RepositoryStr(), resp.StatusCode, repo.RegistryStr())
	default:
		return fmt.Errorf("%s does not accept a push to %s (HTTP %d)", repo.RegistryStr(), repo.RepositoryStr(), resp.StatusCode)
	}
}
