package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/idemgo/sqs-lambda-consumer/internal/awsconf"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// DefaultRegion is the region when neither AWS_REGION nor the shared config sets one.
const DefaultRegion = "us-east-1"

// dialTimeout bounds the check that something listens at AWS_ENDPOINT_URL.
const dialTimeout = 2 * time.Second

// LoadAWSEnv loads the SDK's default configuration, region DefaultRegion when none is
// configured, with AWS_ENDPOINT_URL, AWS_REGION (or AWS_DEFAULT_REGION) and the static
// credentials read through env, so tests can run commands in parallel, each with its
// own environment. The SDK's other settings come from the process as usual.
//
// With AWS_ENDPOINT_URL set (a local emulator), it checks that something listens there,
// failing fast with a *stack.EndpointError otherwise, and uses dummy credentials when
// none are configured: moto and LocalStack accept any.
func LoadAWSEnv(ctx context.Context, env func(string) (string, bool)) (aws.Config, error) {
	get := func(name string) string {
		v, _ := env(name)
		return strings.TrimSpace(v)
	}
	var opts []func(*config.LoadOptions) error
	region := get("AWS_REGION")
	if region == "" {
		region = get("AWS_DEFAULT_REGION")
	}
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	if id, secret := get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY"); id != "" && secret != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(id, secret, get("AWS_SESSION_TOKEN"))))
	}
	endpoint := get("AWS_ENDPOINT_URL")
	if endpoint != "" {
		if err := checkEndpoint(ctx, endpoint); err != nil {
			return aws.Config{}, err
		}
		opts = append(opts, config.WithBaseEndpoint(endpoint))
		if get("AWS_ACCESS_KEY_ID") == "" && get("AWS_PROFILE") == "" {
			opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
		}
	}
	cfg, err := awsconf.Load(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	return cfg, nil
}

// checkEndpoint dials the endpoint's host once, so that a stopped emulator is reported
// at once instead of after the SDK's retries.
func checkEndpoint(ctx context.Context, endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("AWS_ENDPOINT_URL %q is not an http(s) URL such as http://127.0.0.1:4566", endpoint)
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		ee := stack.Unreachable(&url.Error{Op: "Get", URL: u.Scheme + "://" + u.Host, Err: err})
		if errors.As(ee, new(*stack.EndpointError)) {
			return ee
		}
		return &stack.EndpointError{Endpoint: u.Scheme + "://" + u.Host, Err: err}
	}
	return conn.Close()
}

// apiCode returns the error code of an AWS API error, or "".
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// queueError explains a missing queue; other errors are returned as they are.
func queueError(queueURL string, err error) error {
	var missing *sqstypes.QueueDoesNotExist
	if errors.As(err, &missing) || apiCode(err) == "AWS.SimpleQueueService.NonExistentQueue" || apiCode(err) == "QueueDoesNotExist" {
		return fmt.Errorf("queue %s not found: run idemctl up (and eval its output) to create it", queueURL)
	}
	return err
}

// tableError explains a missing table; other errors are returned as they are.
func tableError(table string, err error) error {
	var missing *types.ResourceNotFoundException
	if errors.As(err, &missing) {
		return fmt.Errorf("table %s not found: run idemctl up (and eval its output) to create it", table)
	}
	return err
}
