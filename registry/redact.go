package registry

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/kiln-build/kiln/internal/redact"
)

// redactedError prints its cause redacted; errors.Is and As still see the
// cause.
type redactedError struct {
	msg string
	err error
	// whole: the message names the image and what is wrong with it
	// (a tag or manifest not found): it needs no "image REF:" before it.
	whole bool
	// described: the message is in words already (describe); said once.
	described bool
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// RedactError returns err in words (see describe) with a redacted message
// (nil stays nil). Use it wherever an error from a registry, a keychain or
// a credential helper is formed into one kiln prints.
func RedactError(err error) error { return redactErrorAt(err, "") }

// redactErrorAt is RedactError for an error of a request to host.
func redactErrorAt(err error, host string) error {
	if err == nil {
		return nil
	}
	orig := err.Error()
	msg := orig
	var words, inner string
	var done *redactedError
	if errors.As(err, &done) && done.described {
		// In words already (by the transport): said once, without the
		// URL http.Client puts before it (twice for a ping over https
		// and http).
		words, inner = done.msg, done.msg
		var ue *url.Error
		if errors.As(err, &ue) {
			inner = ue.Error()
		}
	} else {
		words, inner = describe(err, host)
	}
	if words != "" {
		if i := strings.Index(msg, inner); inner != "" && i >= 0 {
			msg = msg[:i] + words
		} else {
			msg = words
		}
	}
	var te *transport.Error
	whole := msg == words && errors.As(err, &te) && (strings.HasPrefix(words, "tag ") || strings.HasPrefix(words, "manifest ") || strings.HasPrefix(words, "repository "))
	clean := redact.String(msg)
	if clean == orig {
		return err
	}
	return &redactedError{msg: clean, err: err, whole: whole && clean == msg, described: words != ""}
}

// ImageError prefixes err with the image it concerns, unless its message
// already names it (a registry's "tag not found in REPO"): said once.
func ImageError(raw string, err error) error {
	if StandsAlone(err) {
		return err
	}
	return fmt.Errorf("image %q: %w", raw, err)
}

// StandsAlone says whether err (from RedactError) names the image and what
// is wrong with it, so that no "image REF:" need go before it.
func StandsAlone(err error) bool {
	var re *redactedError
	return errors.As(err, &re) && re.whole && re.msg == err.Error()
}
