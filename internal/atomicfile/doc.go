// Package atomicfile writes files so that a reader (or a rerun after a
// crash) sees either the old content or the complete new content, never a
// part: the bytes go to a temporary file in the destination's directory
// (so the rename cannot cross filesystems), which is fsynced, given its
// final mode, renamed over the destination, and then the directory is
// fsynced so the rename itself survives a power loss.
//
// WriteFile does this for bytes in memory (manifests, index.json, lock and
// marker files); Create returns a *File to stream into (archives) that
// becomes the destination on Commit and disappears on Abort.
package atomicfile
