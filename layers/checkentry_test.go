package layers_test

import (
	"archive/tar"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/layers"
)

// TestCheckEntry: kiln's one rule for entries it rewrites (slim) or
// converts (EROFS) refuses, naming the entry, what tar readers disagree
// on, and lets an ordinary layer's entries through.
func TestCheckEntry(t *testing.T) {
	cases := []struct {
		h     tar.Header
		inErr string
	}{
		{tar.Header{Name: "usr/bin/ls", Typeflag: tar.TypeReg}, ""},
		{tar.Header{Name: "usr/bin/", Typeflag: tar.TypeDir}, ""},
		{tar.Header{Name: "usr/bin/sh", Typeflag: tar.TypeSymlink, Linkname: "../../bin/dash"}, ""},
		{tar.Header{Name: "dev/null", Typeflag: tar.TypeChar}, ""},
		{tar.Header{Name: "ping", Typeflag: tar.TypeReg, PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "x"}}, ""},
		{tar.Header{Name: "../etc/passwd", Typeflag: tar.TypeReg}, "leaves the image root"},
		{tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg}, "leaves the image root"},
		{tar.Header{Name: "a/evil", Typeflag: tar.TypeSymlink, Linkname: "../../etc"}, "climbs out"},
		{tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../etc/shadow"}, "leaves the image root"},
		{tar.Header{Name: "s", Typeflag: tar.TypeGNUSparse}, `"s" is a GNU sparse file`},
		{tar.Header{Name: "s", Typeflag: tar.TypeReg, PAXRecords: map[string]string{"GNU.sparse.major": "1"}}, "GNU sparse"},
		{tar.Header{Name: "v", Typeflag: 'V'}, `"v" has tar type 'V'`},
		{tar.Header{Name: "c", Typeflag: tar.TypeCont}, `"c" has tar type '7'`},
		{tar.Header{Name: "g", Typeflag: tar.TypeXGlobalHeader}, "tar type 'g'"},
		{tar.Header{Name: "dev/hide", Typeflag: tar.TypeChar, Size: 1024}, `"dev/hide" (tar type '3') declares 1024 bytes of data`},
		{tar.Header{Name: "s", Typeflag: tar.TypeSymlink, Linkname: "a", Size: 1024}, "declares 1024 bytes of data"},
		{tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "a", Size: 3}, "declares 3 bytes of data"},
		{tar.Header{Name: "d/", Typeflag: tar.TypeDir, Size: 512}, "declares 512 bytes of data"},
		{tar.Header{Name: "x", Typeflag: tar.TypeReg, PAXRecords: map[string]string{"SCHILY.xattr.user." + strings.Repeat("a", 295): "v"}}, "of 300 bytes, over Linux's limit of 255"},
		{tar.Header{Name: "x", Typeflag: tar.TypeReg, PAXRecords: map[string]string{"LIBARCHIVE.xattr.user." + strings.Repeat("a", 295): "v"}}, "over Linux's limit of 255"},
		{tar.Header{Name: "x", Typeflag: tar.TypeReg, PAXRecords: map[string]string{"SCHILY.xattr.user.big": strings.Repeat("v", 65<<10)}}, "over Linux's limit of 65536"},
	}
	for _, tc := range cases {
		e := &layers.Entry{Header: &tc.h}
		e.Path, e.Escapes = layers.CleanPath(tc.h.Name)
		err := layers.CheckEntry(e)
		if tc.inErr == "" && err != nil || tc.inErr != "" && (err == nil || !strings.Contains(err.Error(), tc.inErr)) {
			t.Errorf("%q (type %q): CheckEntry = %v, want %q", tc.h.Name, tc.h.Typeflag, err, tc.inErr)
		}
	}
}
