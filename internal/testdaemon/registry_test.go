package testdaemon

import (
	"testing"
)

// A test that skipped prunes nothing: in CI's fast tier (-short) TestEndToEnd
// called PruneAfter before it skipped, and its prune stopped and emptied
// the registry the e2e tier's TestEndToEnd was pushing to (connection
// refused mid-build). A test that ran prunes once.
func TestPruneAfterOnlyATestThatRan(t *testing.T) {
	t.Setenv("KILN_PRUNE_AFTER_TESTS", "1")
	var pruned []string
	old := prune
	prune = func(t testing.TB, _ string, _ bool) { pruned = append(pruned, t.Name()) }
	t.Cleanup(func() { prune = old })

	t.Run("skipped", func(t *testing.T) {
		PruneAfter(t, true)
		t.Skip("as a BuildKit test skips under -short")
	})
	t.Run("ran", func(t *testing.T) { PruneAfter(t, true) })
	if len(pruned) != 1 || pruned[0] != t.Name()+"/ran" {
		t.Errorf("pruned after %q, want only the test that ran", pruned)
	}
}
