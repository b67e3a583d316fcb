// Package redact keeps credentials out of everything kiln prints.
//
// Kiln never prints a credential. Registries sometimes echo the
// request (headers included) in an error body, token endpoints echo what
// they were sent, and credential helpers print secrets on stdout. Every
// registry error kiln forms passes through String, which removes
//
//   - the value of any Authorization header and any Basic or Bearer
//     credential, wherever it appears in the text;
//   - JSON fields that carry secrets (token, access_token, password, ...);
//   - every secret kiln has handled in this process (keychain answers and
//     the Authorization values it sent), verbatim and in base64, so an echo
//     without a "Basic" in front is caught too;
//   - signed URLs: the query values of every redirect kiln followed (the
//     presigned storage a registry sends blobs to), the values of known
//     signature parameters (X-Amz-*, X-Goog-*, Azure SAS sig/se/sp/sv...,
//     Signature, token) wherever they appear, and the fields of a storage
//     error body that echo the signed request (SignatureProvided,
//     StringToSign, CanonicalRequest, AWSAccessKeyId...).
//
// The registry package's transport remembers what it sends (Remember*)
// and redacts error bodies before go-containerregistry turns them into
// errors, so errors formed by other packages from those bodies are clean
// as well. The package is small on purpose (the standard library only):
// every verb's exit path redacts, including those that never reach a
// registry.
package redact

import (
	"encoding/base64"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
)

const redacted = "[REDACTED]"

var (
	authHeaderRe = regexp.MustCompile(`(?i)(authorization["']?\s*[:=]\s*["']?(?:\[\s*["']?)?)(?:(basic|bearer|token)\s+)?[^\s"',;\]}]+`)
	schemeCredRe = regexp.MustCompile(`(?i)\b(basic|bearer)(\s+)([A-Za-z0-9._~+/-]{8,}={0,2})`)
	secretJSONRe = regexp.MustCompile(`(?i)("(?:token|access_token|refresh_token|id_token|identitytoken|identity_token|registrytoken|registry_token|password|secret|auth)"\s*:\s*)"(?:[^"\\]|\\.)*"`)
	secretFormRe = regexp.MustCompile(`(?i)\b((?:access_token|refresh_token|password|token)=)[^&\s"']+`)
	// signParamRe: a signature parameter in a query, raw or XML-escaped
	// (&amp;), or quoted in a canonical request.
	signParamRe = regexp.MustCompile(`(?i)((?:^|[?&;\s])(?:` + signParams + `)=)[^&\s"'<>]+`)
	// storageFieldRe: an S3/GCS/Azure error body's fields that echo the
	// signed request or the key that signed it.
	storageFieldRe = regexp.MustCompile(`(?is)(<(?:SignatureProvided|StringToSign|StringToSignBytes|CanonicalRequest|CanonicalRequestBytes|AWSAccessKeyId|AuthenticationErrorDetail|Details)>)[^<]*(</)`)
)

// signParams are the query parameters that carry a URL's signature or a
// credential: AWS SigV4/SigV2 and CloudFront, Google Cloud Storage, Azure
// SAS, and the generic ones.
const signParams = `X-Amz-[A-Za-z-]+|X-Goog-[A-Za-z-]+|AWSAccessKeyId|Signature|Key-Pair-Id|Policy|Expires|GoogleAccessId|sig|se|sp|sv|st|sr|spr|skoid|sktid|skt|ske|sks|skv|ss|srt|token|access_token|jwt`

// allowedParams are the query parameters of the registry protocol itself
// (as go-containerregistry's redaction allows): not secret.
var allowedParams = map[string]bool{"scope": true, "service": true, "mount": true, "from": true, "digest": true, "n": true, "last": true}

// RememberRedirect records the query of a redirect's target: every value
// that is not part of the registry protocol, raw and decoded.
func RememberRedirect(u *url.URL) {
	if u == nil || u.RawQuery == "" {
		return
	}
	q, _ := url.ParseQuery(u.RawQuery)
	secret := false
	for k, vs := range q {
		if allowedParams[k] {
			continue
		}
		secret = true
		for _, v := range vs {
			if len(v) >= 8 {
				Remember(v)
				Remember(url.QueryEscape(v))
			}
		}
	}
	if secret {
		Remember(u.RawQuery)
	}
}

// RememberSignedURL records the query of a request URL that carries a
// signature parameter (a redirect followed, or a presigned URL given).
func RememberSignedURL(u *url.URL) {
	if u != nil && u.RawQuery != "" && signParamRe.MatchString("?"+u.RawQuery) {
		RememberRedirect(u)
	}
}

// secrets is every credential seen in this process, longest first.
var secrets struct {
	sync.Mutex
	list []string
}

// Remember adds s (and its base64 forms) to what String removes.
// Values too short to be secrets are ignored: redacting "a" would garble
// every message.
func Remember(s string) {
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

// RememberAuthorization records the parts of an Authorization header
// value: the whole value, the credential after the scheme, and for Basic
// the decoded user:password and the password alone.
func RememberAuthorization(v string) {
	v = strings.TrimSpace(v)
	if v == "" {
		return
	}
	Remember(v)
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok {
		return
	}
	cred = strings.TrimSpace(cred)
	Remember(cred)
	if strings.EqualFold(scheme, "basic") {
		if b, err := base64.StdEncoding.DecodeString(cred); err == nil {
			Remember(string(b))
			if _, pass, ok := strings.Cut(string(b), ":"); ok {
				Remember(pass)
			}
		}
	}
}

// String removes credentials from s (see the package notes).
func String(s string) string {
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
	s = signParamRe.ReplaceAllString(s, `${1}`+redacted)
	s = storageFieldRe.ReplaceAllString(s, `${1}`+redacted+`${2}`)
	return s
}
