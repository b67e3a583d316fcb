package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/kiln-build/kiln/internal/localfile"
)

// SSHConfig is how fleet authenticates hosts and itself.
type SSHConfig struct {
	// KnownHosts is the known_hosts file host keys are checked against
	// (default ~/.ssh/known_hosts).
	KnownHosts string
	// InsecureIgnoreHostKey accepts any host key. It is an explicit opt-out
	// for throwaway hosts; fleet never falls back to it on its own.
	InsecureIgnoreHostKey bool
	// Timeout bounds the TCP connect and SSH handshake (default 15s).
	Timeout time.Duration
	// AgentSocket is the ssh-agent socket (default $SSH_AUTH_SOCK).
	AgentSocket string
}

// Conn is an SSH connection to one host.
type Conn struct {
	host   Host
	client *ssh.Client
}

// Dial connects to h and authenticates with h's identity file and any
// ssh-agent keys. The host key must be in the known_hosts file unless the
// config opts out.
func Dial(ctx context.Context, h Host, cfg SSHConfig) (*Conn, error) {
	hostKey, err := hostKeyCallback(cfg)
	if err != nil {
		return nil, err
	}
	auth, closeAgent, err := authMethods(h, cfg)
	if err != nil {
		return nil, err
	}
	defer closeAgent()
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	d := net.Dialer{Timeout: timeout}
	tcp, err := d.DialContext(ctx, "tcp", h.Address)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", h.Address, unwrapOp(err))
	}
	// The handshake has no context of its own: a deadline bounds it, and a
	// cancelled context closes the socket.
	_ = tcp.SetDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { tcp.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(tcp, h.Address, &ssh.ClientConfig{
		User:            h.User,
		Auth:            auth,
		HostKeyCallback: hostKey,
		Timeout:         timeout,
	})
	stop()
	if err != nil {
		tcp.Close()
		return nil, sshErr(h, cfg, err)
	}
	_ = tcp.SetDeadline(time.Time{})
	return &Conn{host: h, client: ssh.NewClient(sc, chans, reqs)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.client.Close() }

func hostKeyCallback(cfg SSHConfig) (ssh.HostKeyCallback, error) {
	if cfg.InsecureIgnoreHostKey {
		return ssh.InsecureIgnoreHostKey(), nil
	}
	file := cfg.KnownHosts
	if file == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("known_hosts: %v (pass --known-hosts)", err)
		}
		file = home + "/.ssh/known_hosts"
	}
	cb, err := knownhosts.New(file)
	if err != nil {
		return nil, fmt.Errorf("known_hosts %s: %v (pass --known-hosts FILE, or --insecure-ignore-host-key for throwaway hosts)", file, unwrapOp(err))
	}
	return cb, nil
}

// authMethods offers the host's identity file first, then every ssh-agent
// key. Key material never leaves this function, and errors name only files.
func authMethods(h Host, cfg SSHConfig) ([]ssh.AuthMethod, func(), error) {
	var signers []ssh.Signer
	var problems []string
	if h.IdentityFile != "" {
		pem, err := localfile.ReadFile(h.IdentityFile, "identity file", localfile.MaxKey)
		if err != nil {
			return nil, func() {}, fmt.Errorf("identity file: %v", unwrapOp(err))
		}
		s, err := ssh.ParsePrivateKey(pem)
		var pp *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &pp):
			problems = append(problems, fmt.Sprintf("identity file %s is passphrase-protected: load it into ssh-agent", h.IdentityFile))
		case err != nil:
			return nil, func() {}, fmt.Errorf("identity file %s: not a private key kiln can read (%v)", h.IdentityFile, err)
		default:
			signers = append(signers, s)
		}
	}
	closeAgent := func() {}
	sock := cfg.AgentSocket
	if sock == "" {
		sock = os.Getenv("SSH_AUTH_SOCK")
	}
	if sock != "" {
		if ac, err := net.Dial("unix", sock); err == nil {
			closeAgent = func() { ac.Close() }
			if as, err := agent.NewClient(ac).Signers(); err == nil {
				signers = append(signers, as...)
			}
		} else {
			problems = append(problems, "ssh-agent at $SSH_AUTH_SOCK: "+unwrapOp(err).Error())
		}
	}
	if len(signers) == 0 {
		problems = append(problems, "no SSH key: set identity_file in the hosts file or load a key into ssh-agent")
		return nil, closeAgent, errors.New(strings.Join(problems, "; "))
	}
	return []ssh.AuthMethod{ssh.PublicKeys(signers...)}, closeAgent, nil
}

