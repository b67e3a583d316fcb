package fleet

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/recipes"
)

// Mode says how a host gets its blobs.
type Mode string

const (
	// ModePull: the host pulls from the registry itself (the default).
	ModePull Mode = "pull"
	// ModePush: the host cannot reach the registry; blobs are fetched here
	// and streamed to it over SSH.
	ModePush Mode = "push"
)

// HostSpec is one host's settings as written in a hosts file; empty fields
// take the file's defaults.
type HostSpec struct {
	Name         string `yaml:"name,omitempty"`
	Address      string `yaml:"address,omitempty"`
	User         string `yaml:"user,omitempty"`
	IdentityFile string `yaml:"identity_file,omitempty"`
	Target       string `yaml:"target,omitempty"`
	Namespace    string `yaml:"namespace,omitempty"`
	Mode         Mode   `yaml:"mode,omitempty"`
	// KilnPath runs an existing kiln on the host instead of copying one.
	KilnPath string `yaml:"kiln_path,omitempty"`
}

// HostsFile is the hosts file's shape.
type HostsFile struct {
	Defaults HostSpec   `yaml:"defaults,omitempty"`
	Hosts    []HostSpec `yaml:"hosts"`
}

// Host is a resolved host: defaults applied, address with a port.
type Host struct {
	Name         string `json:"name"`
	Address      string `json:"address"` // host:port
	User         string `json:"user"`
	IdentityFile string `json:"identity_file,omitempty"`
	Target       string `json:"target,omitempty"`
	Namespace    string `json:"namespace,omitempty"`
	Mode         Mode   `json:"mode"`
	KilnPath     string `json:"kiln_path,omitempty"`
}

// LoadHosts reads and validates a hosts file.
func LoadHosts(path string) ([]Host, error) {
	data, err := localfile.ReadFile(path, "hosts file", localfile.MaxConfig)
	if err != nil {
		return nil, err
	}
	return ParseHosts(path, data)
}

var hostNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ParseHosts decodes a hosts file strictly (unknown keys and wrong types are
// errors) and resolves each host against the defaults. Errors name the file,
// line and field; several are joined.
func ParseHosts(file string, data []byte) ([]Host, error) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, yamlErr(file, err)
	}
	var body ast.Node
	for _, d := range f.Docs {
		if d != nil && d.Body != nil {
			if body != nil {
				pos := d.Body.GetToken().Position
				return nil, &recipes.FieldError{File: file, Line: pos.Line, Col: pos.Column, Msg: "a hosts file is one YAML document"}
			}
			body = d.Body
		}
	}
	if body == nil {
		return nil, &recipes.FieldError{File: file, Msg: "empty hosts file: need a hosts: list"}
	}
	var hf HostsFile
	if err := decode(body, &hf); err != nil {
		return nil, yamlErr(file, err)
	}
	var errs []error
	fail := func(path, format string, a ...any) {
		fe := &recipes.FieldError{File: file, Path: path, Msg: fmt.Sprintf(format, a...)}
		if p, err := yaml.PathString("$." + path); err == nil {
			if n, err := p.FilterNode(body); err == nil && n != nil {
				pos := n.GetToken().Position
				fe.Line, fe.Col = pos.Line, pos.Column
			}
		}
		errs = append(errs, fe)
	}
	if len(hf.Hosts) == 0 {
		fail("hosts", "no hosts listed")
	}
	d := hf.Defaults
	if d.Name != "" {
		fail("defaults.name", "a name belongs to one host, not the defaults")
	}
	if d.Address != "" {
		fail("defaults.address", "an address belongs to one host, not the defaults")
	}
	checkMode(d.Mode, "defaults.mode", fail)
	seen := map[string]int{}
	var hosts []Host
	for i, s := range hf.Hosts {
		at := fmt.Sprintf("hosts[%d]", i)
		h := Host{
			Name: s.Name, User: or(s.User, d.User), IdentityFile: expandHome(or(s.IdentityFile, d.IdentityFile)),
			Target: or(s.Target, d.Target), Namespace: or(s.Namespace, d.Namespace),
			Mode: Mode(or(string(s.Mode), string(d.Mode))), KilnPath: or(s.KilnPath, d.KilnPath),
		}
		if h.Mode == "" {
			h.Mode = ModePull
		}
		checkMode(s.Mode, at+".mode", fail)
		if s.Address == "" {
			fail(at, "address is required (host or host:port)")
		} else if addr, err := normalizeAddress(s.Address); err != nil {
			fail(at+".address", "%v", err)
		} else {
			h.Address = addr
		}
		if h.Name == "" {
			h.Name = s.Address
		} else if !hostNameRE.MatchString(h.Name) {
			fail(at+".name", "%q: use letters, digits, '.', '_' and '-'", h.Name)
		}
		if j, dup := seen[h.Name]; dup {
			fail(at+".name", "%q is also hosts[%d]", h.Name, j)
		}
		seen[h.Name] = i
		if h.User == "" {
			h.User = currentUser()
		}
		hosts = append(hosts, h)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return hosts, nil
}

func checkMode(m Mode, path string, fail func(string, string, ...any)) {
	switch m {
	case "", ModePull, ModePush:
	default:
		fail(path, "%q is not pull or push", m)
	}
}

// normalizeAddress returns host:port, defaulting the port to 22.
func normalizeAddress(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		// No port (or a bare IPv6 literal).
		if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
			return net.JoinHostPort(s, "22"), nil
		}
		if strings.Contains(s, ":") {
			return "", fmt.Errorf("%q is not host or host:port", s)
		}
		host, port = s, "22"
	}
	if host == "" || strings.ContainsAny(host, " /@") {
		return "", fmt.Errorf("%q: bad host (write the user in user:, not user@host)", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port must be 1-65535", s)
	}
	return net.JoinHostPort(host, port), nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

func currentUser() string {
	for _, k := range []string{"USER", "LOGNAME"} {
		if u := os.Getenv(k); u != "" {
			return u
		}
	}
	return "root"
}

// decode decodes strictly; a panic inside the YAML library becomes an error.
func decode(body ast.Node, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cannot decode this YAML: %v", p)
		}
	}()
	return yaml.NodeToValue(body, v, yaml.Strict())
}

func yamlErr(file string, err error) error {
	var ye yaml.Error
	if !errors.As(err, &ye) || ye.GetToken() == nil {
		return &recipes.FieldError{File: file, Msg: err.Error()}
	}
	tk := ye.GetToken()
	fe := &recipes.FieldError{File: file, Line: tk.Position.Line, Col: tk.Position.Column, Msg: ye.GetMessage()}
	var uf *yaml.UnknownFieldError
	if errors.As(err, &uf) {
		fe.Msg = fmt.Sprintf("unknown field %q (fields: name, address, user, identity_file, target, namespace, mode, kiln_path)", tk.Value)
	}
	return fe
}
