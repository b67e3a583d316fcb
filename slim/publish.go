package slim

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/client"

	"github.com/kiln-build/kiln/convert"
	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sbom"
)

// PublishOptions say where Publish writes a rewrite and what it does
// before and while it writes.
type PublishOptions struct {
	// Compressions are the encodings written, Dests where each goes (the
	// first is the destination as named, --to).
	Compressions []layers.Compression
	Dests        []layers.Ref
	// Archive says the destination is a docker archive: its layers are
	// plain tars, reported as uncompressed.
	Archive bool
	// Labels go on every image's config (the weights volume's).
	Labels map[string]string
	// EStargz writes the image alone, re-laid as eStargz, to Dests[0];
	// with a Probe its startup set is what the probe opened.
	EStargz bool
	// StartupList, with a Probe, is a file the files the probe opened
	// are written to, one a line (whatever the format: an image slimmed
	// for kiln warm today can be re-laid as eStargz later by kiln convert
	// --startup-list, without a second slim).
	StartupList string
	// Probe, when its Cmd is set, runs in the image through BuildKit
	// before anything is written.
	Probe ProbeOptions
	// Erofs, when its Dest is set, publishes the image converted to
	// native EROFS layers there too (--format erofs).
	Erofs ErofsOptions
	// SBOM writes each destination as an index of the image and its
	// CycloneDX attestation (BuildKit's layout), naming Version as the
	// tool.
	SBOM    bool
	Version string
	// Signer signs each image written (nil: none).
	Signer *publish.Signer
	Layers []registry.Option
	// Log gets the probe's progress lines.
	Log io.Writer
}

// ProbeOptions are how Publish runs a probe before it writes.
type ProbeOptions struct {
	// Cmd is the probe; "" runs none.
	Cmd    string
	Client *client.Client
	// Registry, when set, is where the image is pushed for BuildKit to
	// pull (REG/kiln-slim-probe/image); else BuildKit reads it from an
	// OCI layout in WorkDir/probe and nothing is pushed.
	Registry string
	WorkDir  string
	// Tools makes the kiln-tools directory the recorder runs from (when
	// the probe records the files it opens: PublishOptions.records) and
	// its cleanup.
	Tools func() (string, func(), error)
}

// ErofsOptions are the EROFS variant Publish writes beside the others.
type ErofsOptions struct {
	// Dest is where it goes (REPO:TAG-erofs); the zero Ref writes none.
	Dest        layers.Ref
	Compression erofs.Compression
	// Jobs layers are converted at once; WorkDir holds the conversions.
	Jobs    int
	WorkDir string
}

// ProbeError is a probe that failed: nothing was written.
type ProbeError struct{ Err error }

func (e *ProbeError) Error() string { return e.Err.Error() }
func (e *ProbeError) Unwrap() error { return e.Err }

// ProbeRef is where a probe registry reg holds the probe image.
func ProbeRef(reg, tag string) string { return reg + "/kiln-slim-probe/image:" + tag }

// Publish writes the rewrite res in each encoding to its destination
// (probing it first, re-laid as eStargz with EStargz), with its SBOM and
// signed, through publish, and records each in res.Report. It returns
// what was written.
func Publish(ctx context.Context, res *Result, o PublishOptions) ([]v1.Image, error) {
	rep := res.Report
	imgs := make([]v1.Image, len(o.Compressions))
	for i, c := range o.Compressions {
		var err error
		if imgs[i], err = res.ImageFor(c, o.Labels); err != nil {
			return nil, err
		}
		dig, cn, err := names(imgs[i])
		if err != nil {
			return nil, err
		}
		if i == 0 {
			rep.Digest, rep.ImageID = dig.String(), cn.String()
		}
		if o.Archive {
			c = layers.Uncompressed
		}
		rep.Images = append(rep.Images, Published{Ref: o.Dests[i], Compression: string(c), Digest: dig.String()})
	}

	if o.Probe.Cmd != "" {
		// The last encoding: zstd when there is one, the faster to pull.
		startup, err := probeImage(ctx, imgs[len(imgs)-1], o)
		if err != nil {
			return nil, err
		}
		if o.records() {
			rep.StartupFiles = len(startup)
		}
		if o.StartupList != "" {
			if err := atomicfile.WriteFile(o.StartupList, []byte(strings.Join(startup, "\n")+"\n"), 0o644); err != nil {
				return nil, fmt.Errorf("--startup-list: %w", err)
			}
		}
		if o.EStargz {
			if err := res.AddEStargz(ctx, startup); err != nil {
				return nil, err
			}
		}
	} else if o.EStargz {
		rep.Warnings = append(rep.Warnings, "--format estargz without --probe: no startup set, every layer says no prefetch and the snapshotter fetches each file on first read; add --probe 'CMD' with the command the container starts with")
		if err := res.AddEStargz(ctx, nil); err != nil {
			return nil, err
		}
	}
	if o.EStargz {
		// What is written is the eStargz image alone, under Dests[0].
		img, err := res.ImageFor(layers.EStargz, o.Labels)
		if err != nil {
			return nil, err
		}
		dig, cn, err := names(img)
		if err != nil {
			return nil, err
		}
		imgs = []v1.Image{img}
		rep.Digest, rep.ImageID = dig.String(), cn.String()
		rep.Images = []Published{{Ref: o.Dests[0], Compression: string(layers.EStargz), Digest: dig.String()}}
	}
	dests := o.Dests
	if o.Erofs.Dest.Kind != "" {
		// From the last encoding's blobs (zstd when there is one): the
		// same tars, read from the work directory, diff IDs checked.
		// Converted before anything is written (a failed conversion
		// writes nothing); the loop below writes it with the others.
		er, err := publish.Erofs(convert.Options{Jobs: o.Erofs.Jobs, TempDir: o.Erofs.WorkDir}, o.Erofs.Compression)(ctx, imgs[len(imgs)-1])
		if err != nil {
			return nil, err
		}
		defer er.Close()
		dig, err := er.Image.Digest()
		if err != nil {
			return nil, err
		}
		if err := nameErofsForm(imgs, rep, dig); err != nil {
			return nil, err
		}
		imgs = append(imgs, er.Image)
		dests = append(slices.Clip(dests), o.Erofs.Dest)
		rep.Images = append(rep.Images, Published{Ref: o.Erofs.Dest, Compression: "erofs", Digest: dig.String()})
	}
	var attach publish.Attach
	if o.SBOM {
		// One scan: every encoding holds the same files.
		comps, err := sbom.ScanImage(imgs[0])
		if err != nil {
			return nil, fmt.Errorf("--sbom: %w", err)
		}
		attach = func(_ context.Context, img v1.Image, ref layers.Ref) (v1.ImageIndex, v1.Hash, error) {
			return sbom.AttachToImage(img, ref.String(), comps, rep.SBOMProperties(), o.Version)
		}
	}
	pub := publish.WithSign(publish.WithSBOM(publish.Writer(o.Layers...), attach), o.Signer)
	for n := range imgs {
		i := n
		if o.Erofs.Dest.Kind != "" {
			// The EROFS form first, then the tag that names it.
			i = (n + len(imgs) - 1) % len(imgs)
		}
		img := imgs[i]
		p, err := pub.Publish(ctx, img, dests[i])
		if err != nil {
			return nil, err
		}
		if p.SBOM != "" {
			rep.Images[i].Index, rep.Images[i].SBOM = p.Digest.String(), p.SBOM
		}
		rep.Images[i].Signed = p.Signed
	}
	return imgs, nil
}