// sshErr turns handshake failures into messages that say what to do.
func sshErr(h Host, cfg SSHConfig, err error) error {
	var ke *knownhosts.KeyError
	if errors.As(err, &ke) {
		if len(ke.Want) == 0 {
			return fmt.Errorf("host key of %s is not in %s: refusing to connect (check the key, then add it: ssh-keyscan -p PORT HOST >> %s; or --insecure-ignore-host-key for throwaway hosts)", h.Address, knownHostsName(cfg), knownHostsName(cfg))
		}
		var lines []string
		for _, w := range ke.Want {
			lines = append(lines, fmt.Sprintf("%s:%d", w.Filename, w.Line))
		}
		return fmt.Errorf("host key of %s does NOT match %s: refusing to connect (the host was reinstalled, or someone is in the middle)", h.Address, strings.Join(lines, ", "))
	}
	if strings.Contains(err.Error(), "unable to authenticate") {
		return fmt.Errorf("ssh %s@%s: authentication refused (check user and identity_file)", h.User, h.Address)
	}
	return fmt.Errorf("ssh %s: %v", h.Address, unwrapOp(err))
}

func knownHostsName(cfg SSHConfig) string {
	if cfg.KnownHosts != "" {
		return cfg.KnownHosts
	}
	return "~/.ssh/known_hosts"
}

// unwrapOp drops net.OpError's repetition of addresses we already name.
func unwrapOp(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe
	}
	return err
}

// ErrConnectionLost reports a session that ended without an exit status:
// the connection dropped or the remote sshd went away mid-command.
var ErrConnectionLost = errors.New("connection lost")

// Run runs cmd (a POSIX shell command line) on the host with stdin, writing
// its output to stdout and stderr, and returns its exit status. A cancelled
// context or a dropped connection is an error, never an exit status.
// started, when not nil, is called once the command has been sent.
//
// A cancelled context ends the remote command too: its process group gets
// SIGTERM, then SIGKILL after killGrace, and the connection is closed; a
// hung host never holds kiln, and nothing is left running there.
func (c *Conn) Run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer, started func()) (int, error) {
	s, err := c.client.NewSession()
	if err != nil {
		return -1, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	defer s.Close()
	// The session's shell leads its own process group (sshd calls setsid);
	// it names it on stderr before running cmd, so the group can be
	// signalled from a second session, which works where sshd refuses
	// signal requests (as OpenSSH does for some logins).
	pg := &pgidSniffer{w: stderr}
	s.Stdin, s.Stdout, s.Stderr = stdin, stdout, pg
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		c.stop(s, pg, done)
	}()
	if err := s.Start(pgidMarker + cmd); err != nil {
		return -1, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	if started != nil {
		started()
	}
	err = s.Wait()
	if ctx.Err() != nil {
		return -1, context.Cause(ctx)
	}
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ee.Signal() != "" {
			return -1, fmt.Errorf("killed by signal %s", ee.Signal())
		}
		return ee.ExitStatus(), nil
	default:
		// ExitMissingError, io.EOF, a closed socket: no exit status came.
		return -1, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
}

// killGrace is how long a cancelled remote command has to end on SIGTERM
// (kiln warm keeps its resumable state) before it gets SIGKILL.
const killGrace = 3 * time.Second

// stop ends session s's remote command: SIGTERM to its process group,
// SIGKILL when it has not ended after killGrace, then the connection is
// closed so that Wait returns even when the host does not answer. It
// takes at most killGrace and two seconds more: kiln's shutdown grace
// after a signal covers it.
func (c *Conn) stop(s *ssh.Session, pg *pgidSniffer, done <-chan struct{}) {
	wait := func(ch <-chan struct{}, d time.Duration) bool {
		select {
		case <-done:
			return true
		case <-ch:
		case <-time.After(d):
		}
		return false
	}
	c.signal(s, pg, ssh.SIGTERM)
	if wait(nil, killGrace) {
		return
	}
	// Let SIGKILL reach the host (a second or less) before the connection
	// that carries it is closed.
	if wait(c.signal(s, pg, ssh.SIGKILL), time.Second) || wait(nil, time.Second) {
		return
	}
	s.Close()
	c.client.Close()
}

// signal sends sig to the remote command in the background, twice over:
// a signal request on its session (OpenSSH refuses some), and kill(1) of
// its process group from a session of its own. The channel closes when
// both are sent; on a host that does not answer it never does, and
// closing the connection ends the attempt.
func (c *Conn) signal(s *ssh.Session, pg *pgidSniffer, sig ssh.Signal) <-chan struct{} {
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		_ = s.Signal(sig)
		pgid := pg.pgid.Load()
		if pgid <= 1 {
			return
		}
		ks, err := c.client.NewSession()
		if err != nil {
			return
		}
		defer ks.Close()
		_ = ks.Run(fmt.Sprintf("kill -s %s -- -%d 2>/dev/null", sig, pgid))
	}()
	return sent
}

