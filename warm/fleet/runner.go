package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kiln-build/kiln/internal/termtext"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
)

// Exit codes of `kiln warm` that fleet branches on (cmd/kiln's ExitOK
// and ExitNotReady: with --dry-run, 5 means something is missing; a kiln
// before the one exit-code table said 3, still read as such from hosts
// that run an older binary).
const (
	warmExitReady      = 0
	warmExitMissing    = 5
	warmExitMissingOld = 3
)

// Host states in a Result.
const (
	StateWarm   = "warm"   // every blob of the warm set is present
	StateCold   = "cold"   // the dry run found blobs missing
	StateFailed = "failed" // the host could not be warmed or asked
)

// Result is one host's outcome.
type Result struct {
	Host         string          `json:"host"`
	Address      string          `json:"address"`
	Mode         Mode            `json:"mode"`
	Target       string          `json:"target,omitempty"`
	State        string          `json:"state"`
	Ready        bool            `json:"ready"`
	MissingBytes int64           `json:"missing_bytes"`
	FetchedBytes int64           `json:"fetched_bytes"`
	PushedBytes  int64           `json:"pushed_bytes,omitempty"`
	Seconds      float64         `json:"seconds"`
	BinaryCopied bool            `json:"binary_copied"`
	ExitCode     int             `json:"exit_code"` // the host's kiln warm exit status; -1 when it never ran or was cut off
	Error        string          `json:"error,omitempty"`
	Warm         json.RawMessage `json:"warm,omitempty"` // the host's kiln.warm/v1 report
}

// Options configure a fleet run.
type Options struct {
	Refs []string
	// Target and Namespace apply to hosts whose entry names none.
	Target    string
	Namespace string
	// WarmArgs are extra `kiln warm` flags passed to every host (already
	// split into arguments: --platform, --unpack, --limit-rate, ...).
	WarmArgs []string
	// DryRun asks each host what it is missing and changes nothing (kiln
	// warm status).
	DryRun bool
	// Parallel bounds how many hosts are worked on at once (default 8).
	Parallel int
	SSH      SSHConfig
	// Binary is copied to hosts that have no kiln_path.
	Binary *Binary
	// Registry are the options for reaching the registry from here, for
	// push-mode hosts (insecure registries).
	Registry []registry.Option
	// Event, when set, is called as each host moves on (connecting,
	// copying kiln, warming, pushing, done); calls may come from several
	// goroutines at once.
	Event func(host, what string)
}

// Run works on every host, at most Parallel at once, and returns one Result
// per host in the hosts' order. A host's failure is recorded in its Result;
// Run itself only fails on a cancelled context.
func Run(ctx context.Context, hosts []Host, o Options) []Result {
	par := o.Parallel
	if par <= 0 {
		par = 8
	}
	res := make([]Result, len(hosts))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				res[i] = failed(h, o, time.Now(), ctx.Err())
				return
			}
			defer func() { <-sem }()
			res[i] = runHost(ctx, h, o)
			o.event(h.Name, "done: "+res[i].State)
		}()
	}
	wg.Wait()
	return res
}

func (o *Options) event(host, what string) {
	if o.Event != nil {
		o.Event(host, what)
	}
}

func failed(h Host, o Options, start time.Time, err error) Result {
	return Result{Host: h.Name, Address: h.Address, Mode: h.Mode, Target: or(h.Target, o.Target), State: StateFailed, ExitCode: -1, Seconds: since(start), Error: termtext.Clean(err.Error())}
}

func since(t time.Time) float64 { return float64(time.Since(t).Milliseconds()) / 1000 }

func runHost(ctx context.Context, h Host, o Options) (r Result) {
	start := time.Now()
	target := or(h.Target, o.Target)
	if target == "" {
		return failed(h, o, start, errors.New("no target: set target in the hosts file or pass --target"))
	}
	o.event(h.Name, "connecting")
	c, err := Dial(ctx, h, o.SSH)
	if err != nil {
		return failed(h, o, start, err)
	}
	defer c.Close()
	kiln := h.KilnPath
	copied := false
	if kiln == "" {
		o.event(h.Name, "checking kiln binary")
		if kiln, copied, err = c.EnsureBinary(ctx, o.Binary); err != nil {
			return failed(h, o, start, err)
		}
	}
	defer func() {
		r.BinaryCopied = copied
		r.Seconds = since(start)
	}()
	extra := o.WarmArgs
	var sent atomic.Int64
	if h.Mode == ModePush {
		o.event(h.Name, "opening registry tunnel")
		mirrors, closeTunnels, err := c.openTunnels(ctx, o.Refs, o.Registry, &sent)
		if err != nil {
			return failed(h, o, start, fmt.Errorf("push: %w", err))
		}
		defer closeTunnels()
		extra = append(append([]string(nil), o.WarmArgs...), mirrors...)
	}
	args := warmArgs(o.Refs, target, or(h.Namespace, o.Namespace), extra)
	what := "warm"
	if o.DryRun {
		args = append(args, "--dry-run")
		what = "dry run"
	}
	o.event(h.Name, what)
	rep, raw, code, err := c.warm(ctx, kiln, args, nil, func() { o.event(h.Name, what+" started") })
	r = result(h, target, rep, raw, code, err)
	r.PushedBytes = sent.Load()
	return r
}

