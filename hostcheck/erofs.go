package hostcheck

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Erofs is what a containerd host offers for EROFS layers (containerd
// 2.2+'s EROFS snapshotter: each layer one EROFS image mounted from a
// file, no untar) and what kiln warm --unpack writes there.
type Erofs struct {
	// Snapshotter: the erofs snapshotter plugin loaded; InitError why
	// not, when containerd lists it but it failed (e.g. enable_fsverity
	// on a file system without fs-verity).
	Snapshotter bool   `json:"snapshotter"`
	InitError   string `json:"init_error,omitempty"`
	Root        string `json:"root,omitempty"`
	// FsVerity: "supported" when the snapshotter's root file system
	// enables fs-verity on a file, "unsupported", or "unknown" (not
	// checked: no root, or not allowed to write there).
	FsVerity string `json:"fsverity"`
	// Mkfs is mkfs.erofs's version on this host's PATH ("" none): the
	// EROFS differ (and kiln warm) convert tar layers with it.
	Mkfs string `json:"mkfs_erofs,omitempty"`
	// WarmTar and WarmNative are the snapshotter kiln warm --unpack
	// (--snapshotter auto) unpacks a tar image and a native EROFS image
	// into here.
	WarmTar    string `json:"warm_tar"`
	WarmNative string `json:"warm_native"`
}

// gatherErofs fills e.Erofs from the erofs snapshotter plugin's
// introspection (loaded, its init error, its root) and this host.
func gatherErofs(e *Engine, loaded bool, initErr, root string) {
	x := &Erofs{Snapshotter: loaded, InitError: initErr, Root: root, FsVerity: "unknown", Mkfs: mkfsErofsVersion()}
	if loaded && root != "" {
		x.FsVerity = fsVerityProbe(root)
	}
	x.WarmTar, x.WarmNative = "overlayfs", "none"
	if _, ok := e.snapRoots["overlayfs"]; !ok {
		x.WarmTar = "native"
	}
	if loaded {
		x.WarmNative = "erofs"
	}
	e.Erofs = x
}

var mkfsVersion = regexp.MustCompile(`erofs-utils\) ([0-9][0-9.]*)`)

func mkfsErofsVersion() string {
	out, err := exec.Command("mkfs.erofs", "--version").CombinedOutput()
	if err != nil {
		return ""
	}
	if m := mkfsVersion.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return "unknown"
}

// fsVerityProbe enables fs-verity on a new empty file in dir, as the
// EROFS snapshotter does when it starts with enable_fsverity.
func fsVerityProbe(dir string) string {
	f, err := os.CreateTemp(dir, ".kiln-fsverity-*")
	if err != nil {
		return "unknown"
	}
	defer os.Remove(f.Name())
	// fs-verity wants a file no one has open for writing.
	f.Close()
	ro, err := os.Open(f.Name())
	if err != nil {
		return "unknown"
	}
	defer ro.Close()
	arg := unix.FsverityEnableArg{Version: 1, Hash_algorithm: unix.FS_VERITY_HASH_ALG_SHA256, Block_size: 4096}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, ro.Fd(), unix.FS_IOC_ENABLE_VERITY, uintptr(unsafe.Pointer(&arg)))
	switch errno {
	case 0:
		return "supported"
	case unix.EOPNOTSUPP, unix.ENOTTY:
		return "unsupported"
	}
	return "unknown"
}

// erofsSettings adds what the host's containerd offers for EROFS layers
// to the runtime item: evidence always, a warning where a setting keeps
// the snapshotter from working.
func (c *checker) erofsSettings(r *runtimeFindings) {
	for _, e := range c.h.Engines {
		x := e.Erofs
		if e.Kind != EngineContainerd || !e.Reachable || x == nil {
			continue
		}
		if !x.Snapshotter {
			if x.InitError != "" {
				r.ev("containerd EROFS snapshotter: did not load: %s", x.InitError)
				if strings.Contains(x.InitError, "fsverity") {
					r.add(Warn, "containerd's EROFS snapshotter did not load: its root has no fs-verity",
						"remove enable_fsverity from [plugins.\"io.containerd.snapshotter.v1.erofs\"] (or put its root on a file system with fs-verity, e.g. ext4 with tune2fs -O verity), then restart containerd")
				}
			} else {
				r.ev("containerd EROFS snapshotter: not in this containerd (2.2+ has it)")
			}
			continue
		}
		mkfs := "mkfs.erofs " + x.Mkfs
		if x.Mkfs == "" {
			mkfs = "no mkfs.erofs"
		}
		r.ev("containerd EROFS snapshotter: loaded (root %s), fs-verity %s, %s", x.Root, x.FsVerity, mkfs)
		r.ev("kiln warm --unpack writes: EROFS images into erofs (no untar), and TAG-erofs for a TAG that names it; tar images into %s (--snapshotter erofs converts them once)", x.WarmTar)
		if x.Mkfs == "" && c.h.ContainerdConfig != nil && c.h.ContainerdConfig.Snapshotter == "erofs" {
			r.add(Warn, "containerd snapshotter = erofs but no mkfs.erofs on PATH: tar layers cannot be converted",
				"install erofs-utils 1.8 or newer (Debian 13, Ubuntu 24.04: apt install erofs-utils; Debian 12 ships 1.5: build it from its source, git.kernel.org/pub/scm/linux/kernel/git/xiang/erofs-utils.git)")
		}
		r.oks = append(r.oks, fmt.Sprintf("EROFS snapshotter (fs-verity %s)", x.FsVerity))
	}
}
