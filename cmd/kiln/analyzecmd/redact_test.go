package analyzecmd

import (
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
)

// D6 (issue 27): a registry that redirects blobs to presigned storage,
// which refuses with an S3 error body echoing the signed request: analyze
// prints none of the signature, credential or token, in its table or JSON.
func TestAnalyzePresignedStorageRedacted(t *testing.T) {
	host := testimage.PresignedRegistry(t)
	ref := host + "/team/app:1"
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip")))
	for _, args := range [][]string{{"analyze", ref}, {"analyze", "--json", ref}} {
		code, out, errOut := run(t, args...)
		t.Logf("%v: exit %d\n%s%s", args, code, out, errOut)
		if code == 0 {
			t.Fatalf("%v: exit 0 with a refusing storage", args)
		}
		for _, s := range testimage.PresignedSecrets() {
			if strings.Contains(out+errOut, s) {
				t.Errorf("%v prints %q:\n%s%s", args, s, out, errOut)
			}
		}
		if !strings.Contains(out+errOut, "SignatureDoesNotMatch") {
			t.Errorf("%v: the storage's answer is lost:\n%s%s", args, out, errOut)
		}
	}
}
