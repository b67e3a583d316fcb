package warmcmd

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/weightscmd"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/sign"
)

// One kiln warm logs in once per repository: the tag, its -zstd variant
// probe, the config, the layers and the signature lookup (--verify-key)
// all go through one client for the repository, with one token exchange
// (it was five or more: every manifest read, the blob fetcher and the
// referrers lookup each made their own).
func TestWarmOneTokenExchangePerRepository(t *testing.T) {
	ta := testimage.TokenRegistry(t, true)
	ref := ta.Host() + "/acme/app:v1"
	testimage.Push(t, ref, testimage.ImageFor(t, "amd64", testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("app/bin", 4096)}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.Sized("app/data", 8192)}, "gzip")))
	ks := cmdtest.NewKeys(t)
	if _, err := sign.Sign(context.Background(), ref, ks.Signer, sign.SignOptions{Format: sign.FormatBundle}); err != nil {
		t.Fatal(err)
	}
	ta.Reset()
	oci := filepath.Join(t.TempDir(), "oci")
	code, out, errOut := run(t, "warm", ref, "--target", "oci:"+oci, "--verify-key", ks.Pub, "--json", "--progress", "none")
	var rep struct {
		Signatures []struct {
			Verified bool `json:"verified"`
		} `json:"signatures"`
	}
	if code != cmdutil.ExitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Signatures) != 1 || !rep.Signatures[0].Verified {
		t.Fatalf("warm: exit %d\n%s\n%s", code, out, errOut)
	}
	ex := ta.Exchanges()
	t.Logf("token exchanges per repository: %v", ex)
	if ex["acme/app"] != 1 || len(ex) != 1 {
		t.Errorf("token exchanges: %v, want exactly one, for acme/app", ex)
	}
}

// The same with a weights volume: the image's label leads to an artifact,
// whose manifest and blobs are read through the run's client for its
// repository, as the image's are (weights resolved its label with a
// client of its own).
func TestWarmWeightsOneTokenExchangePerRepository(t *testing.T) {
	ta := testimage.TokenRegistry(t, false)
	slimRef, wref := cmdtest.StrippedApp(t, ta.Host(), weightscmd.NewCmdWeights)
	ta.Reset()
	dir := t.TempDir()
	code, out, errOut := run(t, "warm", slimRef, "--target", "oci:"+filepath.Join(dir, "oci"), "--weights-into", filepath.Join(dir, "vol"), "--platform", "linux/amd64", "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("warm: exit %d\n%s\n%s", code, out, errOut)
	}
	ex := ta.Exchanges()
	t.Logf("token exchanges per repository (%s, %s): %v", slimRef, wref, ex)
	if len(ex) == 0 {
		t.Fatal("no token exchange counted")
	}
	for repo, n := range ex {
		if n != 1 || repo == "" {
			t.Errorf("token exchanges: %v, want one per repository", ex)
			break
		}
	}
}
