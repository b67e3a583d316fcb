package builder

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/sbom"
	"github.com/moby/buildkit/client/llb"
	gateway "github.com/moby/buildkit/frontend/gateway/client"
	gatewaypb "github.com/moby/buildkit/frontend/gateway/pb"
	"github.com/moby/buildkit/solver/result"
)

// refFiles reads a solved result through BuildKit's file API, for the
// SBOM scan: no export, no layer download.
type refFiles struct{ ref gateway.Reference }

var _ sbom.Files = refFiles{}

func (f refFiles) ReadFile(ctx context.Context, p string, limit int) ([]byte, error) {
	st, err := f.ref.StatFile(ctx, gateway.StatRequest{Path: p})
	if err != nil {
		return nil, notExist(err)
	}
	if !os.FileMode(st.Mode).IsRegular() {
		return nil, fs.ErrNotExist
	}
	n := min(st.Size, int64(limit))
	if n == 0 {
		return nil, nil
	}
	b, err := f.ref.ReadFile(ctx, gateway.ReadRequest{Filename: p, Range: &gateway.FileRange{Offset: 0, Length: int(n)}})
	return b, notExist(err)
}

func (f refFiles) ReadDir(ctx context.Context, p string) ([]sbom.DirEntry, error) {
	st, err := f.ref.StatFile(ctx, gateway.StatRequest{Path: p})
	if err != nil {
		return nil, notExist(err)
	}
	if !os.FileMode(st.Mode).IsDir() {
		// A symbolic link (or a file) where a directory was looked for.
		return nil, fs.ErrNotExist
	}
	es, err := f.ref.ReadDir(ctx, gateway.ReadDirRequest{Path: p})
	if err != nil {
		return nil, notExist(err)
	}
	out := make([]sbom.DirEntry, 0, len(es))
	for _, e := range es {
		m := os.FileMode(e.Mode)
		out = append(out, sbom.DirEntry{Name: path.Base(e.Path), Dir: m.IsDir(), Regular: m.IsRegular()})
	}
	return out, nil
}

// notExist maps BuildKit's "no such file" (a gRPC error carrying the
// errno text) to fs.ErrNotExist, keeping every other error.
func notExist(err error) error {
	if err != nil && (errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "no such file or directory") || strings.Contains(err.Error(), "not a directory")) {
		return fmt.Errorf("%w (%v)", fs.ErrNotExist, err)
	}
	return err
}

// attestationRefs solves one scratch filesystem holding every
// attestation's body and returns the gateway attestations pointing into
// it, as a frontend hands BuildKit its SBOMs.
func attestationRefs(ctx context.Context, c gateway.Client, as []Attestation) ([]gateway.Attestation, error) {
	if len(as) == 0 {
		return nil, nil
	}
	st := llb.Scratch()
	seen := map[string]bool{}
	for _, a := range as {
		name := path.Clean("/" + a.Path)
		if a.Path == "" || name == "/" || path.Dir(name) != "/" || seen[name] {
			return nil, fmt.Errorf("attestation path %q: want a distinct plain file name", a.Path)
		}
		seen[name] = true
		st = st.File(llb.Mkfile(name, 0o644, a.Body))
	}
	def, err := st.Marshal(ctx)
	if err != nil {
		return nil, err
	}
	r, err := c.Solve(ctx, gateway.SolveRequest{Definition: def.ToPB(), Evaluate: true})
	if err != nil {
		return nil, fmt.Errorf("attestations: %w", err)
	}
	ref, err := r.SingleRef()
	if err != nil {
		return nil, err
	}
	var out []gateway.Attestation
	for _, a := range as {
		ga := gateway.Attestation{
			Kind:   gatewaypb.AttestationKind_InToto,
			Ref:    ref,
			Path:   path.Clean("/" + a.Path),
			InToto: result.InTotoAttestation{PredicateType: a.PredicateType},
		}
		if a.SBOM {
			ga.Metadata = map[string][]byte{result.AttestationReasonKey: []byte(result.AttestationReasonSBOM)}
		}
		out = append(out, ga)
	}
	return out, nil
}

// provenanceParams are kiln's build parameters as the provenance records
// them (buildDefinition.externalParameters.request.args, under the
// "kiln:" prefix): what a verifier needs to tie the image to a recipe and
// a lock without trusting the registry. extra (Options.Params) is added
// as given.
func provenanceParams(p *recipes.Plan, in Inputs, extra map[string]string) map[string]string {
	m := map[string]string{
		"recipe":        p.Name,
		"recipe-sha256": in.RecipeHash,
		"cuda":          p.CUDA,
		"runtime-base":  p.BaseImages.Runtime,
		"devel-base":    p.BaseImages.Devel,
		"python":        p.Python,
		"python-source": p.PythonSource,
	}
	if d := p.PythonDist; d != nil {
		// The archives' sha256s are in the lock (and the LLB).
		m["python-dist"] = "cpython-" + d.Version + "+" + d.Release
	}
	if in.LockDigest != "" {
		m["lock-sha256"] = in.LockDigest
	}
	for _, kv := range p.StackPins() {
		m[kv[0]] = kv[1]
	}
	if p.GPUCode != nil && len(p.GPUCode.Archs) > 0 {
		m["gpu-code"] = strings.Join(p.GPUCode.Archs, ",")
	}
	for slot, w := range in.CachedWheelDigests {
		m["cached-wheel."+slot.Package+"."+slot.Platform] = w
	}
	for k, v := range extra {
		m[k] = v
	}
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	return m
}

// provenanceSafe refuses a max-mode provenance of a plan whose package
// index URLs carry credentials: max mode records every step's command
// (the LLB), and the pip steps name their index, so the secret would be
// published beside the image. min mode records only the request.
func provenanceSafe(p *recipes.Plan, mode string) error {
	if mode != "max" {
		return nil
	}
	check := func(field, u string) error {
		pu, err := url.Parse(u)
		if err != nil || pu.User == nil {
			return nil
		}
		// The user part alone may be a token: none of it is printed.
		pu.User = nil
		return fmt.Errorf("provenance mode=max records every step's command, and %s (%s, user part removed here) carries credentials: use --provenance min, or an index without them", field, pu.String())
	}
	for _, w := range p.WheelIndexes {
		if err := check("wheel index", w); err != nil {
			return err
		}
	}
	if err := check("torch_index_url", p.TorchIndexURL); err != nil {
		return err
	}
	for _, pp := range p.Pip {
		if err := check("pip "+pp.Name+" index_url", pp.IndexURL); err != nil {
			return err
		}
		if err := check("pip "+pp.Name+" url", pp.URL); err != nil {
			return err
		}
	}
	if d := p.PythonDist; d != nil {
		for _, a := range d.Archives {
			if err := check("the Python download", a.URL); err != nil {
				return err
			}
		}
	}
	return nil
}
