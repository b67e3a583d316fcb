package cmdutil

import (
	"strings"
	"testing"
)

// TestVariantDests: the zstd and EROFS twins of a destination, by kind.
func TestVariantDests(t *testing.T) {
	for _, tc := range []struct{ dest, zstd, erofs string }{
		{"127.0.0.1:5000/acme/app:1", "127.0.0.1:5000/acme/app:1-zstd", "127.0.0.1:5000/acme/app:1-erofs"},
		{"oci:/tmp/out:app", "oci:/tmp/out:app-zstd", "oci:/tmp/out:app-erofs"},
		{"oci:/tmp/out", "oci:/tmp/out", "oci:/tmp/out"},
	} {
		if got, err := ZstdDest(tc.dest, nil); err != nil || got != tc.zstd {
			t.Errorf("ZstdDest(%s) = %s, %v", tc.dest, got, err)
		}
		if got, err := ErofsDest(tc.dest, nil); err != nil || got != tc.erofs {
			t.Errorf("ErofsDest(%s) = %s, %v", tc.dest, got, err)
		}
	}
	digest := "127.0.0.1:5000/acme/app@sha256:" + strings.Repeat("a", 64)
	if _, err := ErofsDest(digest, nil); err == nil || !strings.Contains(err.Error(), "kiln convert --format erofs") {
		t.Errorf("ErofsDest of a digest: %v", err)
	}
	if _, err := ZstdDest(digest, nil); err == nil || !strings.Contains(err.Error(), "one --compression") {
		t.Errorf("ZstdDest of a digest: %v", err)
	}
}
