package hostcheck_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/hostcheck"
)

// TestRegistryCredentials asks a real credential helper program (a
// docker-credential-* script on PATH, as Docker runs them) about the
// image's registry; only the presence is recorded.
func TestRegistryCredentials(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	// The helper protocol: "get" reads the server URL on stdin, answers JSON.
	helper := "#!/bin/sh\nread url\ncase \"$1:$url\" in\nget:ghcr.io) echo '{\"ServerURL\":\"ghcr.io\",\"Username\":\"bot\",\"Secret\":\"s3cr3t-token\"}' ;;\nget:*) echo 'credentials not found in native keychain' ; exit 1 ;;\nesac\n"
	os.WriteFile(filepath.Join(bin, "docker-credential-kilntest"), []byte(helper), 0o755)
	t.Setenv("PATH", bin)
	cfg := filepath.Join(dir, "docker")
	os.Mkdir(cfg, 0o700)
	os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}},"credHelpers":{"ghcr.io":"kilntest","quay.io":"kilntest"}}`), 0o600)

	h, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: t.TempDir(), NvidiaSMI: "-", DockerConfig: cfg, Registries: []string{"ghcr.io", "quay.io"}})
	if err != nil {
		t.Fatal(err)
	}
	// The helper confirmed ghcr.io and denied quay.io.
	if got := strings.Join(h.Registry.Registries, ","); got != "ghcr.io,registry.example.com" {
		t.Errorf("registries = %s", got)
	}
	b, _ := h.Marshal()
	for _, secret := range []string{"s3cr3t-token", "dXNlcjpwYXNz", "bot"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("credential %q in the description", secret)
		}
	}
	cases := []struct {
		registry string
		status   hostcheck.Status
		summary  string
	}{
		{"ghcr.io", hostcheck.Pass, "credentials for ghcr.io present (not shown)"},
		{"registry.example.com", hostcheck.Pass, "present"},
		{"nvcr.io", hostcheck.Warn, "no credentials for nvcr.io"},
		{"quay.io", hostcheck.Warn, "no credentials for quay.io"},
		{"127.0.0.1:5000", hostcheck.Pass, "loopback registry"},
		{"", hostcheck.Skip, "not pulled from a registry"},
	}
	for _, c := range cases {
		im := &hostcheck.Image{Ref: c.registry + "/app:1", Registry: c.registry}
		it := hostcheck.Check(h, im, hostcheck.Options{}).Item(hostcheck.IDRegistry)
		if it.Status != c.status || !strings.Contains(it.Summary, c.summary) {
			t.Errorf("%s: %s %q", c.registry, it.Status, it.Summary)
		}
	}
}

// A credential helper that hangs is killed after the helper timeout, and
// one that fails says so without its output (which may hold a secret)
// reaching the description or the check.
func TestRegistryCredentialHelperTimeoutAndOutput(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	hang := "#!/bin/sh\nexec sleep 60\n"
	leak := "#!/bin/sh\necho '{\"Username\":\"bot\",\"Secret\":\"leaked-s3cr3t\"}'\necho 'fatal: leaked-s3cr3t' >&2\nexit 3\n"
	os.WriteFile(filepath.Join(bin, "docker-credential-hang"), []byte(hang), 0o755)
	os.WriteFile(filepath.Join(bin, "docker-credential-leak"), []byte(leak), 0o755)
	t.Setenv("PATH", bin+":/usr/bin:/bin")
	cfg := filepath.Join(dir, "docker")
	os.Mkdir(cfg, 0o700)
	os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"credHelpers":{"ghcr.io":"hang","quay.io":"leak"}}`), 0o600)

	start := time.Now()
	h, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: t.TempDir(), NvidiaSMI: "-", DockerConfig: cfg,
		Registries: []string{"ghcr.io", "quay.io"}, HelperTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Gather took %s with a hanging credential helper (no timeout)", d)
	}
	if len(h.Registry.Registries) != 0 {
		t.Errorf("registries = %v, want none", h.Registry.Registries)
	}
	if e := h.Registry.HelperErrors["ghcr.io"]; !strings.Contains(e, "docker-credential-hang") || !strings.Contains(e, "within") {
		t.Errorf("hanging helper: %q", e)
	}
	if e := h.Registry.HelperErrors["quay.io"]; !strings.Contains(e, "docker-credential-leak") {
		t.Errorf("failing helper: %q", e)
	}
	b, _ := h.Marshal()
	for _, reg := range []string{"ghcr.io", "quay.io"} {
		im := &hostcheck.Image{Ref: reg + "/app:1", Registry: reg}
		it := hostcheck.Check(h, im, hostcheck.Options{}).Item(hostcheck.IDRegistry)
		if it.Status != hostcheck.Warn || !strings.Contains(it.Summary, "docker-credential-") {
			t.Errorf("%s: %s %q", reg, it.Status, it.Summary)
		}
		b = append(b, it.Summary...)
		for _, f := range it.Fix {
			b = append(b, f...)
		}
	}
	if strings.Contains(string(b), "leaked-s3cr3t") {
		t.Errorf("the helper's output was quoted: %s", b)
	}
}
