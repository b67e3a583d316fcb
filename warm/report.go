package warm

import "github.com/kiln-build/kiln/sign"

// Schema is the --json report's schema name.
const Schema = "kiln.warm/v1"

// Blob states in a report.
const (
	StatePresent = "present"
	StateFetched = "fetched"
	// StateWritten: an index, manifest or config read and verified while
	// the set was resolved, written to the target from memory (nothing
	// fetched for it at this step, so bytes_fetched is 0).
	StateWritten = "written"
	StateMissing = "missing"
	StateFailed  = "failed"
)

// Report is what a warm found and did (the --json schema kiln.warm/v1).
type Report struct {
	Schema       string        `json:"schema"`
	Target       string        `json:"target"`
	Namespace    string        `json:"namespace"`
	Ready        bool          `json:"ready"`
	DryRun       bool          `json:"dry_run"`
	Images       []ImageReport `json:"images"`
	Blobs        []BlobReport  `json:"blobs"`
	MissingBytes int64         `json:"missing_bytes"`
	FetchedBytes int64         `json:"fetched_bytes"`
	PresentBytes int64         `json:"present_bytes"`
	// ResumedBytes are the bytes an earlier, interrupted run left that
	// this one kept (partial blobs resumed, layers staged whole, weight
	// blobs): neither present before nor fetched now.
	ResumedBytes int64   `json:"resumed_bytes"`
	Seconds      float64 `json:"seconds"`
	Unpacked     bool    `json:"unpacked,omitempty"`
	// Snapshotter is the containerd snapshotter --unpack unpacked into
	// (erofs: containers must run with it, ctr run --snapshotter erofs).
	Snapshotter string `json:"snapshotter,omitempty"`
	// Weights are the volumes warmed with --weights-into; their bytes
	// are counted in the totals above too.
	Weights []*WeightsReport `json:"weights,omitempty"`
	// Signatures are the --verify-key checks, one per image and weights
	// artifact, made before any layer was fetched.
	Signatures []*sign.Result `json:"signatures,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// ImageReport names one image of the warm set.
type ImageReport struct {
	Ref      string `json:"ref"`
	Digest   string `json:"digest"`
	Platform string `json:"platform"`
	// Manifest is the platform manifest's digest when Digest is an index.
	Manifest string `json:"manifest,omitempty"`
	// Source is the reference read when it differs from Ref (its zstd
	// or EROFS form), and Form which: zstd (REPO:TAG-zstd, proven the
	// same image) or erofs (REPO:TAG-erofs, named by REPO:TAG's
	// manifest).
	Source string `json:"source,omitempty"`
	Form   string `json:"form,omitempty"`
	// Mirror is the registry mirror read through (docs/mirrors.md).
	Mirror string `json:"mirror,omitempty"`
	// Note says why a variant beside Ref was not used (not the same
	// image in zstd).
	Note string `json:"note,omitempty"`
}

// BlobReport is one blob's outcome.
type BlobReport struct {
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	MediaType string `json:"media_type"`
	Kind      string `json:"kind"`
	State     string `json:"state"`
	// BytesFetched counts bytes read from the registry in this run (less
	// than Size when an earlier run's bytes were resumed).
	BytesFetched int64   `json:"bytes_fetched"`
	Resumed      int64   `json:"resumed_from,omitempty"`
	Seconds      float64 `json:"seconds"`
	Error        string  `json:"error,omitempty"`
}

// NewReport describes s before anything was checked.
func NewReport(s *Set) *Report {
	r := &Report{Schema: Schema, Images: []ImageReport{}, Blobs: []BlobReport{}}
	for _, img := range s.Images {
		ir := ImageReport{Ref: img.Name, Digest: img.Target.Digest.String(), Platform: img.Platform}
		if img.Manifest.Digest != img.Target.Digest {
			ir.Manifest = img.Manifest.Digest.String()
		}
		if img.Source != img.Name {
			ir.Source, ir.Form = img.Source, img.Form
		}
		ir.Mirror, ir.Note = img.Mirror, img.Note
		r.Images = append(r.Images, ir)
	}
	for _, b := range s.Blobs {
		r.Blobs = append(r.Blobs, BlobReport{Digest: b.Digest.String(), Size: b.Size, MediaType: b.MediaType, Kind: string(b.Kind)})
	}
	return r
}
