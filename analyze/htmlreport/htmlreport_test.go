package htmlreport_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/analyze/htmlreport"
	"github.com/kiln-build/kiln/internal/testimage"
)

// report analyzes a small CUDA-shaped image: a weights file (the largest
// file), toolkit files, cuda-compat, many small docs, and a second layer
// that replaces a file (waste).
func report(t *testing.T) *analyze.Report {
	t.Helper()
	l0 := []testimage.Entry{
		testimage.Safetensors("app/models/model.safetensors", 400_000),
		testimage.Sized("usr/local/cuda-12.8/bin/nvcc", 120_000),
		testimage.Sized("usr/local/cuda-12.8/lib64/libcudart.so.12.8.57", 90_000),
		testimage.Sized("usr/local/cuda-12.8/compat/libcuda.so.570.124.06", 60_000),
		testimage.Sized("usr/local/cuda-12.8/include/cuda.h", 30_000),
		testimage.Sized("app/server.py", 40_000),
	}
	for i := range 300 {
		l0 = append(l0, testimage.Sized(fmt.Sprintf("usr/share/doc/pkg%03d/README", i), 100+i))
	}
	l1 := []testimage.Entry{testimage.Sized("app/server.py", 45_000)}
	dir := t.TempDir()
	testimage.WriteLayout(t, dir, "app", testimage.Image(t, testimage.Config{Env: []string{"CUDA_VERSION=12.8.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.8"}},
		testimage.Layer(t, l0, "gzip"), testimage.Layer(t, l1, "zstd")))
	img, err := testkit.OpenImage(context.Background(), "oci:"+dir+":app")
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	rep, err := analyze.Image(context.Background(), img, analyze.Options{Tree: true})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

var rectRe = regexp.MustCompile(`<rect class="f ([^"]*)"( id="largest")? x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" data-path="([^"]*)"`)

func TestPageSelfContained(t *testing.T) {
	rep := report(t)
	var b bytes.Buffer
	if err := htmlreport.Write(&b, rep); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	// Nothing to fetch: no URL, stylesheet link, external script or image.
	for _, bad := range []string{"http://", "https://", "<link", " src=", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("the page refers outside itself: %q", bad)
		}
	}
	// The largest file is a box, the largest one, coloured as weights.
	var largestArea, maxArea float64
	var maxPath string
	for _, m := range rectRe.FindAllStringSubmatch(page, -1) {
		w, _ := strconv.ParseFloat(m[5], 64)
		h, _ := strconv.ParseFloat(m[6], 64)
		if w*h > maxArea {
			maxArea, maxPath = w*h, m[7]
		}
		if m[2] != "" {
			largestArea = w * h
			if m[7] != "/app/models/model.safetensors" || !strings.Contains(m[1], "c-weights") {
				t.Errorf("largest box: %q classes %q", m[7], m[1])
			}
		}
	}
	if maxPath != "/app/models/model.safetensors" || largestArea != maxArea || maxArea < 1200*640*0.3 {
		t.Errorf("largest box %s (%.0f units²), the weights file's %.0f", maxPath, maxArea, largestArea)
	}
	for _, want := range []string{
		`class="f c-dev_tools l-0"`, `data-path="/usr/local/cuda-12.8/bin/nvcc"`, // class and layer per box
		"#tm.by-layer .l-1{fill:",                                                    // layer colouring exists for the toggle
		"/usr/local/cuda-12.8/compat/libcuda.so.570.124.06", "≥ 570.124.06 natively", // CUDA block
		"<td><code>/app/server.py</code></td>", "overwritten", // waste list
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// TestTreeBounded: a filesystem of 20,000 files becomes at most the bound's
// boxes, still sums to the visible bytes and still shows the large files.
func TestTreeBounded(t *testing.T) {
	var es []testimage.Entry
	for d := range 200 {
		for f := range 100 {
			es = append(es, testimage.Sized(fmt.Sprintf("usr/lib/python3/site-packages/p%03d/m%03d.py", d, f), 10+f))
		}
	}
	es = append(es, testimage.Sized("opt/big/one.bin", 3_000_000), testimage.Sized("opt/big/two.bin", 2_000_000))
	dir := t.TempDir()
	testimage.WriteLayout(t, dir, "app", testimage.Image(t, testimage.Config{}, testimage.Layer(t, es, "gzip")))
	img, err := testkit.OpenImage(context.Background(), "oci:"+dir+":app")
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	const bound = 300
	rep, err := analyze.Image(context.Background(), img, analyze.Options{Tree: true, TreeNodes: bound})
	if err != nil {
		t.Fatal(err)
	}
	nodes, files := 0, map[string]bool{}
	var walk func(n *analyze.TreeNode) int64
	walk = func(n *analyze.TreeNode) int64 {
		nodes++
		if !n.Dir && n.Path != "" {
			files[n.Path] = true
		}
		if n.Children == nil {
			return n.Size
		}
		var sum int64
		for _, c := range n.Children {
			sum += walk(c)
		}
		if sum != n.Size {
			t.Errorf("%s: %d bytes, children sum %d", n.Path, n.Size, sum)
		}
		return sum
	}
	if total := walk(rep.Tree); total != rep.VisibleSize {
		t.Errorf("tree sums %d, visible %d", total, rep.VisibleSize)
	}
	if nodes > bound || !files["/opt/big/one.bin"] || !files["/opt/big/two.bin"] {
		t.Errorf("%d nodes (bound %d); big files listed: %v %v", nodes, bound, files["/opt/big/one.bin"], files["/opt/big/two.bin"])
	}
	var b bytes.Buffer
	if err := htmlreport.Write(&b, rep); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "<rect "); n > bound || b.Len() > 200_000 {
		t.Errorf("page of %d bytes with %d rects", b.Len(), n)
	}
}

// TestChromiumDrawsLargestFile opens the page in headless Chromium: the
// page itself checks that the largest file's box is the element on top at
// its centre (data-drawn), and the screenshot shows the box's colour there.
func TestChromiumDrawsLargestFile(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	var b bytes.Buffer
	if err := htmlreport.Write(&b, report(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := func(extra ...string) []string {
		return append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + t.TempDir(), "--window-size=1280,1000", "--hide-scrollbars"}, extra...)
	}
	out, err := exec.Command(bin, flags("--dump-dom", "file://"+page)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	if !regexp.MustCompile(`<rect [^>]*id="largest"[^>]*data-path="/app/models/model.safetensors"[^>]*data-drawn="1"`).Match(out) {
		t.Errorf("chromium did not draw the largest file on top:\n%s", grepLargest(out))
	}
	shot := filepath.Join(dir, "shot.png")
	cmd := exec.Command(bin, flags("--screenshot="+shot, "file://"+page)...)
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, o)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// The weights colour (#1f77b4) covers a large part of the window.
	bnd, n := img.Bounds(), 0
	for y := bnd.Min.Y; y < bnd.Max.Y; y += 4 {
		for x := bnd.Min.X; x < bnd.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r, 0x1f) && near(g, 0x77) && near(bl, 0xb4) {
				n++
			}
		}
	}
	if total := (bnd.Dx() / 4) * (bnd.Dy() / 4); n < total/20 {
		t.Errorf("the weights colour covers %d of %d sampled pixels", n, total)
	}
}

