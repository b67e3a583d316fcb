//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/sign"
)

// need skips (or, with KILN_REQUIRE_SIGN=1 as .ci/run sets it, fails).
func needSign(t *testing.T, why string) {
	t.Helper()
	testkit.Need(t, why, "KILN_REQUIRE_SIGN")
}

// cosignBin is the real cosign v3 (scripts/cosign.sh builds and caches it).
func cosignBin(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("KILN_COSIGN"), "/var/cache/kiln-cosign/v3.1.3/cosign"} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath("cosign"); err == nil {
		return p
	}
	needSign(t, "no cosign (bash scripts/cosign.sh build)")
	return ""
}

func answers(addr string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/v2/")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// distributionV3 starts a private distribution v3 registry (referrers API)
// on a free port through scripts/registry3.sh, stopped (and its storage
// removed) when the test ends.
func distributionV3(t *testing.T) string {
	t.Helper()
	bin := "/var/cache/kiln-registry3/v3.1.2/registry"
	if c := os.Getenv("KILN_REGISTRY3_CACHE"); c != "" {
		bin = filepath.Join(c, "v3.1.2", "registry")
	}
	if _, err := os.Stat(bin); err != nil {
		needSign(t, "no distribution v3 registry (bash scripts/registry3.sh build)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	env := append(os.Environ(), "KILN_REGISTRY3_ADDR="+addr, "KILN_REGISTRY3_DIR="+filepath.Join(dir, "data"), "KILN_REGISTRY3_STATE="+filepath.Join(dir, "state"))
	run := func(verb string) {
		cmd := exec.Command("bash", "../scripts/registry3.sh", verb)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("registry3.sh %s: %v\n%s", verb, err, out)
		}
	}
	run("start")
	t.Cleanup(func() { run("stop") })
	return addr
}

// pushRandom pushes a small linux/amd64 image and returns its reference
// and digest.
func pushRandom(t *testing.T, ref string) (string, v1.Hash) {
	t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return ref, d
}

type runOut struct {
	out, err string
	code     int
}

func run(t *testing.T, env []string, bin string, args ...string) runOut {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return runOut{o.String(), e.String(), code}
}

type keys struct {
	pkcs8, pkcs8Pub      string // openssl genpkey / openssl pkey -pubout
	cosignKey, cosignPub string // cosign generate-key-pair (encrypted)
	otherPub             string // a key that signed nothing
}

const cosignPassword = "kiln-it-password"

func makeKeys(t *testing.T, cosign, dir string) keys {
	t.Helper()
	k := keys{
		pkcs8: filepath.Join(dir, "key.pem"), pkcs8Pub: filepath.Join(dir, "key.pub"),
		cosignKey: filepath.Join(dir, "cosign.key"), cosignPub: filepath.Join(dir, "cosign.pub"),
		otherPub: filepath.Join(dir, "other.pub"),
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		needSign(t, "no openssl")
	}
	for _, c := range [][]string{
		{"openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", k.pkcs8},
		{"openssl", "pkey", "-in", k.pkcs8, "-pubout", "-out", k.pkcs8Pub},
		{"openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", filepath.Join(dir, "other.pem")},
		{"openssl", "pkey", "-in", filepath.Join(dir, "other.pem"), "-pubout", "-out", k.otherPub},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	cmd := exec.Command(cosign, "generate-key-pair")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD="+cosignPassword)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	return k
}

// cosignVerify runs the real `cosign verify --key` offline (no Rekor).
func cosignVerify(t *testing.T, cosign, pub, ref string) runOut {
	return run(t, nil, cosign, "verify", "--key", pub, "--insecure-ignore-tlog=true", ref)
}

// cosignSign runs the real `cosign sign --key` offline: no signing config
// (Fulcio, Rekor, TSA), nothing uploaded but the signature.
func cosignSign(t *testing.T, cosign, key, ref string, extra ...string) {
	t.Helper()
	args := append([]string{"sign", "--key", key, "--use-signing-config=false", "--tlog-upload=false", "-y"}, extra...)
	r := run(t, []string{"COSIGN_PASSWORD=" + cosignPassword}, cosign, append(args, ref)...)
	if r.code != 0 {
		t.Fatalf("cosign sign %s: exit %d\n%s%s", ref, r.code, r.out, r.err)
	}
}

type warmJSON struct {
	Ready      bool                     `json:"ready"`
	Blobs      []struct{ State string } `json:"blobs"`
	Signatures []*sign.Result           `json:"signatures"`
	Error      string                   `json:"error"`
}

// TestSignVerifyWithCosign runs kiln's signing and verify-before-ready
// against the real cosign CLI, both ways, on a registry without the
// referrers API (Debian's docker-registry 2.8 on 127.0.0.1:5000 and
// distribution v3: the referrers tag schema) and one with it
// (go-containerregistry's registry).
func TestSignVerifyWithCosign(t *testing.T) {
	cosign := cosignBin(t)
	regs := map[string]string{}
	if answers(registry()) {
		regs["distribution-2.8"] = registry()
	} else {
		needSign(t, "no registry at "+registry()+" (bash scripts/registry.sh start)")
	}
	regs["distribution-v3"] = distributionV3(t)
	// The referrers API: no registry daemon here has it (distribution
	// v3.1.2 does not; zot is not on the module proxy), so
	// go-containerregistry's registry serves it, over HTTP on loopback
	// to the real cosign and kiln binaries.
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.WithReferrersSupport(true), ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	regs["ggcr-referrers-api"] = strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	kiln := testdaemon.KilnBinary(t)
	k := makeKeys(t, cosign, dir)
	run_ := time.Now().UnixNano()

	for label, reg := range regs {
		t.Run(label, func(t *testing.T) {
			repo := fmt.Sprintf("%s/kiln-sign-it/app%d", reg, run_)
			wantVia := "tag"
			if label == "ggcr-referrers-api" {
				wantVia = "api"
			}

			// kiln signs (PKCS#8 from openssl) → cosign verifies.
			ref1, d1 := pushRandom(t, repo+":kiln-signed")
			r := run(t, nil, kiln, "sign", ref1, "--key", k.pkcs8, "--json")
			var sr struct {
				Signed *sign.Signed `json:"signed"`
				Error  string       `json:"error"`
			}
			if err := json.Unmarshal([]byte(r.out), &sr); err != nil || r.code != 0 || sr.Signed == nil {
				t.Fatalf("kiln sign: exit %d %v\n%s%s", r.code, err, r.out, r.err)
			}
			if sr.Signed.Digest != d1.String() || sr.Signed.Referrers != wantVia {
				t.Fatalf("kiln sign: %+v, want digest %s listed by %s", sr.Signed, d1, wantVia)
			}
			if v := cosignVerify(t, cosign, k.pkcs8Pub, ref1); v.code != 0 || !strings.Contains(v.out, d1.String()) {
				t.Fatalf("cosign verify of kiln's signature: exit %d\n%s%s", v.code, v.out, v.err)
			}
			// A key that signed nothing: cosign refuses too.
			if v := cosignVerify(t, cosign, k.otherPub, ref1); v.code == 0 {
				t.Fatalf("cosign verify with the wrong key passed:\n%s", v.out)
			}
			// kiln signs with cosign's own encrypted key file.
			ref1b, _ := pushRandom(t, repo+":kiln-signed-cosign-key")
			if r := run(t, []string{"COSIGN_PASSWORD=" + cosignPassword}, kiln, "sign", ref1b, "--key", k.cosignKey); r.code != 0 {
				t.Fatalf("kiln sign --key cosign.key: exit %d\n%s", r.code, r.err)
			}
			if v := cosignVerify(t, cosign, k.cosignPub, ref1b); v.code != 0 {
				t.Fatalf("cosign verify (cosign key, kiln signature): exit %d\n%s", v.code, v.err)
			}
			// A wrong password fails before anything is pushed, naming the file, not the key.
			if r := run(t, []string{"COSIGN_PASSWORD=nope"}, kiln, "sign", ref1b, "--key", k.cosignKey); r.code != 2 || !strings.Contains(r.err, k.cosignKey) || strings.Contains(r.err, "PRIVATE KEY-----") {
				t.Fatalf("wrong password: exit %d %s", r.code, r.err)
			}
			// kiln's legacy .sig format → cosign verifies.
			ref1c, _ := pushRandom(t, repo+":kiln-legacy")
			if r := run(t, nil, kiln, "sign", ref1c, "--key", k.pkcs8, "--format", "legacy"); r.code != 0 {
				t.Fatalf("kiln sign --format legacy: exit %d\n%s", r.code, r.err)
			}
			if v := cosignVerify(t, cosign, k.pkcs8Pub, ref1c); v.code != 0 {
				t.Fatalf("cosign verify of kiln's legacy signature: exit %d\n%s", v.code, v.err)
			}

			// cosign signs (v3 default: bundle referrer; and legacy) → kiln verifies.
			ref2, d2 := pushRandom(t, repo+":cosign-signed")
			cosignSign(t, cosign, k.cosignKey, ref2)
			ref3, _ := pushRandom(t, repo+":cosign-legacy")
			cosignSign(t, cosign, k.cosignKey, ref3, "--new-bundle-format=false")
			for ref, format := range map[string]string{ref2: sign.FormatBundle, ref3: sign.FormatLegacy} {
				r := run(t, nil, kiln, "verify", ref, "--key", k.cosignPub, "--json")
				var vr struct {
					Verified bool           `json:"verified"`
					Results  []*sign.Result `json:"results"`
				}
				if err := json.Unmarshal([]byte(r.out), &vr); err != nil || r.code != 0 || !vr.Verified || vr.Results[0].Format != format {
					t.Fatalf("kiln verify of cosign's %s signature on %s: exit %d %v\n%s%s", format, ref, r.code, err, r.out, r.err)
				}
			}

			// Verify before ready: a cosign-signed image warms; the
			// marker records what was verified.
			oci := filepath.Join(t.TempDir(), "oci")
			ready := filepath.Join(t.TempDir(), "ready.json")
			w := run(t, nil, kiln, "warm", ref2, "--target", "oci:"+oci, "--verify-key", k.cosignPub, "--ready-file", ready, "--json", "--progress", "none")
			var wr warmJSON
			if err := json.Unmarshal([]byte(w.out), &wr); err != nil || w.code != 0 || !wr.Ready {
				t.Fatalf("warm of a signed image: exit %d %v\n%s%s", w.code, err, w.out, w.err)
			}
			if len(wr.Signatures) != 1 || !wr.Signatures[0].Verified || wr.Signatures[0].Digest != d2.String() {
				t.Fatalf("warm signatures: %+v", wr.Signatures)
			}
			mb, err := os.ReadFile(ready)
			if err != nil {
				t.Fatal(err)
			}
			var marker struct {
				Verified []*sign.Result `json:"verified"`
			}
			if err := json.Unmarshal(mb, &marker); err != nil || len(marker.Verified) != 1 || !marker.Verified[0].Verified || marker.Verified[0].KeyID == "" {
				t.Fatalf("ready marker: %v\n%s", err, mb)
			}

			// Through a mirror: the image named by a registry that does not
			// resolve; its signature is read from the mirror, the key chosen
			// by the real name.
			fake := "kiln-mirror.invalid"
			mref := fake + strings.TrimPrefix(ref2, reg)
			w = run(t, nil, kiln, "warm", mref, "--mirror", fake+"="+reg, "--target", "oci:"+filepath.Join(t.TempDir(), "oci"), "--verify-key", k.cosignPub, "--json", "--progress", "none")
			wr = warmJSON{}
			if err := json.Unmarshal([]byte(w.out), &wr); err != nil || w.code != 0 || !wr.Ready || len(wr.Signatures) != 1 || !wr.Signatures[0].Verified || wr.Signatures[0].Ref != mref {
				t.Fatalf("warm through a mirror: exit %d %v\n%s%s", w.code, err, w.out, w.err)
			}

			// convert --sign-key: the zstd variant signed as it is written.
			c := run(t, nil, kiln, "convert", ref1, "--sign-key", k.pkcs8, "--json", "--progress", "none")
			var cr struct {
				To     string       `json:"to"`
				Digest string       `json:"digest"`
				Signed *sign.Signed `json:"signed"`
			}
			if err := json.Unmarshal([]byte(c.out), &cr); err != nil || c.code != 0 || cr.Signed == nil || cr.Signed.Digest != cr.Digest {
				t.Fatalf("convert --sign-key: exit %d %v\n%s%s", c.code, err, c.out, c.err)
			}
			if v := cosignVerify(t, cosign, k.pkcs8Pub, cr.To); v.code != 0 {
				t.Fatalf("cosign verify of the converted image: exit %d\n%s", v.code, v.err)
			}

			// Refusals: nothing fetched, no marker, exit 4, the reason.
			refuse := func(ref, pub, reason string) {
				t.Helper()
				oci := filepath.Join(t.TempDir(), "oci")
				ready := filepath.Join(t.TempDir(), "ready.json")
				w := run(t, nil, kiln, "warm", ref, "--target", "oci:"+oci, "--verify-key", pub, "--ready-file", ready, "--json", "--progress", "none")
				var wr warmJSON
				if err := json.Unmarshal([]byte(w.out), &wr); err != nil {
					t.Fatalf("warm %s: %v\n%s", ref, err, w.out)
				}
				if w.code != 4 || wr.Ready || len(wr.Signatures) != 1 || wr.Signatures[0].Reason != reason || !strings.Contains(wr.Error, ref) {
					t.Fatalf("warm %s with %s: exit %d, want 4 and %s: %+v\n%s", ref, pub, w.code, reason, wr.Signatures, w.err)
				}
				if !strings.Contains(w.err, ref) || !strings.Contains(w.err, reason) {
					t.Errorf("message does not name the image and why: %s", w.err)
				}
				if ents, _ := os.ReadDir(filepath.Join(oci, "blobs", "sha256")); len(ents) != 0 {
					t.Fatalf("refused warm wrote %d blobs into %s", len(ents), oci)
				}
				if _, err := os.Stat(ready); err == nil {
					t.Fatal("refused warm wrote the ready marker")
				}
			}
			refuse(ref2, k.pkcs8Pub, sign.ReasonWrongKey)
			ref4, _ := pushRandom(t, repo+":unsigned")
			refuse(ref4, k.cosignPub, sign.ReasonMissing)

			// Tampered: kiln's bundle for ref1, its statement altered to
			// name ref5's digest and stored as ref5's referrer. The
			// signature (by the trusted key, its hint) no longer verifies.
			ref5, d5 := pushRandom(t, repo+":tampered")
			tamper(t, repo, d1, d5)
			refuse(ref5, k.pkcs8Pub, sign.ReasonTampered)
			if v := cosignVerify(t, cosign, k.pkcs8Pub, ref5); v.code == 0 {
				t.Fatalf("cosign verify accepted the tampered bundle:\n%s", v.out)
			}

			// A policy: keys per repository; an image no scope matches is refused.
			pol := filepath.Join(t.TempDir(), "policy.yaml")
			os.WriteFile(pol, []byte(fmt.Sprintf("schema: kiln.verify-policy/v1\nkeys:\n  - scope: %s\n    key: %s\n  - scope: %s\n    key: %s\n", repo, k.cosignPub, repo, k.pkcs8Pub)), 0o644)
			if r := run(t, nil, kiln, "verify", ref1, ref2, "--key", pol); r.code != 0 {
				t.Fatalf("policy verify: exit %d\n%s%s", r.code, r.out, r.err)
			}
			other, _ := pushRandom(t, fmt.Sprintf("%s/kiln-sign-it/other%d:x", reg, run_))
			cosignSign(t, cosign, k.cosignKey, other)
			if r := run(t, nil, kiln, "verify", other, "--key", pol); r.code != 4 || !strings.Contains(r.err, "names no key") {
				t.Fatalf("policy without a scope for the repository: exit %d\n%s", r.code, r.err)
			}

			// host check --image reports the signature.
			h := run(t, nil, kiln, "host", "check", "--image", ref2, "--no-kernels", "--json", "--verify-key", k.cosignPub)
			var hr struct {
				Items []struct{ ID, Status, Summary string } `json:"items"`
			}
			_ = json.Unmarshal([]byte(h.out), &hr)
			found := false
			for _, it := range hr.Items {
				if it.ID == "signature" {
					found = true
					if it.Status != "pass" || !strings.Contains(it.Summary, d2.String()) {
						t.Errorf("host check signature item: %+v", it)
					}
				}
			}
			if !found {
				t.Fatalf("host check has no signature item:\n%s", h.out)
			}
		})
	}
}

// tamper copies the bundle signed for from, its statement rewritten to
// name to, as a referrer of to.
func tamper(t *testing.T, repoStr string, from, to v1.Hash) {
	t.Helper()
	repo, err := name.NewRepository(repoStr, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Referrers(repo.Digest(from.String()))
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	for _, m := range im.Manifests {
		img, err := remote.Image(repo.Digest(m.Digest.String()))
		if err != nil {
			continue
		}
		ls, _ := img.Layers()
		if len(ls) != 1 {
			continue
		}
		mt, _ := ls[0].MediaType()
		if string(mt) != sign.BundleMediaType {
			continue
		}
		rc, _ := ls[0].Compressed()
		b, _ := io.ReadAll(rc)
		rc.Close()
		var bundle map[string]any
		if err := json.Unmarshal(b, &bundle); err != nil {
			t.Fatal(err)
		}
		env := bundle["dsseEnvelope"].(map[string]any)
		p, _ := base64.StdEncoding.DecodeString(env["payload"].(string))
		p = bytes.ReplaceAll(p, []byte(from.Hex), []byte(to.Hex))
		env["payload"] = base64.StdEncoding.EncodeToString(p)
		nb, _ := json.Marshal(bundle)
		desc, err := remote.Head(repo.Digest(to.String()))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := sign.PushReferrer(context.Background(), repo, *desc, sign.BundleMediaType, nb, map[string]string{sign.BundlePredicateAnnotation: sign.CosignSignPredicate}); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no bundle referrer of %s", from)
}
