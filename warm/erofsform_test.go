package warm_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/sign"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/ocilayout"
)

// erofsFixture is REPO:TAG (an index: amd64 and arm64) and an image with
// native EROFS layers (erofs, for arch) pushed at REPO:TAG-erofs; name
// says what TAG's amd64 manifest names as its EROFS form: "" nothing,
// else a function of the EROFS image's digest.
type erofsFixture struct {
	ref   string
	erofs v1.Hash // the manifest digest pushed at TAG-erofs
	img   v1.Image
}

func pushErofsFixture(t *testing.T, arch string, name func(v1.Hash) string) erofsFixture {
	t.Helper()
	reg := warmtest.NewRegistry(t)
	ref := reg.Host + "/kiln-warm/app:v1"
	tarImg := testimage.Image(t, testimage.Config{Cmd: []string{"/serve"}},
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/hello", []byte("hi"))}, "gzip"))
	// Not real EROFS images: resolving reads no layer, and a warm hashes
	// them as the decoded stream their diff ID names.
	erofsImg := testimage.ImageFor(t, arch, testimage.Config{Cmd: []string{"/serve"}},
		testimage.RawLayer([]byte("an EROFS image of etc/hello"), layers.ErofsMediaType))
	dg, err := erofsImg.Digest()
	if err != nil {
		t.Fatal(err)
	}
	testimage.Push(t, ref+layers.ErofsTagSuffix, erofsImg)
	if name != nil {
		h, err := v1.NewHash(name(dg))
		if err != nil {
			t.Fatal(err)
		}
		tarImg = layers.NameErofsForm(tarImg, h)
	}
	arm := testimage.ImageFor(t, "arm64", testimage.Config{}, warmtest.RandomLayer(t, "arm.bin", 1<<10, 2))
	testimage.PushIndex(t, ref, testimage.Index(t, tarImg, arm))
	return erofsFixture{ref: ref, erofs: dg, img: erofsImg}
}

func itself(h v1.Hash) string { return h.String() }

// The rule: with the target unpacking into the EROFS snapshotter (Erofs)
// and the compression left to warm, TAG-erofs is warmed for TAG only when
// TAG's manifest for the platform names exactly the manifest at
// TAG-erofs, of the same platform; otherwise TAG is warmed as it would
// be, with a note saying why TAG-erofs was ignored.
func TestResolveErofsForm(t *testing.T) {
	ctx := context.Background()
	other := func(v1.Hash) string { return "sha256:" + strings.Repeat("ab", 32) }
	for _, tc := range []struct {
		name string
		arch string
		by   func(v1.Hash) string
		o    warm.ResolveOptions
		want bool   // the EROFS form is taken
		note string // else the note says this ("" no note)
	}{
		{name: "named", arch: "amd64", by: itself, o: warm.ResolveOptions{Erofs: true}, want: true},
		{name: "not named", arch: "amd64", o: warm.ResolveOptions{Erofs: true}, note: "names no EROFS form (no " + layers.AnnotationErofsManifest},
		{name: "another digest named", arch: "amd64", by: other, o: warm.ResolveOptions{Erofs: true}, note: "names sha256:abab"},
		{name: "another platform", arch: "arm64", by: itself, o: warm.ResolveOptions{Erofs: true}, note: "linux/arm64"},
		// Not an EROFS target (--snapshotter overlayfs, an OCI layout):
		// TAG-erofs is not even looked at.
		{name: "no EROFS target", arch: "amd64", by: itself, o: warm.ResolveOptions{}},
		{name: "--compression gzip", arch: "amd64", by: itself, o: warm.ResolveOptions{Erofs: true, Compression: warm.CompressionGzip}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := pushErofsFixture(t, tc.arch, tc.by)
			img := warmtest.Resolve(t, ctx, warmtest.FastSource(), tc.o, f.ref).Images[0]
			if !tc.want {
				t.Logf("note: %s", img.Note)
				if img.Variant() || img.Form != "" || img.Source != img.Name {
					t.Fatalf("took %s (form %q), want %s as named", img.Source, img.Form, img.Name)
				}
				if tc.note == "" && img.Note != "" || !strings.Contains(img.Note, tc.note) || tc.note != "" && !strings.HasPrefix(img.Note, f.ref+layers.ErofsTagSuffix+" ignored: ") {
					t.Fatalf("note %q, want one with %q", img.Note, tc.note)
				}
				return
			}
			if img.Form != warm.FormErofs || img.Source != f.ref+layers.ErofsTagSuffix || !img.Variant() || img.Note != "" {
				t.Fatalf("image %+v: want the EROFS form, from %s", img, f.ref+layers.ErofsTagSuffix)
			}
			if img.Manifest.Digest.String() != f.erofs.String() || len(img.Layers) != 1 || img.Layers[0].MediaType != layers.ErofsMediaType {
				t.Fatalf("manifest %s layers %+v, want TAG-erofs's %s", img.Manifest.Digest, img.Layers, f.erofs)
			}
			// The signature gate checks TAG as named: its index.
			named := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, f.ref).Images[0]
			if img.Named.Digest != named.Target.Digest {
				t.Fatalf("named %s, want TAG's index %s", img.Named.Digest, named.Target.Digest)
			}
		})
	}
}

