package cmdutil

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"github.com/vbauerster/cupwriter"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/termtable"
)

// ProgressMode is a --progress value. Every verb that draws progress
// takes these words (bars is tty's other name).
type ProgressMode string

// The --progress words.
const (
	ProgressAuto  ProgressMode = "auto"
	ProgressTTY   ProgressMode = "tty"
	ProgressPlain ProgressMode = "plain"
	ProgressNone  ProgressMode = "none"
)

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

// ParseProgress reads a --progress value: auto, tty, plain or none (or an
// old alias: bars, quiet).
func ParseProgress(s string) (ProgressMode, error) {
	switch s = NormalizeProgress(s); s {
	case "auto", "tty", "plain", "none":
		return ProgressMode(s), nil
	}
	return "", UsageErr("--progress: %q is not one of %s", s, ProgressWords)
}

// CheckProgress validates a --progress value, as ParseProgress reads it.
func CheckProgress(mode string) error {
	_, err := ParseProgress(mode)
	return err
}

// plainMin is the smallest total auto mode reports on a non-terminal:
// short runs would only add noise to a CI log.
const plainMin = 256 << 20

// Progress draws one bar per counter on a terminal (mpb: cursor-up and
// clear redraws at the terminal's width, with rate and ETA), or writes a
// line per event when the output is not a terminal or the mode is plain
// (a bar's start, its progress every few seconds, its end). Progress
// never goes to stdout, which carries data.
type Progress struct {
	w      io.Writer
	mode   ProgressMode // resolved: tty, plain or none
	auto   bool
	width  int
	every  time.Duration
	pool   *mpb.Progress
	mu     sync.Mutex
	bars   []*trackedBar
	stop   chan struct{}
	exited chan struct{}
	once   sync.Once
}

type trackedBar struct {
	label     string
	total     int64
	cur       func() int64
	transient bool
	bar       *mpb.Bar // nil in plain mode
	start     time.Time
	last      int64 // plain: what the last line reported
}

// ProgressOption tunes NewProgress.
type ProgressOption func(*Progress)

// ProgressWidth draws for a terminal this many columns wide instead of
// asking the terminal (tests, and writers that are not files).
func ProgressWidth(n int) ProgressOption { return func(p *Progress) { p.width = n } }

// NewProgress starts a display on w in mode (a --progress value; an
// invalid one reads as auto). Auto draws bars on a terminal and lines
// for large totals elsewhere.
func NewProgress(w io.Writer, mode string, opts ...ProgressOption) *Progress {
	m, err := ParseProgress(mode)
	if err != nil {
		m = ProgressAuto
	}
	p := &Progress{w: w, mode: m, stop: make(chan struct{}), exited: make(chan struct{})}
	for _, o := range opts {
		o(p)
	}
	tty := IsTerminal(w)
	if m == ProgressAuto {
		p.auto = true
		p.mode = ProgressPlain
		if tty {
			p.mode = ProgressTTY
		}
	}
	if p.width == 0 {
		p.width = TermWidth(w)
	}
	switch p.mode {
	case ProgressNone:
		close(p.exited)
		return p
	case ProgressTTY:
		p.every = 150 * time.Millisecond
		// One column short of the terminal: a line that fills the last
		// column leaves tmux (and other terminals) a row lower after its
		// line break, and every redraw then stacks a new line.
		cw := cupwriter.New(frameStart{w}, false)
		if f, ok := w.(*os.File); ok {
			cw.SetTermFd(int(f.Fd()))
		}
		p.pool = mpb.New(mpb.WithOutput(w), mpb.WithConsoleWriter(narrowConsole{cw}), mpb.WithWidth(p.width-1), mpb.WithRefreshRate(p.every), mpb.WithAutoRefresh())
	default:
		p.every = 5 * time.Second
	}
	go p.loop()
	return p
}