func near(v uint32, want int) bool { d := int(v>>8) - want; return d > -6 && d < 6 }

func grepLargest(dom []byte) string {
	for _, l := range strings.Split(string(dom), "<rect ") {
		if strings.Contains(l, `id="largest"`) {
			return "<rect " + l
		}
	}
	return "(no largest box)"
}

// chromium finds Debian's chromium; without it the test skips unless
// KILN_REQUIRE_CHROMIUM=1.
func chromium(t *testing.T) string {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("KILN_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("no chromium (apt-get install chromium, or scripts/install-deps.sh)")
	}
	t.Skip("no chromium: apt-get install chromium (KILN_REQUIRE_CHROMIUM=1 makes this fail)")
	return ""
}

// TestPageWithDiff: with a baseline the page opens coloured by change,
// lists what was added, removed, grown and shrunk, and still refers to
// nothing outside itself.
func TestPageWithDiff(t *testing.T) {
	dir := t.TempDir()
	base := testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/bin/python3", 50_000), testimage.Sized("usr/share/doc/python3/README", 9_000)}, "gzip")
	app1 := testimage.Layer(t, []testimage.Entry{testimage.Sized("app/server.py", 40_000), testimage.Sized("app/util.py", 30_000)}, "gzip")
	app2 := testimage.Layer(t, []testimage.Entry{testimage.Sized("app/server.py", 45_000), testimage.Sized("app/util.py", 10_000),
		testimage.Safetensors("app/models/model.safetensors", 400_000), testimage.Whiteout("usr/share/doc")}, "gzip")
	testimage.WriteLayout(t, dir, "old", testimage.Image(t, testimage.Config{}, base, app1))
	testimage.WriteLayout(t, dir, "new", testimage.Image(t, testimage.Config{}, base, app2))
	analyzeRef := func(tag string, tree bool) *analyze.Report {
		img, err := testkit.OpenImage(context.Background(), "oci:"+dir+":"+tag)
		if err != nil {
			t.Fatal(err)
		}
		defer img.Close()
		rep, err := analyze.Image(context.Background(), img, analyze.Options{Tree: tree, Files: true})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	old, cur := analyzeRef("old", false), analyzeRef("new", true)
	d, err := analyze.Diff(old, cur, 10)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := htmlreport.Write(&b, cur, htmlreport.WithDiff(d)); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"http://", "https://", "<link", " src=", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("the page refers outside itself: %q", bad)
		}
	}
	for _, want := range []string{
		`<body class="by-change">`, `<svg id="tm" class="by-change"`, "#tm.by-change .d-added{fill:",
		"Changes against oci:" + dir + ":old",
		`class="f c-weights l-1 d-added" id="largest"`, // the treemap's boxes carry their change
		`l-1 d-grown"`, `l-1 d-shrunk"`, `l-0 d-unchanged"`,
		`<td class="chg-added">added</td><td><code>/app/models/model.safetensors</code>`,
		`<td class="chg-removed">removed</td><td><code>/usr/share/doc/python3/README</code>`,
		`<td class="chg-grown">grown</td><td><code>/app/server.py</code>`,
		`<td class="chg-shrunk">shrunk</td><td><code>/app/util.py</code>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Without a baseline the page is as before: by class, no change.
	b.Reset()
	if err := htmlreport.Write(&b, cur); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), " d-") || strings.Contains(b.String(), "Changes against") || !strings.Contains(b.String(), `<body class="by-class">`) {
		t.Error("a page without a baseline shows changes")
	}
}
