package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
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
func (c *Conn) Run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer, started func()) (int, error) {
	s, err := c.client.NewSession()
	if err != nil {
		return -1, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	defer s.Close()
	s.Stdin, s.Stdout, s.Stderr = stdin, stdout, stderr
	stop := context.AfterFunc(ctx, func() {
		_ = s.Signal(ssh.SIGTERM)
		s.Close()
	})
	defer stop()
	if err := s.Start(cmd); err != nil {
		return -1, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	if started != nil {
		started()
	}
	err = s.Wait()
	if ctx.Err() != nil {
		return -1, ctx.Err()
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

// Output runs cmd and returns its stdout; a nonzero exit is an error that
// carries the last line of stderr.
func (c *Conn) Output(ctx context.Context, cmd string, stdin io.Reader) (string, error) {
	var out bytes.Buffer
	errb := &tailBuffer{max: 64 << 10}
	code, err := c.Run(ctx, cmd, stdin, &out, errb, nil)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return out.String(), fmt.Errorf("exit %d: %s", code, lastLine(errb.String()))
	}
	return out.String(), nil
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
