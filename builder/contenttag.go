package builder

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
)

// DigestInputs are what, besides the plan, decides a build's result.
type DigestInputs struct {
	Inputs      Inputs
	ContextDir  string   // the recipe's directory (app files)
	Platforms   []string // default: the plan's, else linux/amd64 (see Graphs)
	Compression string
	// MaxLayerSize splits installs by the wheelhouse (Options.MaxLayerSize).
	MaxLayerSize int64
	NoProbes     bool
	// Resolve pins a base image reference to digests; nil uses the
	// registry (layers.PlatformDigests).
	Resolve func(ctx context.Context, ref string) (string, error)
}

// InputsDigest is a content address for a build: the LLB of every platform
// (which pins the steps, wheels and config), the base images resolved to
// digests (a moved tag is a different build), and the bytes of the app
// files, which the graph names only by path. Equal digests mean equal
// images, which is what lets --skip-existing skip a build.
func InputsDigest(ctx context.Context, plan *recipes.Plan, d DigestInputs) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "kiln-inputs-v1\n")
	graphs, err := Graphs(plan, d.Inputs, d.Platforms)
	if err != nil {
		return "", err
	}
	for _, g := range graphs {
		def, err := g.Marshal(ctx, g.Target(d.NoProbes))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "graph %s %s\n", PlatformString(g.Platform), DefinitionDigest(def))
	}
	resolve := d.Resolve
	if resolve == nil {
		resolve = func(ctx context.Context, ref string) (string, error) {
			dg, _, err := layers.PlatformDigests(ctx, ref)
			return dg, err
		}
	}
	for _, ref := range []string{plan.BaseImages.Devel, plan.BaseImages.Runtime} {
		if ref == "" {
			continue
		}
		dg, err := resolve(ctx, ref)
		if err != nil {
			return "", fmt.Errorf("resolving base image %s: %w", ref, err)
		}
		fmt.Fprintf(h, "base %s %s\n", ref, dg)
	}
	cfg, err := json.Marshal(struct {
		Plan         *recipes.Plan
		Inputs       Inputs
		Compression  string
		NoProbes     bool
		MaxLayerSize int64 `json:",omitempty"` // 0 keeps earlier addresses
	}{plan, d.Inputs, d.Compression, d.NoProbes, d.MaxLayerSize})
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "config %x\n", sha256.Sum256(cfg))
	if plan.App != nil {
		for _, c := range plan.App.Files {
			if err := hashSource(h, d.ContextDir, c.Src); err != nil {
				return "", fmt.Errorf("app file %s: %w", c.Src, err)
			}
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// AppDigest is the digest of the plan's app files under dir, the bytes
// the graph names only by path ("" without app files).
func AppDigest(p *recipes.Plan, dir string) (string, error) {
	if p.App == nil || len(p.App.Files) == 0 {
		return "", nil
	}
	h := sha256.New()
	for _, c := range p.App.Files {
		if err := hashSource(h, dir, c.Src); err != nil {
			return "", fmt.Errorf("app file %s: %w", c.Src, err)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// ContentTag is the registry tag under which a build with inputs digest d
// is pushed, next to the user's tag.
func ContentTag(d string) string {
	return "kiln-" + strings.TrimPrefix(d, "sha256:")[:24]
}

// hashSource hashes every file under dir/src (a path or a glob), in a
// stable order: relative path, mode and content.
func hashSource(w io.Writer, dir, src string) error {
	matches, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(src, "/"))))
	if err != nil {
		return err
	}
	if len(matches) == 0 {
		return fmt.Errorf("no such file in %s", dir)
	}
	sort.Strings(matches)
	for _, m := range matches {
		root, err := filepath.EvalSymlinks(m)
		if err != nil {
			return err
		}
		err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			info, err := e.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s\x00%s\x00%o\x00%d\x00", src, filepath.ToSlash(rel), info.Mode(), info.Size())
			switch {
			case info.Mode().IsRegular():
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				if _, err := io.Copy(w, f); err != nil {
					return err
				}
			case info.Mode()&fs.ModeSymlink != 0:
				t, err := os.Readlink(p)
				if err != nil {
					return err
				}
				io.WriteString(w, t)
			}
			_, err = w.Write([]byte{0})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Content is a build's content-addressed tag in the --push repository:
// REPO:kiln-<inputs digest prefix> (and its zstd variant when the build
// pushes both), looked up before a build so that equal inputs are not
// built twice (--skip-existing).
type Content struct {
	// Digest is the inputs digest.
	Digest string
	// Tag is REPO:kiln-<digest prefix>; Push is the user's --push.
	Tag  name.Tag
	Push name.Reference
	// Existing is the image already pushed under Tag (nil: none, or
	// only half of a gzip + zstd pair).
	Existing, ZstdExisting *Manifest
	zstd                   bool
	client                 *registry.Client
}

// Manifest is a manifest or index read whole from a registry, verified
// (registry.Client.Manifest): what a tag points at, tagged again as it is.
type Manifest struct {
	Raw  []byte
	Desc v1.Descriptor
}

// RawManifest and MediaType make a Manifest what remote.Tag writes.
func (m *Manifest) RawManifest() ([]byte, error)        { return m.Raw, nil }
func (m *Manifest) MediaType() (types.MediaType, error) { return m.Desc.MediaType, nil }

// manifest reads what ref names through c; nil, nil when the registry
// has no such manifest.
func manifest(ctx context.Context, c *registry.Client, ref name.Reference) (*Manifest, error) {
	raw, d, err := c.Manifest(ctx, ref)
	if registry.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("looking up %s: %v", ref, registry.RedactError(err))
	}
	return &Manifest{Raw: raw, Desc: d}, nil
}

// FindContent computes the inputs digest of a build of plan pushed to pr
// (a registry reference, parsed once by the caller with lopts) and looks
// its content tag up; zstd says the build pushes a zstd variant too (both
// must exist for the build to be skipped).
func FindContent(ctx context.Context, plan *recipes.Plan, d DigestInputs, pr layers.Ref, zstd bool, lopts ...registry.Option) (*Content, error) {
	if pr.Kind != layers.KindRegistry || pr.Name == nil {
		return nil, fmt.Errorf("%s: content tags live in a registry", pr)
	}
	if d.Resolve == nil {
		d.Resolve = func(ctx context.Context, ref string) (string, error) {
			dg, _, err := layers.PlatformDigests(ctx, ref, lopts...)
			return dg, err
		}
	}
	dg, err := InputsDigest(ctx, plan, d)
	if err != nil {
		return nil, err
	}
	// One client for the --push repository, whose token may push, looks
	// the tags up and moves them (Reuse, TagPushed): one login.
	rc, err := registry.ClientFor(ctx, pr.Name.Context(), append(lopts[:len(lopts):len(lopts)], registry.WithPush())...)
	if err != nil {
		return nil, fmt.Errorf("looking up %s: %v", pr.Name.Context().Tag(ContentTag(dg)), registry.RedactError(err))
	}
	c := &Content{Digest: dg, Push: pr.Name, client: rc, zstd: zstd}
	c.Tag = pr.Name.Context().Tag(ContentTag(dg))
	if c.Existing, err = manifest(ctx, rc, c.Tag); err != nil {
		return nil, err
	}
	if c.zstd && c.Existing != nil {
		if c.ZstdExisting, err = manifest(ctx, rc, layers.ZstdTag(c.Tag)); err != nil {
			return nil, err
		}
		if c.ZstdExisting == nil {
			c.Existing = nil // half there: build (it is cached)
		}
	}
	return c, nil
}

// Reuse points the --push tag (and its zstd variant) at the image already
// built from the same inputs, without building.
func (c *Content) Reuse(ctx context.Context) error {
	if t, ok := c.Push.(name.Tag); ok && t.String() != c.Tag.String() {
		if err := remote.Tag(t, c.Existing, c.client.Remote(ctx)...); err != nil {
			return fmt.Errorf("tagging %s: %v", t, err)
		}
		if c.ZstdExisting != nil {
			if err := remote.Tag(layers.ZstdTag(t), c.ZstdExisting, c.client.Remote(ctx)...); err != nil {
				return fmt.Errorf("tagging %s: %v", layers.ZstdTag(t), err)
			}
		}
	}
	return nil
}

// TagPushed adds the content tag (and its zstd variant) to what the build
// just pushed.
func (c *Content) TagPushed(ctx context.Context) error {
	ropts := c.client.Remote(ctx)
	tag := func(from name.Reference, to name.Tag) error {
		m, err := manifest(ctx, c.client, from)
		if err == nil && m == nil {
			err = errors.New("no such manifest")
		}
		if err != nil {
			return fmt.Errorf("reading back %s: %v", from, err)
		}
		if err := remote.Tag(to, m, ropts...); err != nil {
			return fmt.Errorf("tagging %s: %v", to, err)
		}
		return nil
	}
	if err := tag(c.Push, c.Tag); err != nil {
		return err
	}
	if t, ok := c.Push.(name.Tag); ok && c.zstd {
		return tag(layers.ZstdTag(t), layers.ZstdTag(c.Tag))
	}
	return nil
}

// Verify checks that the images under the content tag were built from
// these inputs before they answer for a build: every image (each platform
// of an index; attestation manifests aside), gzip and zstd variants both,
// has a config whose kiln labels carry this recipe's hash and this lock's
// digest. A content tag pointing elsewhere (pushed by hand, or an image
// kiln did not build) is no answer. Manifests and configs are read
// through the repository's client, verified and bounded (layers.Walk).
func (c *Content) Verify(ctx context.Context, in Inputs) error {
	for _, m := range []*Manifest{c.Existing, c.ZstdExisting} {
		if m == nil {
			continue
		}
		cfgs, err := c.configs(ctx, m)
		if err != nil {
			return fmt.Errorf("%s: %v", c.Tag, err)
		}
		for _, cf := range cfgs {
			for _, l := range []struct{ key, want string }{{layers.LabelRecipeHash, in.RecipeHash}, {layers.LabelLockDigest, in.LockDigest}} {
				if got := cf.Config.Labels[l.key]; got != l.want {
					return fmt.Errorf("%s (%s): label %s is %q, these inputs' is %q", c.Tag, m.Desc.Digest, l.key, got, l.want)
				}
			}
		}
	}
	return nil
}

// configs are the configs of the images m names: m itself, or every
// image of an index but its attestation manifests.
func (c *Content) configs(ctx context.Context, m *Manifest) ([]*v1.ConfigFile, error) {
	ref := layers.Ref{Raw: c.Tag.String()}
	root := layers.Raw{Desc: m.Desc, Bytes: m.Raw}
	if !m.Desc.MediaType.IsIndex() {
		rt, err := layers.Walk(ctx, ref, c.client, root, v1.Platform{}, nil)
		if err != nil {
			return nil, err
		}
		return []*v1.ConfigFile{rt.ConfigFile}, nil
	}
	im, err := v1.ParseIndexManifest(bytes.NewReader(m.Raw))
	if err != nil {
		return nil, err
	}
	var out []*v1.ConfigFile
	for _, d := range im.Manifests {
		if layers.IsAttestation(d.Annotations) || !d.MediaType.IsImage() {
			continue
		}
		raw, err := layers.ReadManifest(ctx, c.client, d)
		if err != nil {
			return nil, err
		}
		rt, err := layers.Walk(ctx, ref, c.client, layers.Raw{Desc: d, Bytes: raw}, v1.Platform{}, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, rt.ConfigFile)
	}
	if len(out) == 0 {
		return nil, errors.New("an index with no image")
	}
	return out, nil
}

// Reused is what a build answered from its content tag reports, in the
// shape of a built one's Result: the --push tag (in compression comp) and
// its zstd variant, with the digests they now point at.
func (c *Content) Reused(comp string) *Result {
	res := &Result{Reused: true, ContentTag: c.Tag.String(), InputsDigest: c.Digest}
	add := func(ref name.Reference, comp string, d *Manifest) {
		pu := Pushed{Ref: layers.RegistryRef(ref), Compression: comp, Digest: d.Desc.Digest.String()}
		if d.Desc.MediaType.IsIndex() {
			if im, err := v1.ParseIndexManifest(bytes.NewReader(d.Raw)); err == nil {
				pu.Images = map[string]string{}
				for _, m := range im.Manifests {
					if m.Platform != nil && !layers.IsAttestation(m.Annotations) {
						pu.Images[m.Platform.String()] = m.Digest.String()
					}
				}
			}
		}
		res.Pushed = append(res.Pushed, pu)
	}
	add(c.Push, comp, c.Existing)
	if t, ok := c.Push.(name.Tag); ok && c.ZstdExisting != nil {
		add(layers.ZstdTag(t), "zstd", c.ZstdExisting)
	}
	res.Digest = c.Existing.Desc.Digest.String()
	return res
}
