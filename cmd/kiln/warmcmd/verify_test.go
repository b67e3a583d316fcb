package warmcmd

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/sign"
)

// kiln warm --verify-key: a signed image warms (exit 0, the signature in
// the report); under a key that did not sign it, a key file that is not
// one, and an unreadable policy, warm refuses with its exit codes (4 for
// the signature, 2 for the flag) before any blob reaches the target.
func TestWarmVerifyKey(t *testing.T) {
	ref, _ := testimage.ReferrersRegistry(t)
	ks := cmdtest.NewKeys(t)
	k, pub, otherPub, priv := ks.Signer, ks.Pub, ks.OtherPub, ks.Key
	dir := t.TempDir()
	if _, err := sign.Sign(context.Background(), ref, k, sign.SignOptions{Format: sign.FormatBundle}); err != nil {
		t.Fatal(err)
	}
	blobs := func(oci string) int {
		m, _ := filepath.Glob(filepath.Join(oci, "blobs", "sha256", "*"))
		return len(m)
	}
	for _, tc := range []struct {
		name, key string
		code      int
		want      string
	}{
		{"wrong key", otherPub, cmdutil.ExitUnverified, "refused before fetching any layer"},
		{"private key given", priv, cmdutil.ExitUsage, "PUBLIC KEY"},
		{"no such file", filepath.Join(dir, "none.pub"), cmdutil.ExitUsage, "none.pub"},
	} {
		oci := filepath.Join(t.TempDir(), "oci")
		code, out, errOut := run(t, "warm", ref, "--target", "oci:"+oci, "--verify-key", tc.key, "--json", "--progress", "none")
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, code, errOut, tc.code, tc.want)
		}
		var rep struct{ Error string }
		if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Error == "" {
			t.Errorf("%s: --json printed %q (%v), want one object with the error", tc.name, out, err)
		}
		if n := blobs(oci); n != 0 {
			t.Errorf("%s: %d blobs in the target after a refusal", tc.name, n)
		}
	}
	oci := filepath.Join(t.TempDir(), "oci")
	code, out, errOut := run(t, "warm", ref, "--target", "oci:"+oci, "--verify-key", pub, "--json", "--progress", "none")
	var rep struct {
		Signatures []struct {
			Verified bool `json:"verified"`
		} `json:"signatures"`
	}
	if code != cmdutil.ExitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Signatures) != 1 || !rep.Signatures[0].Verified {
		t.Fatalf("signed image: exit %d\n%s\n%s", code, out, errOut)
	}
	if blobs(oci) == 0 {
		t.Errorf("signed image: nothing warmed into %s", oci)
	}
}

// N1 from the command line: REPO:TAG-zstd holds TAG's config over other
// zstd layers, unsigned. kiln warm REPO:TAG --verify-key checks TAG's
// signature (the variant stands in for TAG only as TAG), finds the
// variant's layers are not TAG's as it warms them, and warms TAG as
// named: exit 0, READY, a note saying why; it never fails TAG for the
// variant's missing signature.
func TestWarmVerifyKeySetsAsideFalseVariant(t *testing.T) {
	ref, dg := testimage.ReferrersRegistry(t)
	ks := cmdtest.NewKeys(t)
	if _, err := sign.Sign(context.Background(), ref, ks.Signer, sign.SignOptions{Format: sign.FormatBundle}); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	evil := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	evil, err = mutate.AppendLayers(evil, testimage.Layer(t, []testimage.Entry{testimage.File("usr/bin/hidden-backdoor", []byte("owned"))}, "zstd"))
	if err == nil {
		evil, err = mutate.ConfigFile(evil, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	if a, b := must(img.ConfigName()), must(evil.ConfigName()); a != b {
		t.Fatalf("the attack needs TAG's config: %s, %s", a, b)
	}
	testimage.Push(t, ref+"-zstd", evil)
	for _, args := range [][]string{{"--verify-key", ks.Pub}, nil} {
		oci := filepath.Join(t.TempDir(), "oci")
		code, out, errOut := run(t, append([]string{"warm", ref, "--target", "oci:" + oci, "--json", "--progress", "none"}, args...)...)
		var rep struct {
			Ready  bool `json:"ready"`
			Images []struct {
				Digest, Source, Note string
			} `json:"images"`
		}
		if code != cmdutil.ExitOK || json.Unmarshal([]byte(out), &rep) != nil || !rep.Ready || len(rep.Images) != 1 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errOut)
		}
		im := rep.Images[0]
		if im.Digest != dg.String() || !strings.Contains(im.Note, "not the zstd form") || im.Source != "" {
			t.Errorf("%v: image %+v; want TAG's digest %s and a note", args, im, dg)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
