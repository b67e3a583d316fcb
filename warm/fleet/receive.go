package fleet

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/layers"
)

var blobName = regexp.MustCompile(`^blobs/sha256/[0-9a-f]{64}$`)

// ReceiveLayout reads a staging tar (as a push-mode sender writes it) into
// dir, which must exist. Only oci-layout, index.json and
// blobs/sha256/<hex> are accepted; each blob is verified against its name
// before it is renamed into place, and index.json is written last, so a
// cut-off stream leaves no layout that names missing or partial blobs.
func ReceiveLayout(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return err
	}
	var index []byte
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("staging stream: %v", err)
		}
		if hdr.Typeflag != tar.TypeReg {
			return fmt.Errorf("staging stream: %q: only regular files are accepted", hdr.Name)
		}
		switch {
		case hdr.Name == "oci-layout" || hdr.Name == "index.json":
			if hdr.Size > 4<<20 {
				return fmt.Errorf("staging stream: %s: %d bytes is too large", hdr.Name, hdr.Size)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return fmt.Errorf("staging stream: %s: %v", hdr.Name, err)
			}
			if hdr.Name == "index.json" {
				index = b
				continue
			}
			if err := writeAtomic(filepath.Join(dir, hdr.Name), func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
				return err
			}
		case blobName.MatchString(hdr.Name):
			h, _ := v1.NewHash("sha256:" + filepath.Base(hdr.Name))
			vr, err := layers.NewVerifyReader(tr, h, hdr.Size)
			if err != nil {
				return err
			}
			if err := writeAtomic(filepath.Join(dir, hdr.Name), func(w io.Writer) error {
				if _, err := io.Copy(w, vr); err != nil {
					return err
				}
				return vr.Drain()
			}); err != nil {
				return fmt.Errorf("staging stream: %s: %w", hdr.Name, err)
			}
		default:
			return fmt.Errorf("staging stream: %q is not part of an OCI layout (oci-layout, index.json, blobs/sha256/HEX)", hdr.Name)
		}
	}
	if index == nil {
		return errors.New("staging stream: ended without index.json (cut off?)")
	}
	return writeAtomic(filepath.Join(dir, "index.json"), func(w io.Writer) error { _, err := w.Write(index); return err })
}

// writeAtomic writes path through a temporary file in the same directory
// and renames it into place only when fill succeeded.
func writeAtomic(path string, fill func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