// pgidMarker makes the remote shell print its pid, which is its process
// group, as the first line of stderr.
const (
	pgidPrefix = "kiln-remote-pgid "
	pgidMarker = "printf '" + pgidPrefix + "%d\\n' $$ >&2; "
)

// pgidSniffer takes the pgidMarker line off the start of stderr and
// passes the rest on.
type pgidSniffer struct {
	w    io.Writer
	head []byte // the first line, until it is complete
	seen bool
	pgid atomic.Int64
}

func (p *pgidSniffer) Write(b []byte) (int, error) {
	n := len(b)
	if !p.seen {
		i := bytes.IndexByte(b, '\n')
		if i < 0 && len(p.head)+len(b) < 64 {
			p.head = append(p.head, b...)
			return n, nil
		}
		p.seen = true
		line := append(p.head, b...)
		if i >= 0 {
			line = append(p.head, b[:i]...)
			b = b[i+1:]
		} else {
			b = nil
		}
		p.head = nil
		if id, ok := strings.CutPrefix(string(line), pgidPrefix); ok {
			if v, err := strconv.ParseInt(id, 10, 64); err == nil {
				p.pgid.Store(v)
			}
		} else {
			// Not the marker (a shell that printed first): keep it.
			b = append(append(line, '\n'), b...)
		}
	}
	if len(b) == 0 {
		return n, nil
	}
	if _, err := p.w.Write(b); err != nil {
		return 0, err
	}
	return n, nil
}

// maxStdout bounds what a host may print on stdout: kiln warm --json
// prints one report there, far smaller.
const maxStdout = 16 << 20

// errStdoutTooLarge fails a host whose command prints more than maxStdout.
var errStdoutTooLarge = fmt.Errorf("the host printed more than %d MiB on stdout, where kiln warm --json prints one report (is kiln_path a kiln binary?)", maxStdout>>20)

// boundedBuffer keeps up to max bytes; the write past that cancels the
// run (which ends the remote command) with errStdoutTooLarge. It is no
// io.ReaderFrom, so every byte passes through Write.
type boundedBuffer struct {
	buf    bytes.Buffer
	max    int
	cancel context.CancelCauseFunc
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > b.max {
		b.cancel(errStdoutTooLarge)
		return 0, errStdoutTooLarge
	}
	return b.buf.Write(p)
}

// output runs cmd, keeping at most maxStdout bytes of its stdout and the
// last 64 KiB of its stderr.
func (c *Conn) output(ctx context.Context, cmd string, stdin io.Reader, started func()) ([]byte, string, int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := &boundedBuffer{max: maxStdout, cancel: cancel}
	errb := &tailBuffer{max: 64 << 10}
	code, err := c.Run(ctx, cmd, stdin, out, errb, started)
	return out.buf.Bytes(), errb.String(), code, err
}

// Output runs cmd and returns its stdout; a nonzero exit is an error that
// carries the last line of stderr.
func (c *Conn) Output(ctx context.Context, cmd string, stdin io.Reader) (string, error) {
	out, errs, code, err := c.output(ctx, cmd, stdin, nil)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return string(out), fmt.Errorf("exit %d: %s", code, lastLine(errs))
	}
	return string(out), nil
}

// shq quotes s for a POSIX shell.
func shq(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@,+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimPrefix(strings.TrimSpace(s), "kiln: ")
}

// tailBuffer keeps the last max bytes written, so a chatty remote cannot
// fill memory and the error at the end is still there.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2*t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	if len(t.b) > t.max {
		return string(t.b[len(t.b)-t.max:])
	}
	return string(t.b)
}
