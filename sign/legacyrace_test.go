package sign

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kiln-build/kiln/registry"
)

// slowWriter is a signer's transport whose blob uploads, once it has
// read the .sig tag, take delay: a signer on a loaded machine or a slow
// link, inside its read-modify-write of the tag.
type slowWriter struct {
	read  atomic.Bool
	delay time.Duration
}

func (s *slowWriter) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") && strings.HasSuffix(r.URL.Path, ".sig"):
		s.read.Store(true)
	case r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/blobs/uploads/") && s.read.Load():
		time.Sleep(s.delay)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestLegacySlowWriterKeepsEarlierSignature (issue 34 N11): a legacy
// signer whose write of the tag is slow (its config upload took 600 ms
// after it read the tag) must not put back the list it read, dropping a
// signature another signer stored and confirmed meanwhile: the tag is
// read again just before the PUT, and the list merged.
func TestLegacySlowWriterKeepsEarlierSignature(t *testing.T) {
	ctx := context.Background()
	repo, d := pushed(t, false)
	ref := repo.Digest(d.String()).String()
	fast, _ := GenerateSigner()
	slow, _ := GenerateSigner()
	var wg sync.WaitGroup
	var fastErr, slowErr error
	wg.Go(func() {
		_, slowErr = Sign(ctx, ref, slow, SignOptions{Format: FormatLegacy, Layers: []registry.Option{registry.WithTransport(&slowWriter{delay: 600 * time.Millisecond})}})
	})
	wg.Go(func() {
		time.Sleep(50 * time.Millisecond) // after the slow signer read the (empty) tag
		_, fastErr = Sign(ctx, ref, fast, SignOptions{Format: FormatLegacy})
	})
	wg.Wait()
	for name, k := range map[string]*Signer{"fast": fast, "slow": slow} {
		if err := map[string]error{"fast": fastErr, "slow": slowErr}[name]; err != nil {
			t.Errorf("%s signer: %v", name, err)
			continue
		}
		res, err := Verify(ctx, ref, repo, d, []*PublicKey{k.Public()})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Verified {
			t.Errorf("the %s signer exited 0 but its signature is gone: %s %s", name, res.Reason, res.Detail)
		}
	}
}
