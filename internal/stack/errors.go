package stack

import (
	"errors"
	"fmt"
	"net"
	"net/url"
)

// EndpointError means nothing answered at the AWS endpoint: the local emulator is not
// running, or AWS_ENDPOINT_URL points elsewhere.
type EndpointError struct {
	Endpoint string // scheme://host:port
	Err      error
	reason   string // the short form of Err, e.g. "connect: connection refused"
}

func (e *EndpointError) Error() string {
	reason := ""
	if e.reason != "" {
		reason = " (" + e.reason + ")"
	}
	return fmt.Sprintf("cannot reach the AWS endpoint %s%s: is moto_server or LocalStack running? (make demo starts one)", e.Endpoint, reason)
}

// Unwrap returns the connection error.
func (e *EndpointError) Unwrap() error { return e.Err }

// Unreachable returns err as an *EndpointError when it is a failure to connect to the
// endpoint (connection refused, unknown host, no route), and err unchanged otherwise.
func Unreachable(err error) error {
	var ee *EndpointError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return err
	}
	endpoint := ""
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			endpoint = u.Scheme + "://" + u.Host
		}
	}
	if endpoint == "" && op.Addr != nil {
		endpoint = op.Addr.String()
	}
	reason := ""
	if op.Err != nil {
		reason = op.Err.Error()
	}
	return &EndpointError{Endpoint: endpoint, Err: err, reason: reason}
}
