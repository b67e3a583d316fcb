package builder

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/client"

	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/convert"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
)

// RunOptions are a whole build once its flags are read: the solve's
// Options, and what comes before and after the solve (kiln build).
type RunOptions struct {
	// Options are the solve's; Client is Connect's.
	Options
	Plan   *recipes.Plan
	Inputs Inputs
	// Connect dials the BuildKit daemon and names its address; it is
	// called only when there is something to solve.
	Connect func(ctx context.Context) (*client.Client, string, error)
	// Push is --push, parsed once (Flags.Parse; Kind "" none): without
	// Rebuild the repository's content tag answers a build from the same
	// inputs, and a build adds it. Encodings is --compression as named
	// (both: gzip, and zstd beside it), part of the content digest.
	Push      layers.Ref
	Encodings string
	Rebuild   bool
	// Explain compares with ExplainAgainst (Kind "": Push's last push).
	Explain        bool
	ExplainAgainst layers.Ref
	// ErofsTo (--format erofs) is where the pushed image converted to
	// native EROFS layers goes ("" none), ErofsCompression inside them.
	ErofsTo          layers.Ref
	ErofsCompression erofs.Compression
	// SBOM attaches each pushed image's BOM (pinned inputs: Lock, or the
	// plan), attested in the index with Provenance, else a referrer;
	// Version names kiln as its tool.
	SBOM    bool
	Lock    *recipes.Lock
	Version string
	// Signer signs each pushed image and each wheel the build pushes
	// (nil: none).
	Signer *publish.Signer
	// Check, when set, runs on what the build wrote first (Outputs[0], a
	// registry image by digest) after the SBOMs and signatures.
	Check func(ctx context.Context, ref layers.Ref) error
}

// UsageError is a build the command line asked for that cannot be done
// as asked (Flags.Parse's mistakes, and one found after the solve: an
// EROFS variant of several platforms); a command exits 2 on it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Run builds: the content tag's answer (the image already built from the
// same inputs) or the solve, then the content tag, the EROFS variant,
// the SBOMs, the signatures, the Check and the explanation.
func Run(ctx context.Context, o RunOptions) (*Report, error) {
	if o.ErofsTo.Kind != "" {
		if err := erofs.Check(ctx); err != nil {
			return nil, err
		}
	}
	// The earlier image is read before the build moves its tag.
	ex, err := o.startExplain(ctx)
	if err != nil {
		return nil, err
	}
	content, res, err := o.answerExisting(ctx)
	if err != nil {
		return nil, err
	}
	attested := o.SBOM && o.Provenance != ""
	if attested {
		o.Attest = SBOMAttestations(o.Push.String(), o.Plan, o.Lock, o.Inputs, o.Version)
	}
	if res != nil {
		fmt.Fprintf(o.log(), "kiln: up to date: %s was built from these inputs (%s); --rebuild builds again\n", res.Digest, res.ContentTag)
	} else if res, err = o.solve(ctx); err != nil {
		return nil, err
	}
	if content != nil && !res.Reused {
		if err := content.TagPushed(ctx); err != nil {
			return nil, err
		}
		res.ContentTag, res.InputsDigest = content.Tag.String(), content.Digest
		fmt.Fprintf(o.log(), "kiln: content tag %s\n", content.Tag)
	}
	rep := &Report{Result: res, Name: o.Plan.Name, Push: o.Push.String(), Provenance: o.Provenance, Attested: attested}
	for _, out := range o.Outputs {
		if !out.Pushes() {
			rep.To = append(rep.To, out.Ref.Raw)
		}
	}
	// Every image the build wrote goes through one publish chain: its
	// SBOM (as a referrer unless attested inside its index), its
	// signature; the EROFS variant is converted and written by it too.
	for _, p := range res.Pushed {
		h, err := v1.NewHash(p.Digest)
		if err != nil {
			return nil, fmt.Errorf("pushed %s: %v", p.Ref, err)
		}
		pp, err := o.publisher(p.Compression, !attested).Publish(ctx, publish.Pushed(h), p.Ref)
		if err != nil {
			return nil, err
		}
		rep.record(pp)
	}
	if o.ErofsTo.Kind != "" {
		p, pp, err := o.pushErofs(ctx, res.Pushed)
		if err != nil {
			return nil, err
		}
		res.Pushed = append(res.Pushed, p)
		rep.record(pp)
	}
	if o.Check != nil {
		if err := o.Check(ctx, writtenRef(o.Outputs[0], res.Digest)); err != nil {
			return nil, err
		}
	}
	if rep.Explained, err = ex.finish(ctx, res, o.lopts()); err != nil {
		return nil, err
	}
	return rep, nil
}

