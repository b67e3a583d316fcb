package hostcheck

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fsNames maps statfs f_type magic numbers (linux/magic.h) to names.
var fsNames = map[int64]string{
	0xEF53:     "ext4", // ext2/3/4 share the magic
	0x58465342: "xfs",
	0x9123683E: "btrfs",
	0x01021994: "tmpfs",
	0x794C7630: "overlay",
	0x6969:     "nfs",
	0x2FC12FC1: "zfs",
	0x65735546: "fuse",
	0x00C36400: "ceph",
	0xFF534D42: "cifs",
	0x0BD00BD0: "lustre",
	0x01021997: "9p",
	0x73717368: "squashfs",
	0x858458F6: "ramfs",
	0x4D44:     "vfat",
	0x5346544E: "ntfs",
	0x47504653: "gpfs",
}

// networkFS are filesystems where a model load reads over the network.
var networkFS = map[string]bool{"nfs": true, "cifs": true, "ceph": true, "lustre": true, "fuse": true, "9p": true, "gpfs": true}

// tmpFS are filesystems that do not survive a reboot.
var tmpFS = map[string]bool{"tmpfs": true, "ramfs": true, "overlay": true}

// ProbeVolume describes a directory: exists, writable (a probe file is
// created and removed), filesystem type and free space.
func ProbeVolume(path string) Volume {
	v := Volume{Path: path}
	fi, err := os.Stat(path)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	if !fi.IsDir() {
		v.Error = fmt.Sprintf("%s is not a directory", path)
		return v
	}
	v.Exists = true
	var err2 error
	if v.FSType, v.FreeBytes, v.TotalBytes, err2 = statFS(path); err2 != nil {
		v.Error = err2.Error()
	}
	f, err := os.CreateTemp(path, ".kiln-probe-*")
	if err != nil {
		v.Error = "not writable: " + err.Error()
		return v
	}
	_, werr := f.Write([]byte("kiln host check\n"))
	cerr := f.Close()
	rerr := os.Remove(f.Name())
	switch {
	case werr != nil:
		v.Error = "write: " + werr.Error()
	case cerr != nil:
		v.Error = "close: " + cerr.Error()
	case rerr != nil:
		v.Error = "remove probe: " + rerr.Error()
	default:
		v.Writable = true
	}
	return v
}

// statFS reads a filesystem's type and free (to unprivileged users) and
// total bytes, without writing anything.
func statFS(path string) (fsType string, free, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "", 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	fsType = fsNames[int64(st.Type)]
	if fsType == "" {
		fsType = fmt.Sprintf("0x%x", st.Type)
	}
	return fsType, int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}
