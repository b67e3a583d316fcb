package refresh

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
)

// tagRe is the nvidia/cuda tag grammar kiln uses:
// X.Y.Z-[cudnn|cudnn8|cudnn9-]<base|runtime|devel>-<os>. Other tags
// (tensorrt variants, X.Y-only tags of old releases, "latest") are not
// base images kiln builds on.
var tagRe = regexp.MustCompile(`^(\d+\.\d+\.\d+)-(?:(cudnn\d*)-)?(base|runtime|devel)-([a-z][a-z0-9.]*)$`)

// cudnnPreference orders the cuDNN infixes when one version has several:
// the plain -cudnn- tags are the current ones.
var cudnnPreference = []string{"cudnn", "cudnn9", "cudnn8"}

// images rebuilds images.json: which X.Y.Z tags the registry lists and
// their cuDNN infix; the cuDNN versions of tags the base knew are kept
// (they come from the Dockerfiles, not the tag list).
func (r *run) images(ctx context.Context) (recipes.ImageData, error) {
	ref, err := layers.ParseRef(r.o.Repository+":latest", r.o.Registry...)
	if err != nil {
		return recipes.ImageData{}, fmt.Errorf("repository %q: %w", r.o.Repository, err)
	}
	repo := ref.Name.Context()
	listURL := fmt.Sprintf("%s://%s/v2/%s/tags/list", repo.Scheme(), repo.RegistryStr(), repo.RepositoryStr())
	opts := append(registry.RemoteOptions(ctx, r.o.Registry...), r.o.Remote...)
	tags, err := listTags(ctx, repo, opts)
	if err != nil {
		return recipes.ImageData{}, fmt.Errorf("nvidia/cuda tags %s: %w", listURL, registry.RedactError(err))
	}
	r.source(listURL, "nvidia/cuda tags (published X.Y.Z versions, cuDNN variants)")
	tokens := map[string]map[string]bool{}
	for _, t := range tags {
		m := tagRe.FindStringSubmatch(t)
		if m == nil {
			continue
		}
		v := cuda.Version{}
		if pv, err := cuda.ParseVersion(m[1]); err == nil {
			v = pv
		}
		if v.Major() < 11 {
			continue // kiln's driver table starts at CUDA 11
		}
		if tokens[m[1]] == nil {
			tokens[m[1]] = map[string]bool{}
		}
		tokens[m[1]][m[2]] = true
	}
	base := r.o.Base.Images
	out := base
	out.DataDate = r.date
	out.Tags = nil
	var versions []string
	for v := range tokens {
		versions = append(versions, v)
	}
	slices.SortFunc(versions, cmpV)
	for _, v := range versions {
		tok := ""
		for _, p := range cudnnPreference {
			if tokens[v][p] {
				tok = p
				break
			}
		}
		var row recipes.ImageTag
		if i := slices.IndexFunc(base.Tags, func(t recipes.ImageTag) bool { return t.CUDA == v }); i >= 0 {
			row = base.Tags[i]
			if row.CuDNNToken != tok {
				// The registry is the source of which infix exists; a cuDNN
				// version read for another infix no longer applies.
				row.CuDNNToken, row.CuDNN, row.CuDNNPackage = tok, "", ""
				row.Source, row.Confidence = "tags listed by "+r.read(listURL)+"; the cuDNN version is not in the tags", cuda.ConfA
			}
		} else {
			row = recipes.ImageTag{CUDA: v, CuDNNToken: tok, Source: "tags listed by " + r.read(listURL) + "; the cuDNN version is not in the tags", Confidence: cuda.ConfA}
		}
		out.Tags = append(out.Tags, row)
	}
	if len(out.Tags) == 0 {
		return recipes.ImageData{}, fmt.Errorf("nvidia/cuda tags %s: no X.Y.Z-{base,runtime,devel}-OS tag among %d", listURL, len(tags))
	}
	r.listURL = listURL
	return out, nil
}

// maxTagPages bounds the tag list pages read: Docker Hub's nvidia/cuda has
// a few thousand tags, tens of pages.
const maxTagPages = 1000

// listTags reads every page of repo's tag list, refusing a Link: next
// that points at a page already read (a loop) or more than maxTagPages.
func listTags(ctx context.Context, repo name.Repository, opts []remote.Option) ([]string, error) {
	p, err := remote.NewPuller(opts...)
	if err != nil {
		return nil, err
	}
	l, err := p.Lister(ctx, repo)
	if err != nil {
		return nil, err
	}
	var tags []string
	seen := map[string]bool{"": true}
	for pages := 1; l.HasNext(); pages++ {
		t, err := l.Next(ctx)
		if err != nil {
			return nil, err
		}
		tags = append(tags, t.Tags...)
		if t.Next == "" {
			break
		}
		if seen[t.Next] {
			return nil, fmt.Errorf("the tag list's Link: next loops back to a page already read (%s)", redactURL(t.Next))
		}
		if pages >= maxTagPages {
			return nil, fmt.Errorf("the tag list has more than %d pages", maxTagPages)
		}
		seen[t.Next] = true
	}
	return tags, nil
}
