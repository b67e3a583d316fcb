// Package preflight checks, before a command does its heavy work, what it
// will need at the end of it: a destination it can write (a registry that
// answers and takes a push, a directory it can create files in), a
// BuildKit daemon, free disk for its scratch files. A mistake found here
// costs a second; found after a rewrite of a CUDA image, it costs minutes.
//
// kiln build, slim, warm and weights use these; each error names what was
// checked and what to do.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sys/unix"

	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/layers"
)

// ErrNoSpace is wrapped by Disk's error when the file system is too full.
var ErrNoSpace = errors.New("not enough disk space")

// Free is the space an unprivileged writer can use on dir's file system.
func Free(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// Disk checks that dir's file system (or, when dir does not exist yet, the
// file system of its nearest existing parent) has need bytes free; what
// says what they are for.
func Disk(dir string, need int64, what string) error {
	d := existingParent(dir)
	free, err := Free(d)
	if err != nil {
		return fmt.Errorf("%s: %v", dir, err)
	}
	if free < need {
		return fmt.Errorf("%w in %s: %s needs about %s, %s free; free some space or point it elsewhere", ErrNoSpace, dir, what, bytesize.Format(need), bytesize.Format(free))
	}
	return nil
}

// existingParent is dir, or its nearest ancestor that exists.
func existingParent(dir string) string {
	d, err := filepath.Abs(dir)
	if err != nil {
		d = dir
	}
	for {
		if _, err := os.Stat(d); err == nil {
			return d
		}
		p := filepath.Dir(d)
		if p == d {
			return d
		}
		d = p
	}
}

// Writable checks that a file can be created in dir, or, when dir does not
// exist yet, in its nearest existing parent (where dir would be made).
// Nothing is left behind.
func Writable(dir string) error {
	d := existingParent(dir)
	if fi, err := os.Stat(d); err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("%s is a file, not a directory", d)
	}
	f, err := os.CreateTemp(d, ".kiln-preflight-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %v", d, errors.Unwrap(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// Target checks that ref can be written: for a registry, that it answers
// and accepts kiln's credentials for a push to the repository (an upload is
// started and cancelled; nothing is stored); for an OCI layout, that its
// directory can be written; for a docker archive, its file's directory.
// flag names the option ref came from ("--to").
func Target(ctx context.Context, flag string, ref layers.Ref, opts ...layers.Option) error {
	switch ref.Kind {
	case layers.KindOCILayout:
		if err := Writable(ref.Path); err != nil {
			return fmt.Errorf("%s %s: %v", flag, ref.Raw, err)
		}
	case layers.KindDockerArchive:
		if fi, err := os.Stat(ref.Path); err == nil && fi.IsDir() {
			return fmt.Errorf("%s %s: %s is a directory; a docker archive is a file", flag, ref.Raw, ref.Path)
		}
		if err := Writable(filepath.Dir(ref.Path)); err != nil {
			return fmt.Errorf("%s %s: %v", flag, ref.Raw, err)
		}
	case layers.KindRegistry:
		if err := pushable(ctx, ref, opts); err != nil {
			return fmt.Errorf("%s %s: %w", flag, ref.Raw, err)
		}
	}
	return nil
}

// pushable starts a blob upload to ref's repository with push credentials
// and cancels it: the registry answers, the credentials are taken and the
// repository accepts pushes.
func pushable(ctx context.Context, ref layers.Ref, opts []layers.Option) error {
	repo := ref.Name.Context()
	rt, err := layers.RegistryTransport(ctx, repo.Registry, []string{repo.Scope(transport.PushScope)}, opts...)
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
