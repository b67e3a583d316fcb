package testdaemon

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// Stargz is a running stargz snapshotter (containerd-stargz-grpc, the
// proxy plugin scripts/stargz.sh builds).
type Stargz struct {
	Socket string
	Root   string
}

// KILN_STARGZ_BIN names containerd-stargz-grpc; without it the tests use
// the newest one scripts/stargz.sh built under KILN_STARGZ_CACHE
// (default /var/cache/kiln-stargz/VERSION/).
const envStargzBin = "KILN_STARGZ_BIN"

// StargzBin finds containerd-stargz-grpc, skipping t (or failing it when a
// require variable is 1) when there is none, when the test is not root or
// when there is no /dev/fuse to mount layers with.
func StargzBin(t testing.TB, opts ...Option) string {
	t.Helper()
	c := newConfig("KILN_REQUIRE_STARGZ", opts)
	if os.Geteuid() != 0 {
		c.skip(t, "the stargz snapshotter needs root")
	}
	if fi, err := os.Stat("/dev/fuse"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		c.skip(t, "no /dev/fuse: the stargz snapshotter mounts layers with FUSE")
	}
	if p := os.Getenv(envStargzBin); p != "" {
		return c.lookup(t, p)
	}
	return c.newestBuilt(t, "KILN_STARGZ_CACHE", "/var/cache/kiln-stargz", "*/containerd-stargz-grpc", "scripts/stargz.sh", envStargzBin)
}

// newestBuilt is the newest binary a scripts/*.sh build left in its cache
// ($cacheEnv, else def; glob below it, VERSION/NAME, so the newest is the
// last by name), skipping t when there is none.
func (c *config) newestBuilt(t testing.TB, cacheEnv, def, glob, script, binEnv string) string {
	t.Helper()
	cache := envOr(cacheEnv, def)
	m, _ := filepath.Glob(filepath.Join(cache, glob))
	if len(m) == 0 {
		c.skip(t, "no "+filepath.Base(glob)+" in "+cache+" (bash "+script+" build) and "+binEnv+" unset")
	}
	sort.Strings(m)
	return m[len(m)-1]
}

// StartStargz starts the snapshotter with its own root and socket. It
// fetches registry's blobs from mirror (plain HTTP; registry itself when
// mirror is ""), and with noBackgroundFetch only what the prefetch
// landmark and the reads ask for: a test can then tell what was fetched
// by the time something ran.
func StartStargz(t testing.TB, registry, mirror string, noBackgroundFetch bool, opts ...Option) *Stargz {
	t.Helper()
	bin := StargzBin(t, opts...)
	c := newConfig("KILN_REQUIRE_STARGZ", opts)
	if mirror == "" {
		mirror = registry
	}
	dir := t.TempDir()
	short := shortDir(t, "ksz")
	sz := &Stargz{Socket: filepath.Join(short, "stargz.sock"), Root: filepath.Join(dir, "root")}
	cfg := map[string]any{
		"no_background_fetch": noBackgroundFetch,
		"resolver":            map[string]any{"host": map[string]any{registry: map[string]any{"mirrors": []any{map[string]any{"host": mirror, "insecure": true}}}}},
	}
	b, _ := json.Marshal(cfg)
	cf := filepath.Join(dir, "stargz.json")
	if err := os.WriteFile(cf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	p := c.start(t, bin, dir, 15*time.Second, []string{sz.Root}, "--address", sz.Socket, "--root", sz.Root, "--config", cf, "--log-level", "debug")
	p.wait(t, 20*time.Second, "open "+sz.Socket, func() bool {
		conn, err := net.Dial("unix", sz.Socket)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	return sz
}

// ContainerdConfig is the containerd 2.x config that serves sz as the
// "stargz" snapshotter and has the transfer service unpack to it (with
// remote snapshot annotations, so `ctr images pull --snapshotter stargz`
// mounts eStargz layers lazily), overlayfs next to it.
func (sz *Stargz) ContainerdConfig() string {
	return fmt.Sprintf(`
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux"
  snapshotter = "stargz"
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux"
  snapshotter = "overlayfs"
[proxy_plugins]
  [proxy_plugins.stargz]
    type = "snapshot"
    address = %q
  [proxy_plugins.stargz.exports]
    root = %q
    enable_remote_snapshot_annotations = "true"
`, sz.Socket, sz.Root+"/")
}
