package overlay_test

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/layers/overlay"
)

// op is one layer entry: "file", "dir", "link" (target in link), "wh"
// (whiteout) or "opq" (opaque marker).
type op struct{ kind, path, link string }

func file(p string) op            { return op{kind: "file", path: p} }
func dir(p string) op             { return op{kind: "dir", path: p} }
func symlink(p, target string) op { return op{kind: "link", path: p, link: target} }
func wh(p string) op              { return op{kind: "wh", path: p} }
func opq(p string) op             { return op{kind: "opq", path: p} }

// squash applies layers as the package's callers do (markers first, then
// the rest in order); every entry's value is "layer:path" as written. It
// returns the tree, the values hidden in order, and the first error.
func squash(layers ...[]op) (*overlay.Tree[string], []string, error) {
	t := overlay.New[string]()
	var gone []string
	hide := func(v string) { gone = append(gone, v) }
	for i, l := range layers {
		for _, o := range l {
			switch o.kind {
			case "wh":
				t.Whiteout(o.path, hide)
			case "opq":
				t.Opaque(o.path, hide)
			}
		}
		for _, o := range l {
			v := fmt.Sprintf("%d:%s", i, o.path)
			var err error
			switch o.kind {
			case "file":
				err = t.Add(o.path, overlay.File, "", v, hide)
			case "dir":
				err = t.Add(o.path, overlay.Dir, "", v, hide)
			case "link":
				err = t.Add(o.path, overlay.Symlink, o.link, v, hide)
			}
			if err != nil {
				return t, gone, err
			}
		}
	}
	return t, gone, nil
}

// listing is the tree as Walk sees it: "path=value" for files, "path/=value"
// for directories (an implicit one has no value), "path->target=value" for
// symlinks; the root is left out.
func listing(t *overlay.Tree[string]) []string {
	var out []string
	t.Root().Walk(func(n *overlay.Node[string]) {
		if n == t.Root() {
			return
		}
		s := n.Path()
		switch n.Kind() {
		case overlay.Dir:
			s += "/"
		case overlay.Symlink:
			s += "->" + n.Link()
		}
		out = append(out, s+"="+n.Value())
	})
	return out
}