// warmArgs builds `kiln warm` arguments; --json and --progress none make
// the host's answer one machine-readable object.
func warmArgs(refs []string, target, ns string, extra []string) []string {
	args := append([]string{"warm"}, refs...)
	args = append(args, "--target", target)
	if ns != "" {
		args = append(args, "--namespace", ns)
	}
	args = append(args, extra...)
	return append(args, "--json", "--progress", "none")
}

func command(kiln string, args []string) string {
	q := []string{shq(kiln)}
	for _, a := range args {
		q = append(q, shq(a))
	}
	return strings.Join(q, " ")
}

// warm runs the host's kiln warm and parses its report. A report that does
// not parse is an error that quotes the host's last stderr line.
func (c *Conn) warm(ctx context.Context, kiln string, args []string, stdin io.Reader, started func()) (*warm.Report, json.RawMessage, int, error) {
	return c.warmCmd(ctx, command(kiln, args), stdin, started)
}

func (c *Conn) warmCmd(ctx context.Context, cmd string, stdin io.Reader, started func()) (*warm.Report, json.RawMessage, int, error) {
	out, errs, code, err := c.output(ctx, cmd, stdin, started)
	if err != nil {
		return nil, nil, code, err
	}
	return parseWarm(out, code, errs)
}

// parseWarm reads a kiln warm --json run's stdout, exit status and stderr
// into its report, or the error that names why there is none or why the
// run failed.
func parseWarm(stdout []byte, code int, stderr string) (*warm.Report, json.RawMessage, int, error) {
	raw := bytes.TrimSpace(stdout)
	var rep warm.Report
	if len(raw) == 0 || json.Unmarshal(raw, &rep) != nil || rep.Schema == "" {
		msg := lastLine(stderr)
		if msg == "" {
			msg = "no report on stdout"
		}
		return nil, nil, code, fmt.Errorf("kiln warm exit %d: %s", code, msg)
	}
	var err error
	if code != warmExitReady && code != warmExitMissing {
		err = fmt.Errorf("kiln warm exit %d: %s", code, firstNonEmpty(lastLine(stderr), blobErrors(&rep)))
	}
	return &rep, json.RawMessage(raw), code, err
}

// NodeResult is the Result of a kiln warm --dry-run --json run on this
// node (kiln warm status --node, in a Kubernetes pod): the same row
// --hosts makes for an SSH host, named by the node.
func NodeResult(node, target string, stdout []byte, code int, stderr string) Result {
	rep, raw, code, err := parseWarm(stdout, code, stderr)
	return result(Host{Name: node, Mode: ModePull}, target, rep, raw, code, err)
}

// ReadStatusLogs collects the kiln warm status --node lines of a
// cluster's status pods, as `kubectl logs -l ... [--prefix]` prints them
// (name names the input in errors): one Result per node, the last line
// of a node winning (a restarted pod reports again), in order of first
// appearance. Lines that are not JSON objects (kubectl's own notes, a
// "[pod/NAME/CONTAINER] " prefix before the object is skipped) are
// ignored; an object that is not a status line is an error naming its
// line.
func ReadStatusLogs(r io.Reader, name string) ([]Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var res []Result
	at := map[string]int{}
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			if i := strings.Index(line, "] "); i > 0 && !strings.HasPrefix(line, "[{") {
				line = strings.TrimSpace(line[i+2:])
			}
		}
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var row Result
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&row); err != nil {
			return nil, fmt.Errorf("%s:%d: not a kiln warm status line: %v", name, n, err)
		}
		// A node's log line is the node's text: cleaned before anyone
		// prints it.
		row.Host, row.Address, row.Target, row.Error = termtext.Clean(row.Host), termtext.Clean(row.Address), termtext.Clean(row.Target), termtext.Clean(row.Error)
		if row.Host == "" {
			return nil, fmt.Errorf("%s:%d: host: empty (kiln warm status --node NAME prints it)", name, n)
		}
		switch row.State {
		case StateWarm, StateCold, StateFailed:
		default:
			return nil, fmt.Errorf("%s:%d: state: %q is not warm, cold or failed", name, n, row.State)
		}
		if i, ok := at[row.Host]; ok {
			res[i] = row
			continue
		}
		at[row.Host] = len(res)
		res = append(res, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("%s: no kiln warm status lines (kubectl logs -l app.kubernetes.io/instance=NAME -c status --prefix --tail=-1)", name)
	}
	return res, nil
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

func blobErrors(rep *warm.Report) string {
	var errs []string
	for _, b := range rep.Blobs {
		if b.Error != "" {
			errs = append(errs, b.Digest+": "+b.Error)
		}
	}
	return strings.Join(errs, "; ")
}

func result(h Host, target string, rep *warm.Report, raw json.RawMessage, code int, err error) Result {
	r := Result{Host: h.Name, Address: h.Address, Mode: h.Mode, Target: target, ExitCode: code, Warm: raw}
	if rep != nil {
		r.Ready = rep.Ready
		r.MissingBytes = rep.MissingBytes
		r.FetchedBytes = rep.FetchedBytes
	}
	switch {
	case err != nil:
		// The error may quote the host's stderr or report: no terminal
		// escapes from there reach whoever prints it.
		r.State, r.Error = StateFailed, termtext.Clean(err.Error())
	case code == warmExitReady && (rep.Ready || rep.DryRun && rep.MissingBytes == 0):
		r.State, r.Ready = StateWarm, true
	case code == warmExitMissing || code == warmExitMissingOld:
		r.State = StateCold
	default:
		r.State, r.Error = StateFailed, fmt.Sprintf("kiln warm exit %d but the report says not ready", code)
	}
	return r
}
