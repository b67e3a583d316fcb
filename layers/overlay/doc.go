// Package overlay is the one squash of image layers into the filesystem a
// container sees: layers applied in order with the OCI image spec's
// changeset rules, as overlayfs presents them. kiln analyze uses it to
// account for bytes later layers hide; kiln slim to know what is visible
// before it rewrites it.
//
// A Tree holds one node per visible path, each carrying the caller's value
// for the entry that put it there (Tree[T]), and reports through a gone
// callback every value an operation hides: the caller decides what hiding
// costs. Its invariants:
//
//   - Paths are cleaned as rooted paths ("/a/./b/", "a//b" and "../a/b"
//     name "a/b"): ".." never climbs above the root, so no lookup, write or
//     symlink resolution reaches outside the tree. The root is "".
//   - Add puts an entry at its path. Whatever stood there is hidden (a
//     file, or a directory with everything below it), except that a
//     directory over a directory keeps the children and replaces only the
//     directory's own value. Missing parent directories are created
//     implicitly (without a value, and reported to no one); a parent that
//     is a file is hidden and replaced by such a directory. A parent that
//     is a symlink is refused (LinkError): where the entry lands would
//     depend on how the runtime follows links.
//   - Whiteout (".wh.NAME") hides the path and, for a directory,
//     everything below it. Opaque (".wh..wh..opq") hides everything below
//     a directory but keeps the directory. Both do nothing to a path that
//     is not there (or, for Opaque, not a directory), and never remove the
//     root. They hide what lower layers put there, wherever the marker
//     sits in the tar: a caller applies a layer's markers before its other
//     entries (layers.WalkTar has already parsed them).
//   - Hard links are Files: the tree records names; which content a link
//     shares is the caller's (Lookup the target before Add).
//   - Lookup follows no symlinks; Resolve follows them in every component,
//     absolute targets from the root and relative ones from the link's
//     directory, and gives up (nil) after MaxHops links, as Linux does.
//   - Gone is called parents first and children in name order, and Walk
//     and Children go in name order, so what callers derive from a tree
//     does not depend on map order. Only Range, for callers to whom order
//     does not matter, does not sort.
//
// A Tree is not safe for concurrent use, even for reading: Children
// caches the sorted order of a directory.
package overlay
