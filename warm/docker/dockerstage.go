package docker

import (
	"os"
	"path/filepath"
	"syscall"
)

// DefaultStage is where the docker target stages layers by default:
// /var/cache/kiln/docker-stage for root (a system cache, like the engine's
// own data), else $XDG_CACHE_HOME/kiln/docker-stage (~/.cache when unset).
func DefaultStage() string {
	if os.Geteuid() == 0 {
		return "/var/cache/kiln/docker-stage"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "kiln", "docker-stage")
	}
	return filepath.Join(os.TempDir(), "kiln-docker-stage")
}

// sameDevice says whether two existing paths are on one file system (the
// preflight adds their needs).
func sameDevice(a, b string) bool {
	var sa, sb syscall.Stat_t
	if syscall.Stat(a, &sa) != nil || syscall.Stat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev
}
