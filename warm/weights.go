package warm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/time/rate"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/weights"
)

// Weights volumes in the warm set. An image slimmed by `kiln weights strip`
// carries a dev.kiln.weights.manifest label naming its weights artifact;
// the host needs that volume as much as the image's layers. A volume is
// warmed with weights.Pull (staged in .kiln-partial, resumed with Range
// requests, verified, renamed into DIR/model, .kiln-ready last; a volume
// of kiln's old layout, files at DIR's top level, is moved into DIR/model
// first) and is ready only when weights.Verify finds every file with its
// sha256 and the marker.

// WeightsReport is one volume's outcome (the report's "weights" section).
type WeightsReport struct {
	// Ref is the weights artifact (by digest when resolved from a
	// registry), or the manifest file.
	Ref string `json:"ref"`
	// Image is the image whose label led here, when one did.
	Image     string `json:"image,omitempty"`
	Dir       string `json:"dir"`
	SetDigest string `json:"set_digest"`
	// State: present (verified before anything was done), fetched,
	// missing (dry run), failed.
	State        string        `json:"state"`
	Bytes        int64         `json:"bytes"`
	MissingBytes int64         `json:"missing_bytes"`
	FetchedBytes int64         `json:"bytes_fetched"`
	ResumedBytes int64         `json:"resumed_from,omitempty"`
	Seconds      float64       `json:"seconds"`
	Files        []WeightsFile `json:"files"`
	Error        string        `json:"error,omitempty"`
}

// WeightsFile is one file of a volume: present, fetched, missing or failed.
type WeightsFile struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	State string `json:"state"`
	// Problem is what the verification found before the warm (a tampered
	// file: "sha256 …, want …").
	Problem string `json:"problem,omitempty"`
}

var errWeightsArtifact = errors.New("a weights artifact, not an image")