// Counter adds a bar labelled label that fills as the returned counter
// reaches total.
func (p *Progress) Counter(label string, total int64) *atomic.Int64 {
	n := new(atomic.Int64)
	p.Track(label, total, n)
	return n
}

// Track adds a bar labelled label that follows n up to total.
func (p *Progress) Track(label string, total int64, n *atomic.Int64, opts ...BarOption) {
	p.TrackFunc(label, total, n.Load, opts...)
}

// Parts adds a bar labelled label that fills to total with base plus
// every part's counter, and returns how a part starts: a bar of its own
// (transient: drawn on a terminal while the part moves, gone once done)
// and the counter it fills. Warm's layers and a weights pull's files; safe
// to call from several goroutines.
func (p *Progress) Parts(label string, total int64, base *atomic.Int64) func(label string, size int64) *atomic.Int64 {
	var mu sync.Mutex
	var parts []*atomic.Int64
	p.TrackFunc(label, total, func() int64 {
		n := base.Load()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range parts {
			n += c.Load()
		}
		return n
	})
	return func(label string, size int64) *atomic.Int64 {
		c := new(atomic.Int64)
		mu.Lock()
		parts = append(parts, c)
		mu.Unlock()
		p.TrackFunc(label, size, c.Load, Transient())
		return c
	}
}

// BarOption tunes a bar.
type BarOption func(*trackedBar)

// Transient bars are drawn on a terminal only, and vanish once complete:
// a layer's bar while it is read, under the image's.
func Transient() BarOption { return func(b *trackedBar) { b.transient = true } }

// TrackFunc adds a bar labelled label that follows cur up to total.
func (p *Progress) TrackFunc(label string, total int64, cur func() int64, opts ...BarOption) {
	tb := &trackedBar{label: label, total: total, cur: cur, start: time.Now()}
	for _, o := range opts {
		o(tb)
	}
	if p.mode == ProgressNone || (p.auto && p.mode == ProgressPlain && total < plainMin) || (tb.transient && p.pool == nil) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.stop:
		return // stopping: no new bars
	default:
	}
	if p.pool == nil {
		fmt.Fprintf(p.w, "%s: %s to read\n", label, bytesize.Format(total))
		p.bars = append(p.bars, tb)
		return
	}
	// The label takes what the numbers leave: "349.1 MiB / 697.5 MiB
	// 60.1 MiB/s 1m5s" and a bar of at least 10 columns.
	room := max(12, p.width-51)
	bo := []mpb.BarOption{
		mpb.PrependDecorators(decor.Name(termtable.Middle(label, room), decor.WCSyncSpaceR)),
		mpb.AppendDecorators(
			decor.Any(func(s decor.Statistics) string {
				return fmt.Sprintf("%s / %s", bytesize.Format(s.Current), bytesize.Format(s.Total))
			}, decor.WCSyncSpace),
			decor.Any(func(s decor.Statistics) string {
				return bytesize.Format(int64(float64(s.Current)/max(time.Since(tb.start).Seconds(), 0.001))) + "/s"
			}, decor.WCSyncSpace),
			// A bar Stop ends short of its total (an interrupt, a
			// failure) says so instead of an estimate.
			decor.OnAbort(decor.OnComplete(decor.AverageETA(decor.ET_STYLE_GO, decor.WCSyncSpace), "done"), "stopped"),
		),
	}
	if tb.transient {
		bo = append(bo, mpb.BarRemoveOnComplete())
	}
	tb.bar = p.pool.New(total, mpb.BarStyle(), bo...)
	p.bars = append(p.bars, tb)
}

// narrowConsole is mpb's own console writer, reporting the terminal one
// column narrower than it is: mpb fills a bar line to the width it is
// told, and a line that fills the last column leaves tmux (and other
// terminals) a row lower after its line break, so that every redraw's
// cursor-up stacked a new line.
type narrowConsole struct{ *cupwriter.Writer }

func (c narrowConsole) GetTermSize() (int, int, error) {
	w, h, err := c.Writer.GetTermSize()
	return max(w-1, 20), h, err
}