// writtenRef is the image out holds: REPO@digest, oci:DIR or
// docker-archive:FILE.
func writtenRef(out Output, digest string) layers.Ref {
	switch out.Ref.Kind {
	case layers.KindRegistry:
		return layers.RegistryRef(out.Ref.Name.Context().Digest(digest))
	case layers.KindDockerArchive:
		return layers.Ref{Kind: layers.KindDockerArchive, Raw: "docker-archive:" + out.Ref.Path, Path: out.Ref.Path}
	}
	return layers.LayoutRef(out.Ref.Path, "")
}

// log is where Run says what it does: ProgressOut.
func (o *RunOptions) log() io.Writer {
	if o.ProgressOut == nil {
		return os.Stderr
	}
	return o.ProgressOut
}

// lopts are the options every registry read and write of the run goes
// through (Registry, else the Insecure registries).
func (o *RunOptions) lopts() []registry.Option {
	if o.Registry == nil {
		return []registry.Option{registry.WithInsecureRegistries(o.Insecure...)}
	}
	return o.Registry
}

// FindContent looks up the Push repository's content tag of this build
// (FindContent).
func (o *RunOptions) FindContent(ctx context.Context) (*Content, error) {
	c, err := FindContent(ctx, o.Plan, DigestInputs{
		Inputs: o.Inputs, ContextDir: o.ContextDir, Platforms: o.Platforms, Compression: o.Encodings, MaxLayerSize: o.MaxLayerSize, NoProbes: o.NoProbes,
	}, o.Push, o.Encodings == "both", o.lopts()...)
	if err != nil {
		return nil, fmt.Errorf("content tag: %w", err)
	}
	return c, nil
}

// answerExisting looks up the Push repository's content tag of this
// build (unless Rebuild). When it holds images built from the same
// inputs, and checked to be (their kiln labels carry this recipe's hash
// and lock digest), the Push tags are pointed at them and their result
// is the build's: a no-op rebuild solves nothing. A build that also
// writes --to outputs is built (its files come from the solve), and a
// failed lookup is said and the build goes on. content is nil without
// Push or with Rebuild; else the build adds the content tag to what it
// pushes.
func (o *RunOptions) answerExisting(ctx context.Context) (content *Content, reused *Result, err error) {
	if o.Push.Kind == "" || o.Rebuild {
		return nil, nil, nil
	}
	content, err = o.FindContent(ctx)
	if err != nil {
		fmt.Fprintf(o.log(), "kiln: building: the content tag could not be looked up (%v)\n", err)
		return nil, nil, nil
	}
	if content.Existing == nil {
		return content, nil, nil
	}
	for _, out := range o.Outputs {
		if !out.Pushes() {
			fmt.Fprintf(o.log(), "kiln: building: %s holds these inputs' image, but --to %s is written by the build\n", content.Tag, out)
			return content, nil, nil
		}
	}
	if err := content.Verify(ctx, o.Inputs); err != nil {
		fmt.Fprintf(o.log(), "kiln: building: not reusing %v\n", err)
		return content, nil, nil
	}
	if err := content.Reuse(ctx); err != nil {
		return nil, nil, err
	}
	return content, content.Reused(o.Compression), nil
}

// solve builds the plan on the daemon Connect dials, after checking
// where the image goes.
func (o *RunOptions) solve(ctx context.Context) (*Result, error) {
	if len(o.Outputs) == 0 && len(o.CacheTo) == 0 {
		fmt.Fprintln(o.log(), "warning: no --push or --to: the image is built and tested but stays in the builder's cache")
	}
	// Where the image goes is checked before the build, not after it.
	for _, out := range o.Outputs {
		flag := "--output"
		if out.Pushes() {
			flag = "--push"
		}
		if err := layers.CheckTarget(ctx, flag, out.Ref, o.lopts()...); err != nil {
			return nil, err
		}
	}
	c, addr, err := o.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	fmt.Fprintf(o.log(), "kiln: building %s on %s\n", o.Plan.Name, addr)
	so := o.Options
	so.Client = c
	if so.WheelCache != nil && o.Signer != nil && o.Signer.Key != nil && so.WheelCache.Sign == nil {
		// The wheels the build pushes are signed as its images are.
		pub := publish.WithSign(publish.Writer(), o.Signer)
		so.WheelCache.Sign = func(ctx context.Context, e *wheelcache.Entry) error {
			d, err := v1.NewHash(e.Manifest)
			if err != nil {
				return err
			}
			_, err = pub.Publish(ctx, publish.Pushed(d), e.Ref)
			return err
		}
	}
	res, err := Build(ctx, o.Plan, o.Inputs, so)
	if res != nil {
		warnWheels(o.log(), res.Wheels)
	}
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", o.Plan.Name, err)
	}
	return res, nil
}

