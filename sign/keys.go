package sign

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"

	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/scrypt"

	"github.com/kiln-build/kiln/internal/localfile"
)

// PEM block types kiln reads.
const (
	pemPKCS8       = "PRIVATE KEY"
	pemSEC1        = "EC PRIVATE KEY"
	pemPublic      = "PUBLIC KEY"
	pemCosign      = "ENCRYPTED COSIGN PRIVATE KEY"
	pemSigstore    = "ENCRYPTED SIGSTORE PRIVATE KEY"
	pemEncPKCS8    = "ENCRYPTED PRIVATE KEY"
	passwordEnvVar = "COSIGN_PASSWORD"
)

// Signer is a loaded private key.
type Signer struct {
	key *ecdsa.PrivateKey
	// Source names where the key came from (a file path), for messages.
	Source string
}

// PublicKey is a loaded public key.
type PublicKey struct {
	key *ecdsa.PublicKey
	// Source names where the key came from (a file path).
	Source string
}

// Public returns the signer's public key.
func (s *Signer) Public() *PublicKey { return &PublicKey{key: &s.key.PublicKey, Source: s.Source} }

// Hint is cosign's key hint: base64 of the SHA-256 of the PKIX DER.
func (p *PublicKey) Hint() string {
	der, err := x509.MarshalPKIXPublicKey(p.key)
	if err != nil {
		return ""
	}
	h := sha256.Sum256(der)
	return base64.StdEncoding.EncodeToString(h[:])
}

// ID is the key's fingerprint as reports print it: sha256:<hex of PKIX DER>.
func (p *PublicKey) ID() string {
	der, err := x509.MarshalPKIXPublicKey(p.key)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("sha256:%x", sha256.Sum256(der))
}

// PEM encodes the public key as cosign.pub does.
func (p *PublicKey) PEM() []byte {
	der, _ := x509.MarshalPKIXPublicKey(p.key)
	return pem.EncodeToMemory(&pem.Block{Type: pemPublic, Bytes: der})
}

// sign signs the SHA-256 of data (ASN.1 DER ECDSA signature).
func (s *Signer) sign(data []byte) ([]byte, error) {
	h := sha256.Sum256(data)
	return ecdsa.SignASN1(rand.Reader, s.key, h[:])
}

// verify checks an ASN.1 (or raw r||s) ECDSA signature over SHA-256(data).
func (p *PublicKey) verify(data, sig []byte) bool {
	h := sha256.Sum256(data)
	if ecdsa.VerifyASN1(p.key, h[:], sig) {
		return true
	}
	// Raw r||s, as some tools write it.
	n := (p.key.Curve.Params().BitSize + 7) / 8
	if len(sig) == 2*n {
		r := new(big.Int).SetBytes(sig[:n])
		s := new(big.Int).SetBytes(sig[n:])
		return ecdsa.Verify(p.key, h[:], r, s)
	}
	return false
}

// Password reads a cosign key file's password. The default reads
// COSIGN_PASSWORD (empty when unset: cosign's keys may have none).
type Password func() ([]byte, error)

// EnvPassword is the default Password: $COSIGN_PASSWORD.
func EnvPassword() ([]byte, error) { return []byte(os.Getenv(passwordEnvVar)), nil }

// LoadSigner reads a private key file: PKCS#8 PEM ("PRIVATE KEY", as
// openssl genpkey and openssl pkcs8 -nocrypt write it), SEC 1 ("EC PRIVATE
// KEY", openssl ecparam -genkey) or cosign's encrypted key file.
func LoadSigner(path string, pw Password) (*Signer, error) {
	b, err := localfile.ReadFile(path, "signing key", localfile.MaxKey)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %v", path, err)
	}
	k, err := ParseSigner(b, pw)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %v", path, err)
	}
	k.Source = path
	return k, nil
}

// ParseSigner parses the PEM forms LoadSigner reads. Errors never quote the
// key bytes.
func ParseSigner(b []byte, pw Password) (*Signer, error) {
	if pw == nil {
		pw = EnvPassword
	}
	var blk *pem.Block
	rest := b
	for {
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, errors.New("no PEM private key block (want PRIVATE KEY, EC PRIVATE KEY or ENCRYPTED SIGSTORE PRIVATE KEY)")
		}
		if blk.Type != "EC PARAMETERS" {
			break
		}
	}
	var key any
	var err error
	switch blk.Type {
	case pemPKCS8:
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PKCS#8 block does not parse: %v", err)
		}
	case pemSEC1:
		key, err = x509.ParseECPrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("EC PRIVATE KEY block does not parse: %v", err)
		}
	case pemCosign, pemSigstore:
		p, err := pw()
		if err != nil {
			return nil, fmt.Errorf("password: %v", err)
		}
		der, err := decryptCosign(blk.Bytes, p)
		if err != nil {
			return nil, err
		}
		key, err = x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			return nil, fmt.Errorf("decrypted key is not PKCS#8: %v", err)
		}
	case pemEncPKCS8:
		return nil, errors.New("password-protected PKCS#8 (ENCRYPTED PRIVATE KEY) is not supported: decrypt it with openssl pkcs8, or use cosign's key file")
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key kiln reads", blk.Type)
	}
	ek, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key type %T: kiln signs with ECDSA P-256 keys only (cosign generate-key-pair, openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)", key)
	}
	if ek.Curve != elliptic.P256() {
		return nil, fmt.Errorf("ECDSA curve %s: kiln signs with P-256 only", ek.Curve.Params().Name)
	}
	return &Signer{key: ek}, nil
}