// frameStart writes each frame from column 0: a redraw moves the cursor
// up and clears from where it is, and the terminal's echo of Ctrl-C (^C,
// under the bars) had moved it two columns in; the frame then began
// there, wrapped, and left a torn copy of the bars above the next.
type frameStart struct{ w io.Writer }

func (f frameStart) Write(b []byte) (int, error) {
	if _, err := f.w.Write(append([]byte{'\r'}, b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (p *Progress) loop() {
	defer close(p.exited)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			p.tick()
			return
		case <-t.C:
			p.tick()
		}
	}
}

// tick brings every bar up to its counter; in plain mode it writes a
// line for each bar that moved since the last one.
func (p *Progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.bars {
		n := min(b.cur(), b.total)
		if b.bar != nil {
			b.bar.SetCurrent(n)
			continue
		}
		if n == b.last || n >= b.total {
			continue
		}
		b.last = n
		fmt.Fprintf(p.w, "%s: %s\n", b.label, plainLine(n, b.total, time.Since(b.start)))
	}
}

// plainLine is "1.2 GiB / 4.0 GiB (30%, 60.1 MiB/s, ETA 48s)".
func plainLine(n, total int64, el time.Duration) string {
	pct := 0.0
	if total > 0 {
		pct = 100 * float64(n) / float64(total)
	}
	rate := float64(n) / max(el.Seconds(), 0.001)
	eta := "?"
	if rate > 0 {
		eta = time.Duration(float64(total-n) / rate * float64(time.Second)).Round(time.Second).String()
	}
	return fmt.Sprintf("%s / %s (%.0f%%, %s/s, ETA %s)", bytesize.Format(n), bytesize.Format(total), pct, bytesize.Format(int64(rate)), eta)
}

// Stop draws the bars a last time (complete ones as done, the others
// where they stopped) and waits for the display to finish.
func (p *Progress) Stop() {
	p.once.Do(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		close(p.stop)
		<-p.exited
		p.mu.Lock()
		for _, b := range p.bars {
			n := b.cur()
			switch {
			case b.bar != nil && n >= b.total:
				b.bar.SetTotal(-1, true)
			case b.bar != nil:
				b.bar.Abort(b.transient)
			case n >= b.total:
				fmt.Fprintf(p.w, "%s: done, %s in %s\n", b.label, bytesize.Format(b.total), time.Since(b.start).Round(time.Second))
			default:
				fmt.Fprintf(p.w, "%s: stopped at %s\n", b.label, plainLine(n, b.total, time.Since(b.start)))
			}
		}
		p.mu.Unlock()
		if p.pool != nil {
			p.pool.Wait()
		}
	})
}

// Writer is where a verb writes lines while bars are drawn (retries,
// notices): on a terminal they print above the bars, which a write
// straight to the terminal would tear; elsewhere they go to the output.
func (p *Progress) Writer() io.Writer {
	if p.pool == nil {
		return p.w
	}
	return progressWriter{p}
}

type progressWriter struct{ p *Progress }

func (w progressWriter) Write(b []byte) (int, error) {
	if n, err := w.p.pool.Write(b); err == nil {
		return n, nil
	}
	return w.p.w.Write(b) // the display has ended
}

// ProgressBar is one bar on its own display, as StartProgress draws it.
type ProgressBar struct{ p *Progress }

// StartProgress draws one bar labelled label following done up to total
// (mode: a --progress value). Stop it when the work ends.
func StartProgress(w io.Writer, mode, label string, total int64, done *atomic.Int64) *ProgressBar {
	p := NewProgress(w, mode)
	p.Track(label, total, done)
	return &ProgressBar{p: p}
}

// Stop draws the bar a last time.
func (b *ProgressBar) Stop() { b.p.Stop() }

// Writer is where lines go while the bar is drawn (Progress.Writer).
func (b *ProgressBar) Writer() io.Writer { return b.p.Writer() }
