package warm

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/convert"
	"github.com/kiln-build/kiln/layers"
)

func TestResolveTakesZstdVariant(t *testing.T) {
	ctx := context.Background()
	f := pushFixture(t, false)
	src := fastSource()
	li, err := layers.Open(ctx, f.ref, layers.WithPlatform(amd64))
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	in, err := li.V1(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := convert.ToZstd(ctx, in, convert.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if _, err := layers.Write(ctx, res.Image, f.ref+ZstdTagSuffix); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		o        ResolveOptions
		wantZstd bool
		wantErr  string
	}{
		{"auto takes zstd", ResolveOptions{}, true, ""},
		{"gzip asked", ResolveOptions{Compression: CompressionGzip}, false, ""},
		{"target cannot run zstd", ResolveOptions{NoZstd: "Docker 20.10 loads zstd layers only from 23.0"}, false, ""},
		{"zstd asked, target cannot", ResolveOptions{Compression: CompressionZstd, NoZstd: "Docker 20.10: needs 23.0"}, false, "23.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Platform, tc.o.Blobs = amd64, src
			s, err := Resolve(ctx, []string{f.ref}, tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			img := s.Images[0]
			if img.Zstd != tc.wantZstd || img.Name != f.ref {
				t.Fatalf("image %+v: zstd=%v want %v", img, img.Zstd, tc.wantZstd)
			}
			if tc.wantZstd && img.Source != f.ref+ZstdTagSuffix {
				t.Errorf("source %s", img.Source)
			}
			for _, b := range s.Blobs {
				if b.Kind == KindLayer && IsZstd(b.MediaType) != tc.wantZstd {
					t.Errorf("layer %s media type %s", b.Digest, b.MediaType)
				}
			}
		})
	}
	// The warm of the zstd variant lands under the original name.
	s, err := Resolve(ctx, []string{f.ref}, ResolveOptions{Platform: amd64, Blobs: src})
	if err != nil {
		t.Fatal(err)
	}
	tgt := openTestTarget(t, "oci")
	rep, err := Warm(ctx, s, tgt, Options{})
	if err != nil || !rep.Ready || rep.Images[0].Source != f.ref+ZstdTagSuffix {
		t.Fatalf("ready=%v err=%v images=%+v", rep.Ready, err, rep.Images)
	}
}
