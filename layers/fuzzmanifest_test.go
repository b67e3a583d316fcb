package layers_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
)

// lyingSource serves its blobs by digest and, for a digest it does not
// hold, its first blob: a hostile registry or layout that answers every
// request, ignoring the length asked for.
type lyingSource [][]byte

func (s lyingSource) Open(_ context.Context, dg v1.Hash, _, _ int64) (io.ReadCloser, error) {
	for _, b := range s {
		if sha(b) == dg {
			return io.NopCloser(bytes.NewReader(b)), nil
		}
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("no blob %s", dg)
	}
	return io.NopCloser(bytes.NewReader(s[0])), nil
}

func sha(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

// rootTypes are the media types a fuzzed root is read as.
var rootTypes = []types.MediaType{types.OCIImageIndex, types.OCIManifestSchema1, types.DockerManifestList, types.DockerManifestSchema2}

// manifestSeeds are an honest index → manifest → config, and the same
// with a config whose descriptor lies about its size or its digest.
func manifestSeeds() [][3][]byte {
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	man := func(size int64, dg v1.Hash) []byte {
		return []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%d},"layers":[]}`, dg, size))
	}
	good := man(int64(len(cfg)), sha(cfg))
	idx := []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%d,"platform":{"architecture":"amd64","os":"linux"}}]}`, sha(good), len(good)))
	other := []byte(`{"architecture":"arm64","os":"linux"}`)
	return [][3][]byte{
		{idx, good, cfg},
		{man(int64(len(cfg))+1, sha(cfg)), cfg, nil},
		{man(int64(len(other)), sha(other)), cfg, nil},
		{man(int64(len(cfg)), sha(cfg)), cfg[:len(cfg)-1], nil},
	}
}

// FuzzWalkManifests walks hostile JSON (an index or manifest root, two
// blobs a lying source serves) as every reader of an image's metadata
// does (layers.Walk, PlatformCandidates, ReadManifest): never a panic;
// what it accepts was verified, each manifest, index and config the
// bytes its descriptor names, digest and size.
func FuzzWalkManifests(f *testing.F) {
	for _, s := range manifestSeeds() {
		f.Add(uint8(0), s[0], s[1], s[2])
		f.Add(uint8(1), s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, kind uint8, root, a, b []byte) {
		src := lyingSource{a, b}
		desc := v1.Descriptor{MediaType: rootTypes[int(kind)%len(rootTypes)], Digest: sha(root), Size: int64(len(root))}
		ref := layers.Ref{Kind: layers.KindOCILayout, Raw: "fuzz"}
		rt, err := layers.Walk(context.Background(), ref, src, layers.Raw{Desc: desc, Bytes: root}, v1.Platform{OS: "linux", Architecture: "amd64"}, func(_ context.Context, _ blob.Source, cands []layers.Raw) (int, string) {
			return len(cands) - 1, ""
		})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		for what, r := range map[string]*layers.Raw{"manifest": &rt.Manifest, "config": &rt.Config, "index": rt.Index} {
			if r == nil {
				continue
			}
			if sha(r.Bytes) != r.Desc.Digest || int64(len(r.Bytes)) != r.Desc.Size {
				t.Fatalf("accepted a %s of %d bytes hashing to %s for a descriptor of %d bytes, %s", what, len(r.Bytes), sha(r.Bytes), r.Desc.Size, r.Desc.Digest)
			}
		}
		if rt.ConfigFile == nil {
			t.Fatal("accepted an image without a config")
		}
	})
}

// TestWalkManifestSeeds: FuzzWalkManifests' seeds are what they say: the
// honest walk is accepted, each lie refused.
func TestWalkManifestSeeds(t *testing.T) {
	for i, s := range manifestSeeds() {
		desc := v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: sha(s[0]), Size: int64(len(s[0]))}
		if i == 0 {
			desc.MediaType = types.OCIImageIndex
		}
		_, err := layers.Walk(context.Background(), layers.Ref{Kind: layers.KindOCILayout, Raw: "seed"}, lyingSource{s[1], s[2]}, layers.Raw{Desc: desc, Bytes: s[0]}, v1.Platform{OS: "linux", Architecture: "amd64"}, nil)
		if (i == 0) != (err == nil) {
			t.Errorf("seed %d: err = %v", i, err)
		}
	}
}