// erofsTarget is an OCI layout that says it unpacks into the EROFS
// snapshotter (warm.ErofsChecker) and unpacks nothing.
type erofsTarget struct {
	*ocilayout.OCILayout
	erofs bool
}

func (t erofsTarget) ErofsUnpack(context.Context) bool        { return t.erofs }
func (t erofsTarget) Unpack(context.Context, *warm.Set) error { return nil }

// Run asks the target (with --unpack only) whether its unpack mounts EROFS
// layers, warms the EROFS form TAG names, and the report says so.
func TestRunWarmsErofsFormNamed(t *testing.T) {
	ctx := context.Background()
	f := pushErofsFixture(t, "amd64", itself)
	for _, tc := range []struct {
		name          string
		erofs, unpack bool
		want          string
	}{
		{"EROFS unpack", true, true, warm.FormErofs},
		{"no --unpack", true, false, ""},
		{"overlayfs unpack", false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ocilayout.New(filepath.Join(t.TempDir(), "oci"))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := warm.Run(ctx, warm.RunOptions{
				Target: erofsTarget{l, tc.erofs}, Refs: testkit.Refs(t, f.ref),
				Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
				Options: warm.Options{Unpack: tc.unpack},
			})
			if err != nil || !rep.Ready {
				t.Fatalf("ready=%v err=%v", rep != nil && rep.Ready, err)
			}
			im := rep.Images[0]
			if im.Form != tc.want {
				t.Fatalf("report image %+v: want form %q", im, tc.want)
			}
			if tc.want == "" {
				return
			}
			raw, _ := json.Marshal(im)
			if im.Source != f.ref+layers.ErofsTagSuffix || !strings.Contains(string(raw), `"form":"erofs"`) {
				t.Fatalf("report image %s", raw)
			}
		})
	}
}

// An EROFS form TAG names whose layer is not what its own config says
// (a diff ID that lies) is set aside as it is warmed: TAG is warmed as
// named, READY, with a note.
func TestRunSetsAsideErofsFormOverOtherLayers(t *testing.T) {
	ctx := context.Background()
	reg := warmtest.NewRegistry(t)
	ref := reg.Host + "/kiln-warm/app:v1"
	tarImg := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("etc/hello", []byte("hi"))}, "gzip"))
	lie := testimage.DiffIDLie(t, testimage.Image(t, testimage.Config{},
		testimage.RawLayer([]byte("not the EROFS image the config names"), types.MediaType(layers.ErofsMediaType))), 0,
		v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("cd", 32)})
	dg, err := lie.Digest()
	if err != nil {
		t.Fatal(err)
	}
	testimage.Push(t, ref+layers.ErofsTagSuffix, lie)
	testimage.Push(t, ref, layers.NameErofsForm(tarImg, dg))
	l, err := ocilayout.New(filepath.Join(t.TempDir(), "oci"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := warm.Run(ctx, warm.RunOptions{
		Target: erofsTarget{l, true}, Refs: testkit.Refs(t, ref),
		Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
		Options: warm.Options{Unpack: true},
	})
	if err != nil || !rep.Ready {
		t.Fatalf("ready=%v err=%v", rep != nil && rep.Ready, err)
	}
	im := rep.Images[0]
	t.Logf("note: %s", im.Note)
	if im.Form != "" || im.Source != "" || !strings.Contains(im.Note, "is not the EROFS form of") {
		t.Fatalf("report image %+v: want TAG as named, with a note", im)
	}
}

// --verify-key checks TAG's signature when TAG's EROFS form is warmed:
// TAG's signed digest covers the manifest that names the EROFS form, so
// an unsigned TAG-erofs is warmed for a signed TAG, and a TAG signed by
// another key is refused before any layer is fetched.
func TestRunVerifiesTagForErofsForm(t *testing.T) {
	ctx := context.Background()
	f := pushErofsFixture(t, "amd64", itself)
	k, err := sign.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	other, err := sign.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sign.Sign(ctx, f.ref, k, sign.SignOptions{Format: sign.FormatBundle}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		key    *sign.Signer
		signed bool
	}{{"TAG's key", k, true}, {"another key", other, false}} {
		t.Run(tc.name, func(t *testing.T) {
			pub := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".pub")
			if err := os.WriteFile(pub, tc.key.Public().PEM(), 0o644); err != nil {
				t.Fatal(err)
			}
			pol, err := sign.LoadPolicy(pub)
			if err != nil {
				t.Fatal(err)
			}
			l, err := ocilayout.New(filepath.Join(t.TempDir(), "oci"))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := warm.Run(ctx, warm.RunOptions{
				Target: erofsTarget{l, true}, Refs: testkit.Refs(t, f.ref), Policy: pol,
				Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
				Options: warm.Options{Unpack: true},
			})
			if !tc.signed {
				var ue *warm.UnverifiedError
				if !errors.As(err, &ue) || rep == nil || rep.FetchedBytes != 0 {
					t.Fatalf("err = %v, report %+v: want it refused, nothing fetched", err, rep)
				}
				return
			}
			if err != nil || !rep.Ready || rep.Images[0].Form != warm.FormErofs || len(rep.Signatures) != 1 || !rep.Signatures[0].Verified {
				t.Fatalf("err = %v, report %+v", err, rep)
			}
		})
	}
}