func TestSquash(t *testing.T) {
	type L = []op
	cases := []struct {
		name    string
		layers  []L
		want    []string
		gone    []string
		wantErr string
	}{
		{"whiteout of a file",
			[]L{{file("a"), file("b")}, {wh("a")}},
			[]string{"b=0:b"}, []string{"0:a"}, ""},
		{"whiteout of a directory hides its subtree, parents first",
			[]L{{dir("d"), file("d/x"), file("d/e/y"), file("k")}, {wh("d")}},
			[]string{"k=0:k"}, []string{"0:d", "0:d/e/y", "0:d/x"}, ""},
		{"opaque directory keeps itself and this layer's files",
			[]L{{dir("o"), file("o/x"), dir("o/s"), file("o/s/y"), file("p")}, {file("o/z"), opq("o")}},
			[]string{"o/=0:o", "o/z=1:o/z", "p=0:p"}, []string{"0:o/s", "0:o/s/y", "0:o/x"}, ""},
		{"opaque root hides every lower layer",
			[]L{{file("a"), dir("d")}, {opq(""), file("b")}},
			[]string{"b=1:b"}, []string{"0:a", "0:d"}, ""},
		{"a whiteout hides lower layers only, wherever it sits in the tar",
			[]L{{file("a")}, {file("a"), wh("a")}},
			[]string{"a=1:a"}, []string{"0:a"}, ""},
		{"a whiteout then a directory: the directory is new and empty",
			[]L{{dir("d"), file("d/x")}, {wh("d"), dir("d")}},
			[]string{"d/=1:d"}, []string{"0:d", "0:d/x"}, ""},
		{"file replaces a directory",
			[]L{{dir("d"), file("d/x")}, {file("d")}},
			[]string{"d=1:d"}, []string{"0:d", "0:d/x"}, ""},
		{"directory replaces a file",
			[]L{{file("d")}, {dir("d"), file("d/x")}},
			[]string{"d/=1:d", "d/x=1:d/x"}, []string{"0:d"}, ""},
		{"directory over a directory keeps the children",
			[]L{{dir("d"), file("d/x")}, {dir("d")}},
			[]string{"d/=1:d", "d/x=0:d/x"}, []string{"0:d"}, ""},
		{"an implied parent replaces a file",
			[]L{{file("a")}, {file("a/b")}},
			[]string{"a/=", "a/b=1:a/b"}, []string{"0:a"}, ""},
		{"the same path twice in a layer: the second wins",
			[]L{{file("a"), file("a")}},
			[]string{"a=0:a"}, []string{"0:a"}, ""},
		{"a directory replaces a symlink",
			[]L{{symlink("lib", "usr/lib"), dir("usr/lib")}, {dir("lib"), file("lib/x")}},
			[]string{"lib/=1:lib", "lib/x=1:lib/x", "usr/=", "usr/lib/=0:usr/lib"}, []string{"0:lib"}, ""},
		{"writing below a symlink is refused",
			[]L{{symlink("etc2", "/etc")}, {file("etc2/passwd")}},
			[]string{"etc2->/etc=0:etc2"}, nil, `entry "etc2/passwd" is written through the symlink /etc2 → /etc`},
		{"a hard link is a name: whiting out its target leaves it",
			[]L{{file("a"), file("h")}, {wh("a")}},
			[]string{"h=0:h"}, []string{"0:a"}, ""},
		{"markers for what is not there do nothing",
			[]L{{file("f")}, {wh("nope"), wh("f/x"), opq("never/was"), opq("f"), wh(""), wh("..")}},
			[]string{"f=0:f"}, nil, ""},
		{"hostile paths stay inside the root",
			[]L{{file("../x"), file("/abs/y"), file("a/../../z"), file("./b//c/"), file("w")}, {wh("../../w")}},
			[]string{"abs/=", "abs/y=0:/abs/y", "b/=", "b/c=0:./b//c/", "x=0:../x", "z=0:a/../../z"}, []string{"0:w"}, ""},
		{"the root is a directory",
			[]L{{file("/")}},
			nil, nil, "the root is a directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, gone, err := squash(tc.layers...)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if got := listing(tr); !slices.Equal(got, tc.want) {
				t.Errorf("tree\n got %q\nwant %q", got, tc.want)
			}
			if !slices.Equal(gone, tc.gone) {
				t.Errorf("gone\n got %q\nwant %q", gone, tc.gone)
			}
		})
	}
}

func TestLinkError(t *testing.T) {
	_, _, err := squash([]op{symlink("a/l", "../b"), file("a/l/c/d")})
	var le *overlay.LinkError
	if !errors.As(err, &le) || *le != (overlay.LinkError{Path: "a/l/c/d", Link: "a/l", Target: "../b"}) {
		t.Fatalf("error %#v, want a LinkError naming a/l", err)
	}
}

func TestWhiteoutReportsDirectories(t *testing.T) {
	tr, _, _ := squash([]op{dir("d"), file("f"), file("i/x")})
	for _, tc := range []struct {
		path   string
		wasDir bool
	}{{"d", true}, {"f", false}, {"i", true}, {"missing", false}} {
		if got := tr.Whiteout(tc.path, func(string) {}); got != tc.wasDir {
			t.Errorf("Whiteout(%q) wasDir = %v, want %v", tc.path, got, tc.wasDir)
		}
	}
}

func TestRootValue(t *testing.T) {
	tr := overlay.New[string]()
	if err := tr.Add("./", overlay.Dir, "", "root", func(string) {}); err != nil {
		t.Fatal(err)
	}
	if v := tr.Lookup("").Value(); v != "root" {
		t.Errorf("root value %q", v)
	}
}

