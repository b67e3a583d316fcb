package layers

// kiln's image label keys, in one place: what kiln build writes, what
// kiln weights strip and kiln slim --weights-to add, and what host check,
// warm and weights read back.
const (
	// Written by kiln build.
	LabelRecipeHash     = "dev.kiln.recipe.sha256"
	LabelLockDigest     = "dev.kiln.lock.sha256"
	LabelMinDriver      = "dev.kiln.min-driver"
	LabelMinDriverMinor = "dev.kiln.min-driver.minor-version-compat"
	LabelCUDAArchs      = "dev.kiln.cuda-archs"
	LabelCUDA           = "dev.kiln.cuda"
	LabelComponents     = "dev.kiln.layers"
	// LabelInputs is kiln's record of what each step was built from
	// (builder.Record, JSON), read by kiln build --explain.
	LabelInputs = "dev.kiln.inputs"

	// The weights volume of a stripped image: the artifact reference
	// pinned by digest, where the volume must be mounted, and its set
	// digest (what the volume's .kiln-ready holds).
	LabelWeightsManifest  = "dev.kiln.weights.manifest"
	LabelWeightsMount     = "dev.kiln.weights.mount"
	LabelWeightsSetDigest = "dev.kiln.weights.set-digest"
)

// kiln's manifest annotation keys.
const (
	// AnnotationErofsManifest, on an image manifest (REPO:TAG's, or its
	// platform's manifest in TAG's index), is the digest of the manifest
	// of the same image with native EROFS layers, published with it at
	// REPO:TAG-erofs (kiln slim --format erofs): kiln warm takes
	// TAG-erofs for TAG only when TAG names it so (NameErofsForm).
	AnnotationErofsManifest = "dev.kiln.erofs.manifest"
)

// BuildKit's attestation annotations on an index entry: an attestation
// manifest (platform unknown/unknown) says which image it is about.
const (
	AnnotationRefType   = "vnd.docker.reference.type"
	AnnotationRefDigest = "vnd.docker.reference.digest"
	RefTypeAttestation  = "attestation-manifest"
	// On each layer of an attestation manifest: the in-toto predicate
	// type of the statement it holds.
	AnnotationPredicateType = "in-toto.io/predicate-type"
)

// IsAttestation says whether an index entry is an attestation manifest
// rather than an image to run.
func IsAttestation(annotations map[string]string) bool {
	return annotations[AnnotationRefType] == RefTypeAttestation
}
