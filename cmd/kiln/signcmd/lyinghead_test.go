package signcmd

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
)

// D14: a registry answers HEAD REPO:v1 with the digest of a signed image
// (v2) while GET REPO:v1 serves an unsigned one. verify checks what a
// pull gets (warm's way: GET and hash the bytes), so it refuses; sign
// signs what GET serves.
func TestVerifyResolvesTagsByGet(t *testing.T) {
	inner := registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && strings.HasSuffix(r.URL.Path, "/manifests/v1") {
			r.URL.Path = strings.TrimSuffix(r.URL.Path, "v1") + "v2"
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	unsigned, _ := random.Image(64, 1)
	signed, _ := random.Image(64, 1)
	for tag, img := range map[string]v1.Image{"v1": unsigned, "v2": signed} {
		ref, _ := name.NewTag(host+"/acme/app:"+tag, name.Insecure)
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
	}
	ks := cmdtest.NewKeys(t)
	if code, out, errOut := run(t, "sign", host+"/acme/app:v2", "--key", ks.Key); code != 0 {
		t.Fatalf("sign v2: exit %d %s %s", code, out, errOut)
	}
	ud, _ := unsigned.Digest()
	code, out, _ := run(t, "verify", host+"/acme/app:v1", "--key", ks.Pub, "--json")
	var rep struct {
		Verified bool
		Results  []struct{ Digest, Reason string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if code != cmdutil.ExitUnverified || rep.Verified || len(rep.Results) != 1 || rep.Results[0].Digest != ud.String() || rep.Results[0].Reason != "missing" {
		t.Fatalf("verify v1 (HEAD lies): exit %d, want 4 for %s missing\n%s", code, ud, out)
	}
	// sign signs what GET serves: afterwards v1 verifies as itself.
	code, out, errOut := run(t, "sign", host+"/acme/app:v1", "--key", ks.Key, "--json")
	var sr signReport
	if json.Unmarshal([]byte(out), &sr); code != 0 || sr.Signed == nil || sr.Signed.Digest != ud.String() {
		t.Fatalf("sign v1: exit %d, want the digest GET serves %s\n%s %s", code, ud, out, errOut)
	}
}