// LoadPublicKey reads a PEM public key (PKIX "PUBLIC KEY", as cosign.pub
// and openssl ec -pubout write it).
func LoadPublicKey(path string) (*PublicKey, error) {
	b, err := localfile.ReadFile(path, "public key", localfile.MaxKey)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %v", path, err)
	}
	k, err := ParsePublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %v", path, err)
	}
	k.Source = path
	return k, nil
}

// ParsePublicKey parses a PEM PKIX public key.
func ParsePublicKey(b []byte) (*PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block (want PUBLIC KEY)")
	}
	if blk.Type != pemPublic {
		return nil, fmt.Errorf("PEM block %q is not a PUBLIC KEY", blk.Type)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PUBLIC KEY does not parse: %v", err)
	}
	ek, ok := k.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("key type %T: kiln verifies ECDSA keys only", k)
	}
	return &PublicKey{key: ek}, nil
}

// cosignBox is the JSON inside cosign's encrypted key PEM (the
// go-securesystemslib "encrypted" format).
type cosignBox struct {
	KDF struct {
		Name   string `json:"name"`
		Params struct {
			N int `json:"N"`
			R int `json:"r"`
			P int `json:"p"`
		} `json:"params"`
		Salt []byte `json:"salt"`
	} `json:"kdf"`
	Cipher struct {
		Name  string `json:"name"`
		Nonce []byte `json:"nonce"`
	} `json:"cipher"`
	Ciphertext []byte `json:"ciphertext"`
}

// The scrypt parameters cosign writes (legacy, standard, OWASP); anything
// else is refused before deriving, so a crafted file cannot make kiln
// spend minutes or gigabytes in scrypt.
var scryptParams = [][3]int{{1 << 15, 8, 1}, {1 << 16, 8, 1}, {1 << 17, 8, 1}}

func decryptCosign(body, password []byte) ([]byte, error) {
	var box cosignBox
	if err := json.Unmarshal(body, &box); err != nil {
		return nil, fmt.Errorf("encrypted key: not cosign's format: %v", err)
	}
	if box.KDF.Name != "scrypt" {
		return nil, fmt.Errorf("encrypted key: kdf %q, want scrypt", box.KDF.Name)
	}
	if box.Cipher.Name != "nacl/secretbox" {
		return nil, fmt.Errorf("encrypted key: cipher %q, want nacl/secretbox", box.Cipher.Name)
	}
	p := [3]int{box.KDF.Params.N, box.KDF.Params.R, box.KDF.Params.P}
	known := false
	for _, q := range scryptParams {
		known = known || p == q
	}
	if !known {
		return nil, fmt.Errorf("encrypted key: scrypt parameters N=%d r=%d p=%d are not cosign's", p[0], p[1], p[2])
	}
	if len(box.Cipher.Nonce) != 24 {
		return nil, fmt.Errorf("encrypted key: nonce of %d bytes, want 24", len(box.Cipher.Nonce))
	}
	k, err := scrypt.Key(password, box.KDF.Salt, p[0], p[1], p[2], 32)
	if err != nil {
		return nil, fmt.Errorf("encrypted key: scrypt: %v", err)
	}
	var key [32]byte
	var nonce [24]byte
	copy(key[:], k)
	copy(nonce[:], box.Cipher.Nonce)
	out, ok := secretbox.Open(nil, box.Ciphertext, &nonce, &key)
	if !ok {
		return nil, fmt.Errorf("encrypted key: decryption failed (wrong %s?)", passwordEnvVar)
	}
	return out, nil
}

// EncryptCosign writes s as cosign's encrypted key file (scrypt N=2^16),
// for tests and `kiln sign --generate` style tooling.
func EncryptCosign(s *Signer, password []byte) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(s.key)
	if err != nil {
		return nil, err
	}
	var box cosignBox
	box.KDF.Name = "scrypt"
	box.KDF.Params.N, box.KDF.Params.R, box.KDF.Params.P = 1<<16, 8, 1
	box.KDF.Salt = make([]byte, 32)
	box.Cipher.Name = "nacl/secretbox"
	box.Cipher.Nonce = make([]byte, 24)
	if _, err := rand.Read(box.KDF.Salt); err != nil {
		return nil, err
	}
	if _, err := rand.Read(box.Cipher.Nonce); err != nil {
		return nil, err
	}
	k, err := scrypt.Key(password, box.KDF.Salt, 1<<16, 8, 1, 32)
	if err != nil {
		return nil, err
	}
	var key [32]byte
	var nonce [24]byte
	copy(key[:], k)
	copy(nonce[:], box.Cipher.Nonce)
	box.Ciphertext = secretbox.Seal(nil, der, &nonce, &key)
	j, err := json.Marshal(box)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemSigstore, Bytes: j}), nil
}

// GenerateSigner makes a fresh P-256 key (tests).
func GenerateSigner() (*Signer, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Signer{key: k, Source: "generated"}, nil
}

// PKCS8 encodes s as a PKCS#8 PEM (tests).
func (s *Signer) PKCS8() []byte {
	der, _ := x509.MarshalPKCS8PrivateKey(s.key)
	return pem.EncodeToMemory(&pem.Block{Type: pemPKCS8, Bytes: der})
}