// nameErofsForm has the image as named (imgs[0], --to REPO:TAG) name
// its EROFS form's manifest digest (layers.NameErofsForm): kiln warm
// takes REPO:TAG-erofs for TAG only when TAG names it. The EROFS form is
// published first.
func nameErofsForm(imgs []v1.Image, rep *Report, erofs v1.Hash) error {
	imgs[0] = layers.NameErofsForm(imgs[0], erofs)
	dig, err := imgs[0].Digest()
	if err != nil {
		return err
	}
	rep.Digest, rep.Images[0].Digest = dig.String(), dig.String()
	return nil
}

// names are img's manifest digest and image ID.
func names(img v1.Image) (v1.Hash, v1.Hash, error) {
	dig, err := img.Digest()
	if err != nil {
		return v1.Hash{}, v1.Hash{}, err
	}
	cn, err := img.ConfigName()
	return dig, cn, err
}

// records says the probe runs under the recorder: its startup set is laid
// out first (EStargz) or written to a file (StartupList).
func (o PublishOptions) records() bool { return o.EStargz || o.StartupList != "" }

// probeImage hands out to BuildKit, from an OCI layout in the work directory
// (or pushed to the probe registry when one is named), and runs the
// probe there; when it records, under the recorder (kiln itself mounted
// into the probe container), returning the files it opened.
func probeImage(ctx context.Context, out v1.Image, o PublishOptions) ([]string, error) {
	p := o.Probe
	dig, err := out.Digest()
	if err != nil {
		return nil, err
	}
	var src ProbeSource
	if p.Registry != "" {
		ref, err := layers.ParseRef(ProbeRef(p.Registry, dig.Hex[:16]), o.Layers...)
		if err != nil {
			return nil, fmt.Errorf("--probe-registry: %w", err)
		}
		if _, err := layers.Write(ctx, out, ref, o.Layers...); err != nil {
			return nil, fmt.Errorf("--probe: pushing to %s: %w", ref, err)
		}
		src = ProbeSource{Ref: fmt.Sprintf("%s/kiln-slim-probe/image@%s", p.Registry, dig)}
	} else {
		dir := filepath.Join(p.WorkDir, "probe")
		if _, err := layers.Write(ctx, out, layers.LayoutRef(dir, "probe"), o.Layers...); err != nil {
			return nil, fmt.Errorf("--probe: writing the image for BuildKit to %s: %w", dir, err)
		}
		src = ProbeSource{Layout: dir, Ref: "kiln.local/slim-probe@" + dig.String()}
	}
	cfg, err := out.ConfigFile()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "probe: running %q in %s\n", p.Cmd, termtable.Digest(dig.String()))
	if !o.records() {
		if err := Probe(ctx, p.Client, src, cfg, p.Cmd); err != nil {
			return nil, &ProbeError{fmt.Errorf("%w; nothing written to %s", err, o.Dests[0])}
		}
		return nil, nil
	}
	tools, cleanup, err := p.Tools()
	if err != nil {
		return nil, fmt.Errorf("--probe: recording the startup set: %w", err)
	}
	defer cleanup()
	files, err := ProbeRecord(ctx, p.Client, src, cfg, p.Cmd, tools)
	if err != nil {
		return nil, &ProbeError{fmt.Errorf("%w; nothing written to %s", err, o.Dests[0])}
	}
	what := "the eStargz startup set"
	if !o.EStargz {
		what = "the startup set, for --startup-list"
	}
	fmt.Fprintf(o.Log, "probe: recorded %d files opened (%s)\n", len(files), what)
	return files, nil
}
