package fleet

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// Binary is the kiln executable fleet copies to hosts.
type Binary struct {
	Path   string
	SHA256 string // hex
	Arch   string // GOARCH
	Size   int64
}

// LocalBinary describes the kiln binary at path, or the running one when
// path is empty. Its architecture is read from the ELF header, so a
// --kiln-binary built for another machine is recognised as such.
func LocalBinary(path string) (*Binary, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("kiln binary: %v (pass --kiln-binary)", err)
		}
		path = exe
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kiln binary: %v", unwrapOp(err))
	}
	defer f.Close()
	arch := ""
	if ef, err := elf.NewFile(f); err == nil {
		arch = elfArch(ef.Machine)
	}
	if arch == "" {
		return nil, fmt.Errorf("kiln binary %s: not a Linux ELF executable for amd64 or arm64 (pass --kiln-binary with a linux build)", path)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, fmt.Errorf("kiln binary %s: %v", path, err)
	}
	return &Binary{Path: path, SHA256: hex.EncodeToString(h.Sum(nil)), Arch: arch, Size: n}, nil
}

func elfArch(m elf.Machine) string {
	switch m {
	case elf.EM_X86_64:
		return "amd64"
	case elf.EM_AARCH64:
		return "arm64"
	case elf.EM_PPC64:
		return "ppc64le"
	case elf.EM_S390:
		return "s390x"
	}
	return ""
}

// unameArch maps `uname -m` to GOARCH.
func unameArch(m string) string {
	switch m {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64", "armv8l":
		return "arm64"
	case "ppc64le":
		return "ppc64le"
	case "s390x":
		return "s390x"
	}
	return m
}

// remoteBinDir is where copied binaries live on hosts; each is named by its
// sha256, so different kiln builds never overwrite one another in use.
const remoteBinDir = `"$HOME/.cache/kiln/bin"`

// EnsureBinary makes the host hold b at ~/.cache/kiln/bin/kiln-SHA and
// returns that path (with $HOME expanded) and whether it was copied. The
// upload goes over the session's stdin to a temporary name, is checked
// with the host's own sha256sum, and is renamed into place: an interrupted
// copy never leaves a half-written kiln where fleet would run it.
func (c *Conn) EnsureBinary(ctx context.Context, b *Binary) (string, bool, error) {
	probe := fmt.Sprintf(`uname -m; printf '%%s\n' "$HOME"; sha256sum %s/kiln-%s 2>/dev/null || true`, remoteBinDir, b.SHA256)
	out, err := c.Output(ctx, probe, nil)
	if err != nil {
		return "", false, fmt.Errorf("probe host: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return "", false, fmt.Errorf("probe host: unexpected answer %q (is the login shell POSIX?)", strings.TrimSpace(out))
	}
	arch := unameArch(strings.TrimSpace(lines[0]))
	home := strings.TrimSpace(lines[1])
	path := home + "/.cache/kiln/bin/kiln-" + b.SHA256
	if arch != b.Arch {
		return "", false, fmt.Errorf("host is %s (uname -m %q) but the kiln binary %s is %s: pass --kiln-binary with a linux/%s build", arch, strings.TrimSpace(lines[0]), b.Path, b.Arch, arch)
	}
	if len(lines) >= 3 && strings.HasPrefix(lines[2], b.SHA256+" ") {
		return path, false, nil
	}
	f, err := os.Open(b.Path)
	if err != nil {
		return "", false, fmt.Errorf("kiln binary: %v", unwrapOp(err))
	}
	defer f.Close()
	upload := fmt.Sprintf(`set -e; d=%[1]s; mkdir -p "$d"; t="$d/.kiln-%[2]s.$$.tmp"; trap 'rm -f "$t"' EXIT; cat > "$t"; chmod 0755 "$t"; s=$(sha256sum "$t" | cut -d' ' -f1); if [ "$s" != %[2]s ]; then echo "kiln: copied binary has sha256 $s, want %[2]s" >&2; exit 1; fi; mv -f "$t" "$d/kiln-%[2]s"`, remoteBinDir, b.SHA256)
	if _, err := c.Output(ctx, upload, f); err != nil {
		return "", false, fmt.Errorf("copy kiln binary: %w", err)
	}
	return path, true, nil
}
