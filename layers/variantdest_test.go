package layers_test

import (
	"strings"
	"testing"

	"github.com/kiln-build/kiln/layers"
)

// TestVariantDests: the zstd and EROFS twins of a destination, by kind.
func TestVariantDests(t *testing.T) {
	for _, tc := range []struct{ dest, zstd, erofs string }{
		{"127.0.0.1:5000/acme/app:1", "127.0.0.1:5000/acme/app:1-zstd", "127.0.0.1:5000/acme/app:1-erofs"},
		{"oci:/tmp/out:app", "oci:/tmp/out:app-zstd", "oci:/tmp/out:app-erofs"},
	} {
		if got, err := layers.ZstdDest(tc.dest, nil); err != nil || got != tc.zstd {
			t.Errorf("ZstdDest(%s) = %s, %v", tc.dest, got, err)
		}
		if got, err := layers.ErofsDest(tc.dest, nil); err != nil || got != tc.erofs {
			t.Errorf("ErofsDest(%s) = %s, %v", tc.dest, got, err)
		}
	}
	if _, err := layers.ErofsDest("oci:/tmp/out", nil); err == nil || !strings.Contains(err.Error(), "EROFS goes to TAG-erofs") {
		t.Errorf("ErofsDest of an untagged layout: %v", err)
	}
	digest := "127.0.0.1:5000/acme/app@sha256:" + strings.Repeat("a", 64)
	if _, err := layers.ErofsDest(digest, nil); err == nil || !strings.Contains(err.Error(), "kiln convert --format erofs") {
		t.Errorf("ErofsDest of a digest: %v", err)
	}
	if _, err := layers.ZstdDest(digest, nil); err == nil || !strings.Contains(err.Error(), "one --compression") {
		t.Errorf("ZstdDest of a digest: %v", err)
	}
}
