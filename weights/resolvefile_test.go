package weights

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kiln weights pull FILE: a file that is not a volume manifest (not JSON,
// or JSON without the manifest's mediaType) is refused in words that name
// it, never looked up in a registry under its name.
func TestResolveRefusesAFileThatIsNotAManifest(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"volume.manifest": "not json at all",
		"model.weights":   `{"schemaVersion": 1, "files": []}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Resolve(context.Background(), p, "")
		if err == nil || !strings.HasPrefix(err.Error(), "manifest "+p+": ") {
			t.Errorf("Resolve(%s): %v, want the file named and refused as a manifest", name, err)
		}
	}
}
