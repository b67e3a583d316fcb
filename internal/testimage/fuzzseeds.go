package testimage

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// UpdateSeedsEnv, set to 1, makes CheckFuzzSeeds write the seed files
// instead of comparing them.
const UpdateSeedsEnv = "KILN_UPDATE_FUZZ_SEEDS"

// CheckFuzzSeeds checks that testdata/fuzz/<target>/ holds each of seeds
// (file name → the fuzz target's one []byte argument) in go test's
// corpus format, so that `go test` runs them as the target's seed
// corpus and `go test -fuzz` starts from them. With
// KILN_UPDATE_FUZZ_SEEDS=1 it writes them.
func CheckFuzzSeeds(t *testing.T, target string, seeds map[string][]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	update := os.Getenv(UpdateSeedsEnv) == "1"
	for name, b := range seeds {
		want := []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n")
		p := filepath.Join(dir, name)
		if update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: the seed is missing or stale (%v); run `%s=1 go test -run %s` in the package and commit testdata/fuzz", p, err, UpdateSeedsEnv, t.Name())
		}
	}
}
