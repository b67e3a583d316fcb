package blob_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/layers/blob/blobtest"
)

// dirStore is a blob.Dir as the blobtest suite sees it.
type dirStore struct{ d blob.Dir }

func (s dirStore) Writer(ctx context.Context, dg v1.Hash, size int64) (blob.Writer, error) {
	return s.d.Writer(ctx, dg, size)
}

func (s dirStore) Read(ctx context.Context, dg v1.Hash, size int64) ([]byte, error) {
	ok, err := s.d.Has(ctx, dg, size)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("blob %s: not committed", dg)
	}
	return os.ReadFile(s.d.Path(dg))
}

// Every blob.Dir shape kiln uses passes the blob.Writer conformance suite:
// an OCI layout's (partials beside, verified stamps), weights' staging
// directory (partials in the same directory, a suffix, no directory sync).
func TestDirWriterConformance(t *testing.T) {
	for name, mk := range map[string]func(root string) blob.Dir{
		"layout": func(root string) blob.Dir {
			return blob.Dir{Root: filepath.Join(root, "blobs", "sha256"), Partial: filepath.Join(root, ".kiln-partial"), Stamps: true}
		},
		"staging": func(root string) blob.Dir {
			return blob.Dir{Root: root, Partial: root, Suffix: ".part", Staging: true}
		},
	} {
		t.Run(name, func(t *testing.T) {
			blobtest.Run(t, func(t *testing.T) blobtest.Store { return dirStore{mk(t.TempDir())} })
		})
	}
}