func TestResolve(t *testing.T) {
	layer := []op{
		file("usr/lib/libc.so"),
		symlink("usr/lib/libc.so.6", "libc.so"),
		symlink("lib", "usr/lib"),
		symlink("lib64", "/usr/lib/"),
		file("etc/shadow"),
		symlink("usr/bin/escape", "../../../../etc/shadow"),
		symlink("loop/a", "b"),
		symlink("loop/b", "a"),
		symlink("self", "self"),
		symlink("dangling", "nowhere"),
		symlink("up", ".."),
	}
	// chain/0 → chain/1 → ... → chain/N, the last a file: N links.
	chain := func(n int) {
		for i := range n {
			layer = append(layer, symlink(fmt.Sprintf("chain%d/%d", n, i), fmt.Sprint(i+1)))
		}
		layer = append(layer, file(fmt.Sprintf("chain%d/%d", n, n)))
	}
	chain(overlay.MaxHops)
	chain(overlay.MaxHops + 1)
	tr, _, err := squash(layer)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{"usr/lib/libc.so", "usr/lib/libc.so"},
		{"usr/lib/libc.so.6", "usr/lib/libc.so"},
		{"lib/libc.so.6", "usr/lib/libc.so"},
		{"/lib64/./libc.so.6", "usr/lib/libc.so"},
		{"lib", "usr/lib"},
		{"usr/bin/escape", "etc/shadow"},
		{"../../lib/../etc/shadow", "etc/shadow"},
		{"up/up/lib/libc.so", "usr/lib/libc.so"},
		{"", ""},
		{"loop/a", "-"},
		{"self", "-"},
		{"dangling", "-"},
		{"usr/lib/libc.so/x", "-"},
		{"missing/x", "-"},
		{fmt.Sprintf("chain%d/0", overlay.MaxHops), fmt.Sprintf("chain%d/%d", overlay.MaxHops, overlay.MaxHops)},
		{fmt.Sprintf("chain%d/0", overlay.MaxHops+1), "-"},
	} {
		got := "-"
		if n := tr.Resolve(tc.in); n != nil {
			got = n.Path()
		}
		if got != tc.want {
			t.Errorf("Resolve(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	// Lookup follows nothing.
	if n := tr.Lookup("lib"); n == nil || n.Kind() != overlay.Symlink || n.Link() != "usr/lib" {
		t.Errorf("Lookup(lib) = %+v, want the symlink", n)
	}
	if n := tr.Lookup("lib/libc.so"); n != nil {
		t.Errorf("Lookup(lib/libc.so) = %s, want nil: lookups do not follow links", n.Path())
	}
}

// Children are sorted, and stay so as children come and go.
func TestChildrenOrder(t *testing.T) {
	tr, _, _ := squash([]op{file("d/b"), file("d/c"), file("d/a")})
	d := tr.Lookup("d")
	names := func() string {
		var s []string
		for _, c := range d.Children() {
			s = append(s, c.Name())
		}
		return strings.Join(s, ",")
	}
	if got := names(); got != "a,b,c" {
		t.Fatalf("children %s", got)
	}
	tr.Add("d/aa", overlay.File, "", "", func(string) {})
	tr.Whiteout("d/b", func(string) {})
	if got := names(); got != "a,aa,c" {
		t.Errorf("children after changes %s, want a,aa,c", got)
	}
}

// Range visits what Walk does, parents first.
func TestRange(t *testing.T) {
	tr, _, _ := squash([]op{file("d/b"), file("d/e/f"), file("a"), symlink("l", "d")})
	var walked, ranged []string
	tr.Root().Walk(func(n *overlay.Node[string]) { walked = append(walked, n.Path()) })
	seen := map[string]bool{}
	tr.Root().Range(func(n *overlay.Node[string]) {
		p := n.Path()
		if dir := strings.TrimPrefix(path.Dir("/"+p), "/"); p != "" && !seen[dir] {
			t.Errorf("%s visited before its directory %q", p, dir)
		}
		seen[p] = true
		ranged = append(ranged, p)
	})
	slices.Sort(ranged)
	if !slices.Equal(walked, ranged) {
		t.Errorf("Range visited %q, Walk %q", ranged, walked)
	}
}
