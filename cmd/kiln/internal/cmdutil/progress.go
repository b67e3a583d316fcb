package cmdutil

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/kiln-build/kiln/internal/bytesize"
)

// ProgressBar draws "label [=====>    ] 1.2 GiB / 4.0 GiB" on a terminal,
// or a line every few seconds when stderr is a pipe (CI logs). Progress
// never goes to stdout, which carries data.
type ProgressBar struct {
	w      io.Writer
	label  string
	total  int64
	done   *atomic.Int64
	tty    bool
	stop   chan struct{}
	exited chan struct{}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// ProgressWords are the --progress values every verb takes, and
// ProgressUsage the flag's one help text (a test holds every verb to it).
const (
	ProgressWords = "auto, tty, plain, none"
	ProgressUsage = "progress on stderr: auto (bars on a terminal), tty, plain (lines, for logs), none"
)

// progressAliases are the older spellings some verbs took, still accepted
// (not shown): bars is tty, quiet is none.
var progressAliases = map[string]string{"bars": "tty", "quiet": "none"}

// ProgressFlag registers --progress (default auto) on fs with the one
// vocabulary: ProgressWords, and the old aliases.
func ProgressFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "progress", "auto", ProgressUsage)
}

// NormalizeProgress maps an old alias to its word (bars → tty, quiet →
// none); others come back as they are.
func NormalizeProgress(mode string) string {
	if w, ok := progressAliases[mode]; ok {
		return w
	}
	return mode
}

// CheckProgress validates a --progress value: one of ProgressWords or an
// old alias, as StartProgress takes them.
func CheckProgress(mode string) error {
	switch NormalizeProgress(mode) {
	case "auto", "tty", "plain", "none":
		return nil
	}
	return UsageErr("--progress: %q is not one of %s", mode, ProgressWords)
}

// StartProgress starts drawing unless mode is "none" (or "auto" on a
// non-terminal for small totals).
func StartProgress(w io.Writer, mode, label string, total int64, done *atomic.Int64) *ProgressBar {
	mode = NormalizeProgress(mode)
	p := &ProgressBar{w: w, label: label, total: total, done: done, tty: isTerminal(w), stop: make(chan struct{}), exited: make(chan struct{})}
	switch mode {
	case "none":
		close(p.exited)
		return p
	case "plain":
		p.tty = false
	case "auto":
		if !p.tty && total < 256<<20 {
			close(p.exited)
			return p
		}
	}
	go p.loop()
	return p
}

func (p *ProgressBar) loop() {
	defer close(p.exited)
	every := 100 * time.Millisecond
	if !p.tty {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-p.stop:
			if p.tty {
				fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", 78))
			}
			return
		case <-t.C:
			p.draw(time.Since(start))
		}
	}
}

func (p *ProgressBar) draw(el time.Duration) {
	n := p.done.Load()
	frac := 0.0
	if p.total > 0 {
		frac = min(1, float64(n)/float64(p.total))
	}
	rate := float64(n) / max(el.Seconds(), 0.001)
	if !p.tty {
		fmt.Fprintf(p.w, "%s: %s / %s (%.0f%%, %s/s)\n", p.label, bytesize.Format(n), bytesize.Format(p.total), 100*frac, bytesize.Format(int64(rate)))
		return
	}
	const width = 28
	fill := int(frac * width)
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	fmt.Fprintf(p.w, "\r%s [%s] %s / %s  %s/s ", p.label, bar, bytesize.Format(n), bytesize.Format(p.total), bytesize.Format(int64(rate)))
}

// Stop erases the bar.
func (p *ProgressBar) Stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	close(p.stop)
	<-p.exited
}