// pushErofs converts the image the build pushed (the zstd one when there
// are two: the same tars) into native EROFS layers and pushes it to
// ErofsTo through the build's publish chain (its SBOM referrer and
// signature), returning it as one more pushed image and what was
// published.
func (o *RunOptions) pushErofs(ctx context.Context, pushed []Pushed) (Pushed, *publish.Published, error) {
	if len(pushed) == 0 {
		return Pushed{}, nil, fmt.Errorf("--format erofs: the build pushed nothing to convert")
	}
	src := pushed[len(pushed)-1]
	if len(src.Images) > 1 {
		return Pushed{}, nil, &UsageError{fmt.Errorf("--format erofs: the build pushed %d platforms; build one --platform at a time", len(src.Images))}
	}
	digest := src.Digest
	for _, d := range src.Images {
		// An index of the image and its attestations: the image itself.
		digest = d
	}
	lopts := o.lopts()
	ref := layers.RegistryRef(src.Ref.Name.Context().Digest(digest))
	li, err := layers.Open(ctx, ref, lopts...)
	if err != nil {
		return Pushed{}, nil, err
	}
	defer li.Close()
	img, err := li.V1(ctx)
	if err != nil {
		return Pushed{}, nil, err
	}
	fmt.Fprintf(o.log(), "kiln: converting %s to EROFS (%s inside)\n", ref.Raw, o.ErofsCompression)
	v, err := publish.PublishVariant(ctx, o.publisher("erofs", true), publish.Erofs(convert.Options{}, o.ErofsCompression), img, o.ErofsTo)
	if err != nil {
		return Pushed{}, nil, err
	}
	return Pushed{Ref: o.ErofsTo, Compression: "erofs", Digest: v.Digest.String()}, v.Published, nil
}

// publisher is the chain an image the build wrote goes through
// (BuildKit's as publish.Pushed: already written): with --sbom, its BOM as
// an OCI referrer when sbom (not attested inside the pushed index),
// naming its compression; with --sign-key, its signature.
func (o *RunOptions) publisher(compression string, sbom bool) publish.Interface {
	pub := publish.Writer(o.lopts()...)
	if o.SBOM && sbom {
		pub = publish.WithSBOMReferrer(pub, bomReferrer(o.Plan, o.Lock, o.Inputs, compression), o.Version, o.lopts()...)
	}
	return publish.WithSign(pub, o.Signer)
}

// record adds what publishing one image attached to the report: its SBOM
// referrer, its signature.
func (rep *Report) record(p *publish.Published) {
	if p.SBOM != "" {
		rep.SBOMs = append(rep.SBOMs, p.SBOM)
	}
	if p.Signed != nil {
		rep.Signed = append(rep.Signed, p.Signed)
	}
}

// explainer is Explain: the earlier image, read before the build moves
// its tag, and this build's record.
type explainer struct {
	against *Against
	now     *Record
}

// startExplain reads the image Explain compares with: ExplainAgainst,
// else Push's last push.
func (o *RunOptions) startExplain(ctx context.Context) (*explainer, error) {
	if !o.Explain {
		return nil, nil
	}
	ref := o.ExplainAgainst
	if ref.Kind == "" {
		ref = o.Push
	}
	now, err := NewRecord(o.Plan, o.Inputs)
	if err != nil {
		return nil, err
	}
	// The earlier image of the platform built first (the one the record
	// and the cost are of), not an index's first image.
	lopts := o.lopts()
	if p, err := layers.ParsePlatform(buildPlatforms(o.Plan, o.Platforms)[0]); err == nil {
		lopts = append(slices.Clip(lopts), layers.WithPlatform(p))
	}
	a, err := ReadAgainst(ctx, ref, lopts...)
	if err != nil {
		return nil, fmt.Errorf("--explain: %w", err)
	}
	return &explainer{against: a, now: now}, nil
}

// finish explains res: per step against the earlier image, and the cost
// of what it pushed.
func (x *explainer) finish(ctx context.Context, res *Result, lopts []registry.Option) (*Explanation, error) {
	if x == nil {
		return nil, nil
	}
	e := x.against.Explain(x.now)
	e.Reused, e.ContentTag = res.Reused, res.ContentTag
	if len(res.Pushed) > 0 && x.against.Digest != "" {
		if err := x.against.Measure(ctx, e, res.Pushed, lopts...); err != nil {
			return nil, fmt.Errorf("--explain: %w", err)
		}
	}
	return e, nil
}
