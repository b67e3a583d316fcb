package hostcmd

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
)

// D6 (issue 27): host check --json against an image whose registry
// redirects blobs to presigned storage that refuses them: the report holds
// no signature, credential or token from the signed URL or the storage's
// error body.
func TestHostCheckPresignedStorageRedacted(t *testing.T) {
	host := testimage.PresignedRegistry(t)
	ref := host + "/team/app:1"
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip")))
	code, out, errOut := run(t, "host", "check", "--host-info", filepath.Join(hostTestdata, "hosts", "h100-535.json"), "--image", ref, "--json")
	t.Logf("exit %d\n%s%s", code, out, errOut)
	for _, s := range testimage.PresignedSecrets() {
		if strings.Contains(out+errOut, s) {
			t.Errorf("host check prints %q (exit %d):\n%s%s", s, code, out, errOut)
		}
	}
	if !strings.Contains(out+errOut, "SignatureDoesNotMatch") {
		t.Errorf("the storage's answer is lost (exit %d):\n%s%s", code, out, errOut)
	}
}
