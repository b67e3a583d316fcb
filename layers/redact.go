package layers

import (
	"encoding/base64"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Redaction: kiln never prints a credential. Registries sometimes echo the
// request (headers included) in an error body, token endpoints echo what
// they were sent, and credential helpers print secrets on stdout. Every
// registry error kiln forms passes through Redact, which removes
//
//   - the value of any Authorization header and any Basic or Bearer
//     credential, wherever it appears in the text;
//   - JSON fields that carry secrets (token, access_token, password, ...);
//   - every secret kiln has handled in this process (keychain answers and
//     the Authorization values it sent), verbatim and in base64, so an echo
//     without a "Basic" in front is caught too.
//
// The transport (guardTransport) redacts error bodies before go-containerregistry
// turns them into errors, so errors formed by other packages from those
// bodies are clean as well.

const redacted = "[REDACTED]"

var (
	authHeaderRe = regexp.MustCompile(`(?i)(authorization["']?\s*[:=]\s*["']?(?:\[\s*["']?)?)(?:(basic|bearer|token)\s+)?[^\s"',;\]}]+`)
	schemeCredRe = regexp.MustCompile(`(?i)\b(basic|bearer)(\s+)([A-Za-z0-9._~+/-]{8,}={0,2})`)
	secretJSONRe = regexp.MustCompile(`(?i)("(?:token|access_token|refresh_token|id_token|identitytoken|identity_token|registrytoken|registry_token|password|secret|auth)"\s*:\s*)"(?:[^"\\]|\\.)*"`)
	secretFormRe = regexp.MustCompile(`(?i)\b((?:access_token|refresh_token|password|token)=)[^&\s"']+`)
)

// secrets is every credential seen in this process, longest first.
var secrets struct {
	sync.Mutex
	list []string
}

// rememberSecret adds s (and its base64 forms) to what Redact removes.
// Values too short to be secrets are ignored: redacting "a" would garble
// every message.
func rememberSecret(s string) {
	s = strings.TrimSpace(s)
	if len(s) < 4 {
		return
	}
	add := []string{s, base64.StdEncoding.EncodeToString([]byte(s)), base64.RawURLEncoding.EncodeToString([]byte(s))}
	secrets.Lock()
	defer secrets.Unlock()
	for _, a := range add {
		found := false
		for _, have := range secrets.list {
			if have == a {
				found = true
				break
			}
		}
		if !found && len(secrets.list) < 1024 {
			secrets.list = append(secrets.list, a)
		}
	}
	sort.Slice(secrets.list, func(i, j int) bool { return len(secrets.list[i]) > len(secrets.list[j]) })
}

// rememberAuthorization records the parts of an Authorization header
// value: the whole value, the credential after the scheme, and for Basic
// the decoded user:password and the password alone.
func rememberAuthorization(v string) {
	v = strings.TrimSpace(v)
	if v == "" {
		return
	}
	rememberSecret(v)
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok {
		return
	}
	cred = strings.TrimSpace(cred)
	rememberSecret(cred)
	if strings.EqualFold(scheme, "basic") {
		if b, err := base64.StdEncoding.DecodeString(cred); err == nil {
			rememberSecret(string(b))
			if _, pass, ok := strings.Cut(string(b), ":"); ok {
				rememberSecret(pass)
			}
		}
	}
}

// Redact removes credentials from s (see the package notes above).
func Redact(s string) string {
	secrets.Lock()
	list := secrets.list
	secrets.Unlock()
	for _, sec := range list {
		if strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, redacted)
		}
	}
	s = authHeaderRe.ReplaceAllStringFunc(s, func(m string) string {
		sub := authHeaderRe.FindStringSubmatch(m)
		if sub[2] != "" {
			return sub[1] + sub[2] + " " + redacted
		}
		return sub[1] + redacted
	})
	s = schemeCredRe.ReplaceAllStringFunc(s, func(m string) string {
		sub := schemeCredRe.FindStringSubmatch(m)
		// A credential, not a word ("basic authentication"): it has a
		// digit or a base64/JWT punctuation mark, or is too long for a word.
		if !strings.ContainsAny(sub[3], "0123456789+/=._-~") && len(sub[3]) < 20 {
			return m
		}
		return sub[1] + sub[2] + redacted
	})
	s = secretJSONRe.ReplaceAllString(s, `$1"`+redacted+`"`)
	s = secretFormRe.ReplaceAllString(s, `${1}`+redacted)
	return s
}

// redactedError prints its cause redacted; errors.Is and As still see the
// cause.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// RedactError returns err with a redacted message (nil stays nil). Use it
// wherever an error from a registry, a keychain or a credential helper is
// formed into one kiln prints.
func RedactError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := Redact(msg)
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, err: err}
}
