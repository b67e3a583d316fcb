package cmdtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/sign"
)

// Keys are a signing key and public keys in files, as kiln's --key,
// --sign-key and --verify-key flags read them.
type Keys struct {
	Signer *sign.Signer
	// Key is Signer as a PKCS#8 PEM file; Pub its public half; OtherPub
	// the public half of a key that signs nothing.
	Key, Pub, OtherPub string
}

// NewKeys makes Keys in a new temporary directory.
func NewKeys(t testing.TB) Keys {
	t.Helper()
	dir := t.TempDir()
	k, err := sign.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	other, err := sign.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	ks := Keys{Signer: k, Key: filepath.Join(dir, "k.pem"), Pub: filepath.Join(dir, "k.pub"), OtherPub: filepath.Join(dir, "o.pub")}
	for f, b := range map[string][]byte{ks.Key: k.PKCS8(), ks.Pub: k.Public().PEM(), ks.OtherPub: other.Public().PEM()} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ks
}
