package warmcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/termtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/sign"
	"github.com/kiln-build/kiln/warm"
)

// runOn runs kiln ARGS... as cmd/kiln does, stdout on out and stderr on
// errOut (a terminal in these tests), until ctx ends (Ctrl-C).
func runOn(ctx context.Context, out, errOut io.Writer, args ...string) int {
	ios := &cmdutil.IO{In: strings.NewReader(""), Out: out, ErrOut: errOut}
	f := verbkit.New(ios, cmdutil.BuildInfo{}, nil)
	return cmdutil.Execute(ctx, verbkit.NewRoot(f, cmdutil.Leaf(NewCmdWarm)), args, ios)
}

var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// Issue 36, a person at 80 columns: a warm interrupted with Ctrl-C ends
// on one clean line (the bar where it stopped, then kiln's word, exit
// 130); the same command then resumes, its bar ends full (it froze at the
// share fetched) and its summary says how much was resumed, as weights
// pull does; the summary is coloured on a terminal (READY green, states
// green), not on a pipe nor with NO_COLOR.
func TestWarmAtEightyColumns(t *testing.T) {
	const cols = 80
	host := testimage.Registry(t)
	ref := host + "/kiln-warm/ui:v1"
	big := make([]byte, 8<<20)
	rand.New(rand.NewSource(36)).Read(big)
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{{Name: "model.bin", Body: big}}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/x", []byte("x"))}, "gzip")))
	dir := filepath.Join(t.TempDir(), "oci")
	args := []string{"warm", ref, "--target", "oci:" + dir, "--platform", "linux/amd64"}
	t.Setenv("TERM", "xterm-256color")
	t.Setenv("NO_COLOR", "")

	// Ctrl-C once the bar moved: the terminal echoes ^C, the signal
	// cancels the context (cmd/kiln's main).
	tty, out, seen := termtest.OpenTerm(t, cols)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- runOn(ctx, &stdout, tty, append(args, "--limit-rate", "1MiB")...) }()
	termtest.WaitFor(t, "the bar moving", func() bool { return seen(" MiB / ") })
	if _, err := tty.Write([]byte("^C")); err != nil {
		t.Fatal(err)
	}
	termtest.WaitFor(t, "a redraw after the echo", func() bool { return seen("^C\x1b[") || seen("^C\r\x1b[") })
	cancel()
	if c := <-code; c != cmdutil.ExitInterrupted {
		t.Errorf("interrupted warm: exit %d, want %d", c, cmdutil.ExitInterrupted)
	}
	screen := termtest.Screen(out(), cols)
	t.Logf("Ctrl-C at %d columns:\n%s", cols, strings.Join(screen, "\n"))
	if len(screen) != 2 || !strings.HasPrefix(screen[0], "warming oci:") || !strings.HasSuffix(screen[0], " stopped") ||
		screen[1] != "kiln: interrupted; the same command resumes" {
		t.Errorf("after Ctrl-C the terminal shows:\n%s", strings.Join(screen, "\n"))
	}
	for _, l := range screen {
		if n := termtable.Len(l); n >= cols {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}

	// The same command resumes; stdout and stderr on terminals.
	otty, oout, _ := termtest.OpenTerm(t, cols)
	etty, eout, _ := termtest.OpenTerm(t, cols)
	if c := runOn(context.Background(), otty, etty, args...); c != cmdutil.ExitOK {
		t.Fatalf("resumed warm: exit %d", c)
	}
	bars, report := termtest.Screen(eout(), cols), oout()
	summary := termtest.Screen(report, cols)
	t.Logf("the resumed warm at %d columns (stderr, then stdout):\n%s\n%s", cols, strings.Join(bars, "\n"), strings.Join(summary, "\n"))
	if len(bars) != 1 || !strings.HasPrefix(bars[0], "warming oci:") || !strings.HasSuffix(bars[0], " done") {
		t.Errorf("the resumed warm's bar does not end full:\n%s", strings.Join(bars, "\n"))
	} else if m := regexp.MustCompile(`(\S+ \S+) / (\S+ \S+)`).FindStringSubmatch(bars[0]); m == nil || m[1] != m[2] {
		t.Errorf("the resumed warm's bar ends at %v:\n%s", m, bars[0])
	}
	words := strings.Join(strings.Fields(termtest.Plain(report)), " ")
	if !regexp.MustCompile(`fetched \d+\.\d MiB \(\S+ \S+/s\), resumed \d+\.\d MiB, missing 0 B, \d+\.\ds: READY$`).MatchString(words) {
		t.Errorf("the summary does not say what was resumed:\n%s", report)
	}
	if !strings.Contains(report, "\x1b[32mREADY\x1b[0m") || !strings.Contains(report, "\x1b[32mfetched\x1b[0m") {
		t.Errorf("no colour on a terminal:\n%q", report)
	}
	for _, l := range append(bars, summary...) {
		if n := termtable.Len(l); n >= cols {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}

	// Piped, or with NO_COLOR: the same words, no colour.
	var piped bytes.Buffer
	if c := runOn(context.Background(), &piped, io.Discard, args...); c != cmdutil.ExitOK || sgr.MatchString(piped.String()) || !strings.Contains(piped.String(), ": READY\n") {
		t.Errorf("piped: exit %d, colour or no verdict:\n%q", c, piped.String())
	}
	t.Setenv("NO_COLOR", "1")
	otty, oout, _ = termtest.OpenTerm(t, cols)
	c := runOn(context.Background(), otty, io.Discard, args...)
	if o := oout(); c != cmdutil.ExitOK || sgr.MatchString(o) || !strings.Contains(o, ": READY\r\n") {
		t.Errorf("NO_COLOR=1: exit %d, colour or no verdict:\n%q", c, o)
	}
}

// --json says how much was resumed (resumed_bytes, beside fetched_bytes).
func TestWarmJSONResumedBytes(t *testing.T) {
	b, err := json.Marshal(&warm.Report{ResumedBytes: 31 << 20})
	if err != nil || !strings.Contains(string(b), `"resumed_bytes":32505856`) {
		t.Fatalf("%s: %v", b, err)
	}
	var out bytes.Buffer
	writeWarmTable(&out, &warm.Report{Target: "oci:/var/cache/kiln/oci-with-a-long-path", Ready: true, PresentBytes: 2 << 30, FetchedBytes: 1288490189, ResumedBytes: 31 << 20, Seconds: 12.5})
	words := strings.Join(strings.Fields(out.String()), " ")
	if !strings.Contains(words, "present 2.0 GiB, fetched 1.2 GiB (98.3 MiB/s), resumed 31.0 MiB, missing 0 B, 12.5s: READY") {
		t.Errorf("summary:\n%s", out.String())
	}
	for _, l := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		if n := termtable.Len(l); n >= 80 {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
}

// On a terminal a failure is red, as host check's FAIL: the failed blob's
// state, the failed volume's, NOT READY and a refused signature.
func TestWarmFailuresRed(t *testing.T) {
	t.Setenv("TERM", "xterm-256color")
	t.Setenv("NO_COLOR", "")
	tty, out, _ := termtest.OpenTerm(t, 80)
	rep := &warm.Report{Target: "containerd:/run/containerd/containerd.sock",
		Blobs:   []warm.BlobReport{{Digest: "sha256:" + strings.Repeat("a", 64), Kind: "layer", State: warm.StateFailed}},
		Weights: []*warm.WeightsReport{{Ref: "reg/w@sha256:" + strings.Repeat("b", 64), Dir: "/var/lib/kiln/w", State: warm.StateFailed}}}
	writeWarmTable(tty, rep)
	writeWeightsTable(tty, rep.Weights)
	writeSignatures(tty, []*sign.Result{{Ref: "reg/app:1", Digest: "sha256:" + strings.Repeat("c", 64), Reason: "no signature"}})
	o := out()
	for _, want := range []string{"\x1b[31mfailed\x1b[0m", "\x1b[31mNOT READY\x1b[0m", "\x1b[31mREFUSED\x1b[0m"} {
		if !strings.Contains(o, want) {
			t.Errorf("no %q in:\n%q", want, o)
		}
	}
	if n := strings.Count(o, "\x1b[31mfailed\x1b[0m"); n != 2 {
		t.Errorf("%d red failed states, want the blob's and the volume's:\n%q", n, o)
	}
}
