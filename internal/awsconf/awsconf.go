// Package awsconf loads the AWS SDK configuration every client of this repository uses:
// the functions' (internal/fnmain), idemctl's (internal/cli) and the tests'
// (internal/awstest). It is config.LoadDefaultConfig with one change, DetachBody.
//
// DetachBody works around a race between the SDK (smithy-go) and net/http that turns a
// request the service applied into a retry. smithy-go wraps each attempt's request body
// in a reader that it closes as soon as http.Client.Do returns, which is when the
// response's headers have arrived. net/http's connection writer may not be done with
// the body by then: after it has sent ContentLength bytes, it copies the body once more
// to check that nothing is left. That copy calls the body's WriteTo, which smithy-go's
// reader answers with io.EOF once closed, and io.Copy passes a WriteTo's io.EOF on as
// an error. net/http takes it for a failed write and closes the connection, under the
// response the SDK is still reading ("use of closed network connection"). The SDK
// retries, and a conditional write whose first attempt was applied fails its own
// condition on the retry. It happens when the writer goroutine runs late, on a busy
// CPU.
//
// Measured on this repository's 2-core machine, with the simulator running beside it:
// 2 to 14 of 3 000 sequential conditional PutItems to moto were retried this way and
// failed their condition; with DetachBody, none in 9 000. TestTheRaceOnPurpose plays
// the race step by step, without load. idem's store takes a retried write that was
// applied for its own (a lost answer), but a business write made outside idem's
// transaction, or a SendMessage to a standard queue, would be made twice.
//
// DetachBody must stay the last Deserialize middleware (an API option added after it
// that set a stream with a WriteTo would undo it), and only clients built from Load's
// configuration have it.
package awsconf

import (
	"context"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Load is config.LoadDefaultConfig with DetachBody in the clients' API options.
func Load(ctx context.Context, opts ...func(*config.LoadOptions) error) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, err
	}
	cfg.APIOptions = append(cfg.APIOptions, DetachBody)
	return cfg, nil
}

// DetachBody hides the WriteTo of each attempt's request body from net/http, just
// before the request is sent: the writer's last copy then reads the body, and a read of
// smithy-go's closed reader returns io.EOF, which io.Copy takes for the end. The bytes
// sent are the same, and the body stays seekable for the SDK's retries.
func DetachBody(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("awsconf.DetachBody",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			req, ok := in.Request.(*smithyhttp.Request)
			if !ok {
				return next.HandleDeserialize(ctx, in)
			}
			detached, err := detach(req)
			if err != nil {
				return middleware.DeserializeOutput{}, middleware.Metadata{}, err
			}
			in.Request = detached
			return next.HandleDeserialize(ctx, in)
		}), middleware.After)
}

// detach returns req with its stream behind a readSeeker. A stream that cannot seek (the
// SDK's request-body logging makes one, an upload can be one) is left as it is, and
// left to the race.
func detach(req *smithyhttp.Request) (*smithyhttp.Request, error) {
	rs, ok := req.GetStream().(io.ReadSeeker)
	if !ok || !req.IsStreamSeekable() {
		return req, nil
	}
	return req.SetStream(readSeeker{rs})
}

// readSeeker is an io.ReadSeeker and nothing more: no WriteTo, no Len.
type readSeeker struct{ io.ReadSeeker }
