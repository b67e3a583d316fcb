package wheelcache

import "github.com/kiln-build/kiln/recipes/wheelkey"

// Key is what determines a compiled wheel's bytes (recipes/wheelkey: the
// lock records it, so it lives below recipes with no registry code).
type Key = wheelkey.Key

// NormalizeName and Diff are wheelkey's.
var (
	NormalizeName = wheelkey.NormalizeName
	Diff          = wheelkey.Diff
)
