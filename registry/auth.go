package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/configfile"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kiln-build/kiln/internal/procgroup"
	"github.com/kiln-build/kiln/internal/redact"
)

// DefaultHelperTimeout bounds one credential lookup (a docker-credential-*
// helper that waits for a locked keyring or a prompt nobody sees).
const DefaultHelperTimeout = 30 * time.Second

// WithHelperTimeout sets how long a credential lookup may take (default
// DefaultHelperTimeout).
func WithHelperTimeout(d time.Duration) Option { return func(o *Options) { o.helperTimeout = d } }

// keychainGuard wraps the keychain every registry client uses: lookups are
// time-limited, errors never quote a helper's output, and the secrets it
// hands out are remembered so that Redact removes them from any error.
//
// For the Docker-config keychain (the default) kiln runs the credential
// helper itself, under a context that kills it at the timeout; a helper's
// stdout, which may hold a secret, is never put in an error: the error
// names the helper and its exit status.
type keychainGuard struct {
	inner   authn.Keychain
	timeout time.Duration
}

func guardKeychain(k authn.Keychain, timeout time.Duration) authn.Keychain {
	if g, ok := k.(*keychainGuard); ok {
		return g
	}
	if timeout <= 0 {
		timeout = DefaultHelperTimeout
	}
	return &keychainGuard{inner: k, timeout: timeout}
}

// Resolve implements authn.Keychain.
func (g *keychainGuard) Resolve(r authn.Resource) (authn.Authenticator, error) {
	return g.ResolveContext(context.Background(), r)
}

// ResolveContext implements authn.ContextKeychain.
func (g *keychainGuard) ResolveContext(ctx context.Context, r authn.Resource) (authn.Authenticator, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	// The helper run here is killed at the timeout and reports which one
	// hung; the grace is for that report (and the kill) to arrive.
	grace := time.NewTimer(g.timeout + 2*time.Second)
	defer grace.Stop()
	type result struct {
		a   authn.Authenticator
		err error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		if g.inner == authn.DefaultKeychain {
			res.a, res.err = resolveDockerConfig(ctx, r, g.timeout)
		} else {
			res.a, res.err = authn.Resolve(ctx, g.inner, r)
		}
		done <- res
	}()
	select {
	case res := <-done:
		if res.err != nil {
			return nil, fmt.Errorf("credentials for %s: %w", r.RegistryStr(), RedactError(stripHelperOutput(res.err)))
		}
		if rememberAuthenticator(res.a) {
			src := "kiln's keychain"
			if g.inner == authn.DefaultKeychain {
				src = dockerConfigPath()
			}
			rememberCredentialSource(r.RegistryStr(), src)
		}
		return res.a, nil
	case <-grace.C:
		return nil, fmt.Errorf("credentials for %s: no answer within %s (a credential helper that hangs?)", r.RegistryStr(), g.timeout)
	}
}

// rememberAuthenticator records a's secrets for Redact and says whether a
// holds any credential.
func rememberAuthenticator(a authn.Authenticator) bool {
	if a == nil || a == authn.Anonymous {
		return false
	}
	c, err := a.Authorization()
	if err != nil || c == nil || *c == (authn.AuthConfig{}) {
		return false
	}
	for _, s := range []string{c.Password, c.Auth, c.IdentityToken, c.RegistryToken} {
		redact.Remember(s)
	}
	if c.Username != "" && c.Password != "" {
		redact.Remember(c.Username + ":" + c.Password)
	}
	return true
}

// helperOutputRe matches the ", out: `...`" docker-credential-helpers'
// client appends to its errors: the helper's stdout.
var helperOutputRe = regexp.MustCompile("(?s),? out: `.*`")

// stripHelperOutput drops a helper's quoted output from err's message.
func stripHelperOutput(err error) error {
	msg := err.Error()
	clean := helperOutputRe.ReplaceAllString(msg, "")
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, err: err}
}

