package layers_test

import (
	"strings"
	"testing"

	"github.com/kiln-build/kiln/layers"
)

func ref(t *testing.T, s string) layers.Ref {
	t.Helper()
	r, err := layers.ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestVariantDests: the zstd and EROFS twins of a destination, by kind,
// derived from the parsed reference (no string is parsed again): each is
// the reference its own string parses to.
func TestVariantDests(t *testing.T) {
	for _, tc := range []struct{ dest, zstd, erofs string }{
		{"127.0.0.1:5000/acme/app:1", "127.0.0.1:5000/acme/app:1-zstd", "127.0.0.1:5000/acme/app:1-erofs"},
		{"oci:/tmp/out:app", "oci:/tmp/out:app-zstd", "oci:/tmp/out:app-erofs"},
	} {
		d := ref(t, tc.dest)
		for _, v := range []struct {
			f    func(layers.Ref) (layers.Ref, error)
			want string
		}{{layers.ZstdDest, tc.zstd}, {layers.ErofsDest, tc.erofs}} {
			got, err := v.f(d)
			if err != nil || got.String() != v.want {
				t.Errorf("variant of %s = %s, %v; want %s", tc.dest, got, err, v.want)
				continue
			}
			again := ref(t, v.want)
			if got.Kind != again.Kind || got.Path != again.Path || got.Tag != again.Tag || got.Canonical() != again.Canonical() {
				t.Errorf("variant of %s: %+v, but %s parses to %+v", tc.dest, got, v.want, again)
			}
		}
		if got, err := d.Variant("-estargz"); err != nil || got.String() != strings.TrimSuffix(tc.zstd, "-zstd")+"-estargz" {
			t.Errorf("Variant(-estargz) of %s = %s, %v", tc.dest, got, err)
		}
	}
	if _, err := layers.ErofsDest(ref(t, "oci:/tmp/out")); err == nil || !strings.Contains(err.Error(), "EROFS goes to TAG-erofs") {
		t.Errorf("ErofsDest of an untagged layout: %v", err)
	}
	if got := ref(t, "oci:/tmp/out").WithLayoutTag("latest"); got.String() != "oci:/tmp/out:latest" || got.Tag != "latest" {
		t.Errorf("WithLayoutTag: %+v", got)
	}
	if got := ref(t, "oci:/tmp/out:app").WithLayoutTag("latest"); got.String() != "oci:/tmp/out:app" {
		t.Errorf("WithLayoutTag of a tagged layout: %+v", got)
	}
	digest := ref(t, "127.0.0.1:5000/acme/app@sha256:"+strings.Repeat("a", 64))
	if _, err := layers.ErofsDest(digest); err == nil || !strings.Contains(err.Error(), "kiln convert --format erofs") {
		t.Errorf("ErofsDest of a digest: %v", err)
	}
	if _, err := layers.ZstdDest(digest); err == nil || !strings.Contains(err.Error(), "one --compression") {
		t.Errorf("ZstdDest of a digest: %v", err)
	}
}
