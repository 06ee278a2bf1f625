package tracing

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// sigV4 signs each request with the process's AWS credentials, as X-Ray's OTLP endpoint
// asks (https://docs.aws.amazon.com/xray/latest/devguide/xray-opentelemetry.html): the
// function's role, which the template grants xray:PutSpans.
type sigV4 struct {
	next    http.RoundTripper
	creds   aws.CredentialsProvider
	region  string
	service string
	signer  *v4.Signer
}

func newSigV4(next http.RoundTripper, creds aws.CredentialsProvider, region, service string) *sigV4 {
	return &sigV4{next: next, creds: creds, region: region, service: service, signer: v4.NewSigner()}
}

func (s *sigV4) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.creds == nil {
		return nil, fmt.Errorf("tracing: no AWS credentials to sign the request to %s", req.URL.Host)
	}
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, fmt.Errorf("tracing: read the export: %w", err)
		}
		_ = req.Body.Close()
	}
	creds, err := s.creds.Retrieve(req.Context())
	if err != nil {
		return nil, fmt.Errorf("tracing: credentials: %w", err)
	}
	signed := req.Clone(req.Context())
	signed.Body = io.NopCloser(bytes.NewReader(body))
	signed.ContentLength = int64(len(body))
	sum := sha256.Sum256(body)
	if err := s.signer.SignHTTP(req.Context(), creds, signed, hex.EncodeToString(sum[:]), s.service, s.region, time.Now()); err != nil {
		return nil, fmt.Errorf("tracing: sign: %w", err)
	}
	return s.next.RoundTrip(signed)
}
