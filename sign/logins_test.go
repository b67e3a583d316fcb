package sign

import (
	"context"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kiln-build/kiln/internal/testimage"
)

// kiln sign logs in once per repository: the tag's resolution, the
// signature's blobs and manifest, the referrers probe and the read-back
// of the referrers tag or the .sig tag all go through one client, whose
// token may push; kiln verify likewise reads through one.
func TestSignOneTokenExchangePerRepository(t *testing.T) {
	ctx := context.Background()
	s, _ := GenerateSigner()
	for _, tc := range []struct {
		name      string
		referrers bool
		format    string
	}{
		{"bundle, referrers API", true, FormatBundle},
		{"bundle, referrers tag schema", false, FormatBundle},
		{"legacy .sig tag", false, FormatLegacy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ta := testimage.TokenRegistry(t, tc.referrers)
			ref := ta.Host() + "/acme/app:v1"
			img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 100)}, "gzip"))
			testimage.Push(t, ref, img)
			ta.Reset()
			if _, err := Sign(ctx, ref, s, SignOptions{Format: tc.format}); err != nil {
				t.Fatal(err)
			}
			if ex := ta.Exchanges(); len(ex) != 1 || ex["acme/app"] != 1 {
				t.Errorf("sign: token exchanges %v, want one, for acme/app", ex)
			}
			ta.Reset()
			repo, _ := name.NewRepository(ta.Host()+"/acme/app", name.Insecure)
			d, _ := img.Digest()
			res, err := Verify(ctx, ref, repo, d, []*PublicKey{s.Public()})
			if err != nil || !res.Verified {
				t.Fatalf("verify: %+v, %v", res, err)
			}
			if ex := ta.Exchanges(); len(ex) != 1 || ex["acme/app"] != 1 {
				t.Errorf("verify: token exchanges %v, want one, for acme/app", ex)
			}
			// kiln host check --image's inspection: the tag's resolution
			// and the verification, one login (two before).
			ta.Reset()
			pol := &Policy{rules: []rule{{scope: "*", keys: []*PublicKey{s.Public()}}}}
			if in := Inspect(ctx, ref, pol); in == nil || in.Err != "" || !in.Result.Verified {
				t.Fatalf("inspect: %+v", in)
			}
			if ex := ta.Exchanges(); len(ex) != 1 || ex["acme/app"] != 1 {
				t.Errorf("inspect: token exchanges %v, want one, for acme/app", ex)
			}
		})
	}
}
