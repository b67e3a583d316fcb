package builder

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/sign"
)

// Report is what Run did, as kiln build reports it (WriteText, JSON).
type Report struct {
	*Result
	// Name is the plan's; Push is --push as named, To the --to outputs
	// as named, Provenance the mode ("" none).
	Name       string
	Push       string
	To         []string
	Provenance string
	// Signed are the signatures (Signer), SBOMs the BOM referrers.
	Signed []*sign.Signed
	SBOMs  []string
	// Attested says the SBOM is in each image's attestation manifest.
	Attested  bool
	Explained *Explanation
}

// JSON is the report as kiln build --json prints it (kiln.build/v1).
func (r *Report) JSON() map[string]any {
	return map[string]any{
		"name": r.Name, "digest": r.Digest, "graph_digest": r.Graph,
		"push": r.Push, "outputs": r.To, "pushed": r.Pushed, "signed": r.Signed, "sbom": r.SBOMs,
		"provenance": cmp.Or(r.Provenance, "none"), "attestations": r.attestations(),
		"vertices": r.Status.Vertices, "cached": r.Status.Cached, "executed": r.Status.Executed,
		"reused": r.Reused, "content_tag": r.ContentTag, "inputs_digest": r.InputsDigest, "explain": r.Explained,
		"wheels": nonNil(r.Wheels),
	}
}

// WriteText prints the report, a line per fact.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "image    %s\n", cmp.Or(r.Digest, "(not exported)"))
	if r.Reused {
		fmt.Fprintf(w, "reused   %s (up to date)\n", r.ContentTag)
	} else {
		fmt.Fprintf(w, "graph    %s\n", r.Graph)
		fmt.Fprintf(w, "steps    %d (%d cached, %d executed)\n", r.Status.Vertices, r.Status.Cached, r.Status.Executed)
		WriteWheels(w, r.Wheels)
	}
	for _, p := range r.Pushed {
		fmt.Fprintf(w, "pushed   %s (%s, %s)\n", p.Ref, p.Compression, p.Digest)
		for _, pl := range slices.Sorted(maps.Keys(p.Images)) {
			fmt.Fprintf(w, "  image  %s %s\n", pl, p.Images[pl])
		}
	}
	if names := r.attestations(); len(names) > 0 {
		fmt.Fprintf(w, "attested %s\n", strings.Join(names, ", "))
	}
	for _, s := range r.Signed {
		fmt.Fprintf(w, "signed   %s (key %s, %s)\n", s.Ref, s.KeyID, s.Format)
	}
	for _, o := range r.To {
		kind, path, _ := strings.Cut(o, ":")
		if abs, err := filepath.Abs(path); err == nil {
			o = kind + ":" + abs
		}
		fmt.Fprintf(w, "wrote    %s\n", o)
	}
	if r.Explained != nil {
		r.Explained.WriteText(w)
	}
}

// attestations lists what the attestation manifest beside each image
// holds: the provenance and kiln's own statements.
func (r *Report) attestations() []string {
	var out []string
	if r.Provenance != "" {
		// Build adds kiln's parameters beside every provenance.
		out = append(out, "SLSA provenance v1 (mode="+r.Provenance+")", "kiln-build.json ("+KilnParamsPredicateType+")")
	}
	if r.Attested {
		out = append(out, "sbom.cdx.json ("+sbom.PredicateType+")", "sbom.spdx.json ("+sbom.SPDXPredicateType+")")
	}
	return out
}
