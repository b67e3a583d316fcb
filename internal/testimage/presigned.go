package testimage

import (
	"fmt"
	"html"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// Presigned secrets: what a storage server's signed URL and its error body
// hold, none of which may ever be printed.
const (
	PresignedAccessKey = "AKIAKILNTESTKEY12345"
	PresignedSignature = "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
	PresignedToken     = "IQoJb3JpZ2luX2VjEKILNSessionTokenSecretValue0123456789"
	PresignedSAS       = "sig-AzureSAS-KilnSecret-0123456789abcdef"
	PresignedGoogle    = "goog-signature-kiln-0123456789abcdef0123"
)

// PresignedSecrets lists the strings a test asserts never appear.
func PresignedSecrets() []string {
	return []string{PresignedAccessKey, PresignedSignature, PresignedToken, PresignedSAS, PresignedGoogle,
		url.QueryEscape(PresignedToken), "20261202/us-east-1/s3/aws4_request"}
}

// PresignedRegistry starts an in-process registry that redirects every
// blob GET to a storage server by a signed URL (S3 SigV4 parameters, plus
// Azure's and Google's), as Docker Hub, ECR, GAR and Harbor on S3 do; the
// storage refuses it with 403 and an S3-style XML body that echoes the
// signed request (SignatureProvided, StringToSign, CanonicalRequest, the
// URL itself). Manifests are served normally; push through the returned
// host. It returns the registry's host:port.
func PresignedRegistry(t testing.TB) string {
	t.Helper()
	storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		signed := "https://" + r.Host + r.URL.RequestURI()
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match the signature you provided. Check your key and signing method.</Message><AWSAccessKeyId>%s</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256
20261202T120000Z
20261202/us-east-1/s3/aws4_request
9b1a0e4c</StringToSign><SignatureProvided>%s</SignatureProvided><CanonicalRequest>GET
%s
%s
host:%s</CanonicalRequest><RequestURL>%s</RequestURL><RequestId>KILN0TEST</RequestId></Error>`,
			PresignedAccessKey, PresignedSignature, r.URL.Path, html.EscapeString(r.URL.RawQuery), r.Host, html.EscapeString(signed))
	}))
	t.Cleanup(storage.Close)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:") {
			q := url.Values{}
			q.Set("X-Amz-Algorithm", "AWS4-HMAC-SHA256")
			q.Set("X-Amz-Credential", PresignedAccessKey+"/20261202/us-east-1/s3/aws4_request")
			q.Set("X-Amz-Date", "20261202T120000Z")
			q.Set("X-Amz-Expires", "1200")
			q.Set("X-Amz-Security-Token", PresignedToken)
			q.Set("X-Amz-SignedHeaders", "host")
			q.Set("X-Amz-Signature", PresignedSignature)
			q.Set("sig", PresignedSAS)
			q.Set("se", "2026-12-02T13:00:00Z")
			q.Set("sp", "r")
			q.Set("sv", "2022-11-02")
			q.Set("X-Goog-Signature", PresignedGoogle)
			http.Redirect(w, r, storage.URL+"/bucket/docker/registry/v2/blobs/"+r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]+"/data?"+q.Encode(), http.StatusTemporaryRedirect)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}
