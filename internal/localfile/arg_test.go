package localfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The one rule that tells a file argument (a lock, a weights volume
// manifest) from a reference, read once.
func TestReadArg(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		arg  string
		want string // "lock", "manifest", "ref" or an error's words
	}{
		{write("kiln.lock", `{"lock_version": 1, "plan": {}}`), "lock"},
		{write("volume.json", `{"mediaType": "application/vnd.kiln.weights.manifest.v1+json", "files": []}`), "manifest"},
		{write("weights.manifest", `{"mediaType": "application/vnd.kiln.weights.manifest.v1+json"}`), "manifest"},
		// A program named like the image, beside it: a reference.
		{write("serve", "\x7fELF..."), "ref"},
		{write("zero.lock", `{"lock_version": 0}`), "ref"},
		{dir, "ref"},
		{filepath.Join(dir, "missing"), "ref"},
		{"oci:" + write("oci.lock", `{"lock_version": 1}`), "ref"},
		{"127.0.0.1:5000/kiln/app:v1", "ref"},
		{"docker-daemon:app:v1", "ref"},
		// Named .json: a file, whatever is wrong with it.
		{filepath.Join(dir, "missing.json"), "no such file"},
		{write("other.json", `{"schemaVersion": 2}`), "neither a kiln lock nor a weights volume manifest"},
		{write("bad.json", `{`), "neither a kiln lock nor a weights volume manifest"},
		{fifo, "not a regular file"},
	} {
		af, err := ReadArg(tc.arg, MaxConfig)
		got := "ref"
		switch {
		case err != nil:
			got = err.Error()
		case af != nil && af.LockVersion > 0:
			got = "lock"
		case af != nil && af.MediaType != "":
			got = "manifest"
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("ReadArg(%s): %s, want %s", tc.arg, got, tc.want)
		}
		if af != nil && (af.Path != tc.arg || len(af.Bytes) == 0) {
			t.Errorf("ReadArg(%s): %+v, want its path and bytes", tc.arg, af)
		}
	}
}
