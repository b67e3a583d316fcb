// Package networds says in words what a failed network request did (no
// such host, nothing answering, no answer in time, a certificate not
// trusted), for any HTTP host kiln talks to: a registry, a wheel index, a
// download. The standard library only: the registry package builds its
// registry-specific words on it, and the packages that never reach a
// registry use it alone.
package networds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
)

// ErrIdleTimeout is returned (wrapped) when a registry sent nothing for the
// idle timeout: a stalled server or a half-open connection. The Client
// retries it like a reset connection.
var ErrIdleTimeout = errors.New("the server sent nothing")

// Of says in words what a failed connection did, for any HTTP
// host (a wheel index, a download): no such host, nothing answering, no
// answer in time, a certificate not trusted. "" when err is none of
// these. Registry errors say more (RedactError).
func Of(err error) string {
	host := ""
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			host = u.Host
		}
	}
	var dns *net.DNSError
	var op *net.OpError
	var ne net.Error
	var x509Unknown x509.UnknownAuthorityError
	var tlsVerify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return fmt.Sprintf("no host named %s (DNS found none)", dns.Name)
	case errors.As(err, &dns):
		return fmt.Sprintf("cannot look up %s (DNS: %s)", dns.Name, dns.Err)
	case errors.Is(err, syscall.ECONNREFUSED):
		if errors.As(err, &op) && op.Addr != nil {
			host = op.Addr.String()
		}
		return fmt.Sprintf("nothing answers at %s (connection refused)", host)
	case errors.Is(err, ErrIdleTimeout), errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("no answer from %s in time", host)
	case errors.As(err, &x509Unknown), errors.As(err, &tlsVerify):
		return fmt.Sprintf("%s's TLS certificate is not trusted (%s): add its CA to the system's trust store", HostOnly(host), CertReason(err))
	}
	return ""
}

// HostOnly drops a default port.
func HostOnly(host string) string {
	if h, p, err := net.SplitHostPort(host); err == nil && p == "443" {
		return h
	}
	return host
}

// CertReason is the x509 part of a certificate error.
func CertReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "x509: "); i >= 0 {
		return msg[i:]
	}
	return msg
}