// resolveDockerConfig is go-containerregistry's Docker keychain, except
// that a credential helper is run here, time-limited, with its output kept
// out of errors. Without a helper for the registry the lookup is ggcr's
// (config auths, Podman's auth file), which runs no program.
func resolveDockerConfig(ctx context.Context, r authn.Resource, timeout time.Duration) (authn.Authenticator, error) {
	cf := loadDockerConfig()
	if cf == nil {
		return authn.Resolve(ctx, authn.DefaultKeychain, r)
	}
	helper, key := credentialHelper(cf, r.RegistryStr())
	if helper == "" {
		return authn.Resolve(ctx, authn.DefaultKeychain, r)
	}
	a, found, err := runCredentialHelper(ctx, helper, key, timeout)
	if err != nil || found {
		return a, err
	}
	// The helper has nothing for this registry: what the config file
	// itself holds, if anything (as Docker does).
	if ac, ok := cf.AuthConfigs[key]; ok && (ac.Auth != "" || ac.Username != "" || ac.IdentityToken != "" || ac.RegistryToken != "") {
		return authn.FromConfig(authn.AuthConfig{Username: ac.Username, Password: ac.Password, Auth: ac.Auth,
			IdentityToken: ac.IdentityToken, RegistryToken: ac.RegistryToken}), nil
	}
	return authn.Anonymous, nil
}

// credentialHelper names the credential helper cf has for the registry
// host (its credHelpers entry, else the credsStore; "" when none) and the
// server URL to ask it for (Docker Hub's is "https://index.docker.io/v1/").
func credentialHelper(cf *configfile.ConfigFile, host string) (helper, key string) {
	key = host
	if key == name.DefaultRegistry {
		key = authn.DefaultAuthKey
	}
	helper = cf.CredentialHelpers[key]
	if helper == "" {
		helper = cf.CredentialHelpers[host]
	}
	if helper == "" {
		helper = cf.CredentialsStore
	}
	return helper, key
}

// HelperCredentials asks the credential helper that the Docker config cf
// names for reg, the way kiln's keychain does: the helper is killed after
// timeout (DefaultHelperTimeout when <= 0), an error names the helper and
// its exit status but never quotes its output, and the secret is
// remembered for Redact. found is false when cf names no helper for reg or
// the helper holds nothing for it.
func HelperCredentials(ctx context.Context, cf *configfile.ConfigFile, reg name.Registry, timeout time.Duration) (a authn.Authenticator, found bool, err error) {
	helper, key := credentialHelper(cf, reg.RegistryStr())
	if helper == "" {
		return nil, false, nil
	}
	if timeout <= 0 {
		timeout = DefaultHelperTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return runCredentialHelper(ctx, helper, key, timeout)
}

// loadDockerConfig finds the config the way go-containerregistry does
// ($HOME/.docker/config.json or $DOCKER_CONFIG/config.json); nil when
// there is none or it does not parse (ggcr's keychain then decides).
func loadDockerConfig() *configfile.ConfigFile {
	found := false
	if home, err := os.UserHomeDir(); err == nil {
		found = isFile(filepath.Join(home, ".docker", "config.json"))
	}
	if d := os.Getenv("DOCKER_CONFIG"); !found && d != "" {
		found = isFile(filepath.Join(d, "config.json"))
	}
	if !found {
		return nil
	}
	cf, err := config.Load(os.Getenv("DOCKER_CONFIG"))
	if err != nil {
		return nil
	}
	return cf
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// runCredentialHelper asks docker-credential-HELPER for serverURL's
// credentials. found is false when the helper has none.
func runCredentialHelper(ctx context.Context, helper, serverURL string, timeout time.Duration) (a authn.Authenticator, found bool, err error) {
	prog := "docker-credential-" + helper
	// The timeout kills the helper's process group: its children (a login
	// flow, a cloud CLI) are not left running.
	cmd := procgroup.Command(ctx, prog, "get")
	cmd.Stdin = strings.NewReader(serverURL)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = io.Discard
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		switch {
		case ctx.Err() != nil:
			return nil, false, fmt.Errorf("credential helper %s did not answer within %s", prog, timeout)
		case strings.Contains(strings.ToLower(out.String()), "credentials not found"):
			return nil, false, nil
		case errors.As(err, &ee):
			return nil, false, fmt.Errorf("credential helper %s failed (%s)", prog, ee.ProcessState)
		case errors.Is(err, exec.ErrNotFound):
			return nil, false, fmt.Errorf("credential helper %s is not installed (not in $PATH)", prog)
		default:
			return nil, false, fmt.Errorf("credential helper %s could not run", prog)
		}
	}
	var c struct {
		Username string
		Secret   string
	}
	if err := json.Unmarshal(out.Bytes(), &c); err != nil {
		return nil, false, fmt.Errorf("credential helper %s answered something that is not credentials", prog)
	}
	redact.Remember(c.Secret)
	if c.Username == "<token>" {
		return authn.FromConfig(authn.AuthConfig{IdentityToken: c.Secret}), true, nil
	}
	return &authn.Basic{Username: c.Username, Password: c.Secret}, true, nil
}
