// Package erofs turns one OCI tar layer into a native EROFS layer
// (application/vnd.erofs.layer.v1): a filesystem image that containerd's
// EROFS snapshotter mounts as it is, with no untar, no per-inode metadata
// writes and no fsync of gigabytes of files at a cold start.
//
// The image is written by erofs-utils' mkfs.erofs in tar mode (--tar=f,
// 1.7 or later), with the flags containerd's own conversion uses
// (internal/erofsutils.ConvertTarErofs and core/images/converter/erofs):
// --aufs turns the tar's whiteouts (.wh.NAME) into overlayfs whiteouts (a
// 0/0 character device) and opaque markers (.wh..wh..opq) into the
// trusted.overlay.opaque xattr, so the layers stack under overlayfs as the
// snapshotter expects; -Enoinline_data, 4 KiB blocks and 64 KiB physical
// clusters as there. The filesystem UUID derives from the tar's diff ID
// the way containerd derives it, and the build time is fixed (file times
// are the tar's), so the same tar always gives the same bytes.
//
// The image is compressed inside (Compression): the kernel decompresses a
// block when it is read, and blocks of zeros (the GPU code fat-binary
// pruning zeroed) compress to almost nothing, so they cost no disk. The
// measurements behind the default are in docs/erofs.md.
//
// mkfs.erofs is handed only what kiln itself read as a tar: the stream
// passes through Go's archive/tar reader (layers.WalkTar) and kiln's rule
// for entries (layers.CheckEntry, slim's too) on its way in, entry by
// entry, so bytes that reader refuses (a lone zero block followed by more
// headers, a truncated entry, data after the end marker) fail the
// conversion instead of becoming files only the EROFS form has. Each image
// is checked by fsck.erofs before Convert returns it.
//
// Nothing is held in memory: the tar streams into mkfs.erofs, the image
// is a file, and Convert streams that file to its writer.
package erofs