// isWeightsArtifact says whether a manifest is a kiln weights artifact
// (ModelPack artifactType or model config), which is warmed as a volume.
func isWeightsArtifact(raw []byte) bool {
	var m struct {
		ArtifactType string `json:"artifactType"`
		Config       struct {
			MediaType string `json:"mediaType"`
		} `json:"config"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	return m.ArtifactType == weights.ArtifactType || m.Config.MediaType == weights.MediaTypeModelConfig
}

// Volume is a resolved weights volume of the warm set.
type Volume struct {
	Ref   string
	Image string
	*weights.Resolved
}

// WeightsRefs returns, per image of s, the artifact its
// dev.kiln.weights.manifest label names ("" when it has none). The label
// is read from the config the set already holds.
func (s *Set) WeightsRefs() ([]string, error) {
	out := make([]string, len(s.Images))
	for i, img := range s.Images {
		for _, b := range s.Blobs {
			if b.Digest != img.Config.Digest || b.Data == nil {
				continue
			}
			var cfg v1.ConfigFile
			if err := json.Unmarshal(b.Data, &cfg); err != nil {
				return nil, fmt.Errorf("image %s: config %s: %v", img.Name, b.Digest, err)
			}
			out[i] = cfg.Config.Labels[layers.LabelWeightsManifest]
			break
		}
	}
	return out, nil
}

// ResolveVolume resolves a weights argument (artifact reference, oci:DIR,
// or MANIFEST.json) or an image's label value; registry references are
// read through their registry's mirrors (registry.WithMirrors in lopts).
func ResolveVolume(ctx context.Context, ref, image string, lopts []registry.Option) (*Volume, error) {
	res, err := weights.Resolve(ctx, ref, "", lopts...)
	if err != nil {
		if image != "" {
			return nil, fmt.Errorf("image %s: its %s label: %v", image, layers.LabelWeightsManifest, err)
		}
		return nil, err
	}
	if res.Source == nil {
		return nil, fmt.Errorf("weights %s: the manifest names no repository to fetch its blobs from", ref)
	}
	if image == "" {
		image = res.Image
	}
	return &Volume{Ref: ref, Image: image, Resolved: res}, nil
}

// WeightsOptions tune WarmWeights.
type WeightsOptions struct {
	DryRun bool
	// Jobs is how many blobs (and files being hashed) at once.
	Jobs int
	// Concurrency, ChunkSize and Limiter go to the pull
	// (weights.PullOptions): HTTP requests in flight, the Range chunk
	// size of large blobs, and the pace shared with the image warm.
	Concurrency int
	ChunkSize   int64
	Limiter     *rate.Limiter
	Progress    *atomic.Int64
	// OnWait goes to the pull: called once if another pull holds the
	// volume's lock and this warm waits for it.
	OnWait func()
}

// WarmWeights makes dir hold volume v, verified, each file hashed once.
// It verifies first (every file there hashed): a volume that verifies is
// left alone; otherwise weights.Pull fetches what is missing or wrong,
// resuming partial blobs, told to recheck the files when one did not
// verify (so a tampered file is not hidden behind a stale marker) and
// which ones verified here (not hashed again); the pull verifies what it
// fetches as it writes it, and the volume's cheap check (marker, sizes,
// modes, times) is the gate after it. The report is always returned; err
// says why the volume is not ready.
func WarmWeights(ctx context.Context, v *Volume, dir string, o WeightsOptions) (*WeightsReport, error) {
	start := time.Now()
	m := v.Manifest
	rep := &WeightsReport{Ref: v.Ref, Image: v.Image, Dir: dir, SetDigest: m.SetDigest, Bytes: m.Size, Files: []WeightsFile{}}
	fail := func(err error) (*WeightsReport, error) {
		rep.State = StateFailed
		rep.Error = err.Error()
		rep.Seconds = time.Since(start).Seconds()
		return rep, err
	}
	bad, markerOK, err := verifyVolume(ctx, dir, m, o.Jobs)
	if err != nil {
		return fail(err)
	}
	for _, f := range m.Files {
		wf := WeightsFile{Path: f.Path, Size: f.Size, State: StatePresent}
		if p, ok := bad[f.Path]; ok {
			wf.State, wf.Problem = StateMissing, p
			rep.MissingBytes += f.Size
		}
		rep.Files = append(rep.Files, wf)
	}
	if len(bad) == 0 && markerOK {
		rep.State = StatePresent
		if o.Progress != nil {
			o.Progress.Add(m.Size)
		}
		rep.Seconds = time.Since(start).Seconds()
		return rep, nil
	}
	if o.DryRun {
		rep.State = StateMissing
		rep.Seconds = time.Since(start).Seconds()
		return rep, nil
	}
	// Pull decides under the volume's lock (another pull may be writing
	// the volume now): its ready check, or with Recheck, when a file did
	// not verify here, hashing what is present; it heals what is wrong
	// and rewrites the marker last.
	// The files found right here are not hashed again.
	good := map[string]bool{}
	for _, f := range m.Files {
		if _, ok := bad[f.Path]; !ok {
			good[f.Path] = true
		}
	}
	pr, err := weights.Pull(ctx, m, v.Source, dir, weights.PullOptions{Jobs: o.Jobs, Progress: o.Progress,
		Concurrency: o.Concurrency, ChunkSize: o.ChunkSize, Limiter: o.Limiter, Recheck: len(bad) > 0, Good: good, OnWait: o.OnWait})
	if pr != nil {
		rep.FetchedBytes, rep.ResumedBytes = pr.Fetched, pr.Resumed
	}
	if err != nil {
		for i := range rep.Files {
			if rep.Files[i].State == StateMissing {
				rep.Files[i].State = StateFailed
			}
		}
		return fail(fmt.Errorf("weights %s into %s: %v", v.Ref, dir, err))
	}
	// The readiness gate. Every file was hashed once in this warm (here
	// or by the pull, which verified what it fetched as it was written):
	// the cheap check then says that what was hashed is what is there.
	// Otherwise verify again, every file hashed.
	if pr.Verified && weights.Intact(dir, m) {
		bad, markerOK = nil, true
	} else if bad, markerOK, err = verifyVolume(ctx, dir, m, o.Jobs); err != nil {
		return fail(err)
	}
	for i := range rep.Files {
		f := &rep.Files[i]
		if p, ok := bad[f.Path]; ok {
			f.State, f.Problem = StateFailed, p
		} else if f.State == StateMissing {
			f.State = StateFetched
			rep.MissingBytes -= f.Size
		}
	}
	if len(bad) > 0 || !markerOK {
		return fail(fmt.Errorf("weights %s: the volume in %s does not verify after the pull", v.Ref, dir))
	}
	rep.State = StateFetched
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// verifyVolume runs weights.Verify and sorts its problems: per manifest
// file (missing, size, sha256, mode), and whether the marker is right (a
// volume of the old layout, or one whose move into DIR/model was
// interrupted, is not ready either: the pull moves it).
// Extra files and leftover partials do not make a volume unready: the
// container reads only the manifest's files, and a partial is what a
// resumed pull starts from.
func verifyVolume(ctx context.Context, dir string, m *weights.Manifest, jobs int) (map[string]string, bool, error) {
	bad := map[string]string{}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		for _, f := range m.Files {
			bad[f.Path] = "missing"
		}
		return bad, false, nil
	}
	vr, err := weights.Verify(ctx, dir, m, jobs)
	if err != nil {
		return nil, false, fmt.Errorf("weights %s: verify: %v", dir, err)
	}
	files := map[string]bool{}
	for _, f := range m.Files {
		files[f.Path] = true
	}
	markerOK := true
	for _, p := range vr.Problems {
		switch {
		case p.Path == weights.ReadyMarker, p.Path == weights.LayoutMarker, p.Path == weights.MigrateDir:
			markerOK = false
		case files[p.Path]:
			if bad[p.Path] == "" {
				bad[p.Path] = p.Problem
			}
		}
	}
	return bad, markerOK, nil
}
