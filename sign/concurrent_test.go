package sign

import (
	"context"
	"sync"
	"testing"
)

// D3: concurrent signers on a registry without the referrers API each
// rewrite one shared tag (the referrers tag schema's index, the legacy
// .sig tag). Every signer that exits without an error has its signature
// kept: each signer's key verifies afterwards.
func TestConcurrentSignersKeepEverySignature(t *testing.T) {
	const signers = 6
	for _, format := range []string{FormatBundle, FormatLegacy} {
		t.Run(format, func(t *testing.T) {
			ctx := context.Background()
			repo, d := pushed(t, false)
			ref := repo.Digest(d.String()).String()
			keys := make([]*Signer, signers)
			for i := range keys {
				keys[i], _ = GenerateSigner()
			}
			var wg sync.WaitGroup
			errs := make([]error, signers)
			start := make(chan struct{})
			for i, k := range keys {
				wg.Go(func() {
					<-start
					_, errs[i] = Sign(ctx, ref, k, SignOptions{Format: format})
				})
			}
			close(start)
			wg.Wait()
			for i, k := range keys {
				if errs[i] != nil {
					t.Errorf("signer %d: %v", i, errs[i])
					continue
				}
				res, err := Verify(ctx, ref, repo, d, []*PublicKey{k.Public()})
				if err != nil {
					t.Fatal(err)
				}
				if !res.Verified {
					t.Errorf("signer %d exited 0 but its signature is gone: %s %s", i, res.Reason, res.Detail)
				}
			}
		})
	}
}
