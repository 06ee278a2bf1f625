// Package awstest connects integration tests to a local AWS-protocol endpoint (moto or
// LocalStack) through the real SDK. It never talks to real AWS: the endpoint must be
// on the loopback interface.
//
// When AWS_ENDPOINT_URL is set (make test starts moto_server and sets it), tests use
// that endpoint. Otherwise Main starts moto_server on a free loopback port for the test
// binary and stops it afterwards, so plain `go test ./...` works too.
package awstest

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/internal/awsconf"
)

// Region is the region tests use against the local endpoint.
const Region = "us-east-1"

var (
	endpoint string
	moto     *exec.Cmd
)

// Main runs the tests of a package against the local endpoint, starting moto_server
// when AWS_ENDPOINT_URL is not set. Use it from TestMain: os.Exit(awstest.Main(m)).
func Main(m *testing.M) int { return run(m, false) }

// OwnMotoVar is the variable with which make test asks the packages that use MainOwn
// for a moto of their own.
const OwnMotoVar = "AWSTEST_OWN_MOTO"

// MainOwn is Main for a package whose tests send moto many requests while others wait on
// real timing: with AWSTEST_OWN_MOTO=1 (make test, which runs packages side by side) it
// starts a moto of its own even when AWS_ENDPOINT_URL is set, so that its load and the
// other packages' do not queue behind each other in one moto (moto applies DynamoDB
// requests one at a time, on one core). Without it, it is Main.
func MainOwn(m *testing.M) int { return run(m, os.Getenv(OwnMotoVar) == "1") }

func run(m *testing.M, own bool) int {
	ep := os.Getenv("AWS_ENDPOINT_URL")
	if ep == "" || own {
		var err error
		ep, moto, err = StartMoto()
		if err != nil {
			fmt.Fprintln(os.Stderr, "awstest:", err)
			return 1
		}
		defer StopMoto(moto)
	}
	if err := checkLoopback(ep); err != nil {
		fmt.Fprintln(os.Stderr, "awstest:", err)
		return 1
	}
	endpoint = ep
	return m.Run()
}

func checkLoopback(ep string) error {
	u, err := url.Parse(ep)
	if err != nil {
		return fmt.Errorf("AWS_ENDPOINT_URL %q: %w", ep, err)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("AWS_ENDPOINT_URL %q is not a loopback address: integration tests only run against a local emulator", ep)
}

//go:embed motoserver.py
var motoLauncher []byte

// launcher is the temporary copy of motoLauncher, removed by StopMoto.
var launcher string

// StartMoto starts moto on a free loopback port and waits until it answers. It runs
// moto through motoserver.py, which serializes DynamoDB requests (moto's own threaded
// server lets concurrent conditional writes to one item both succeed; real DynamoDB
// does not) and SQS message operations (concurrent receives and deletes could leave a
// FIFO group blocked for good), and falls back to plain moto_server when python3 cannot import moto.
func StartMoto() (string, *exec.Cmd, error) {
	argv, err := motoCommand()
	if err != nil {
		return "", nil, err
	}
	var lastErr error
	for try := 0; try < 3; try++ {
		port, err := FreePort()
		if err != nil {
			return "", nil, err
		}
		cmd := exec.Command(argv[0], append(argv[1:], "-H", "127.0.0.1", "-p", fmt.Sprint(port))...)
		if err := cmd.Start(); err != nil {
			return "", nil, fmt.Errorf("start %s: %w", argv[0], err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if err := waitListening(addr, 30*time.Second); err != nil {
			lastErr = err
			StopMoto(cmd)
			continue
		}
		return "http://" + addr, cmd, nil
	}
	return "", nil, fmt.Errorf("moto did not start: %w", lastErr)
}

// motoCommand returns the command that starts moto, preferring the serializing launcher.
func motoCommand() ([]string, error) {
	if py, err := exec.LookPath("python3"); err == nil &&
		exec.Command(py, "-c", "import moto.moto_server.werkzeug_app, werkzeug.serving").Run() == nil {
		f, err := os.CreateTemp("", "motoserver-*.py")
		if err != nil {
			return nil, fmt.Errorf("write moto launcher: %w", err)
		}
		_, werr := f.Write(motoLauncher)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return nil, fmt.Errorf("write moto launcher: %w", werr)
		}
		launcher = f.Name()
		return []string{py, f.Name(), "--exit-with-parent"}, nil
	}
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		return nil, fmt.Errorf("moto not found: neither python3 importing moto nor moto_server on PATH; install it with python3 -m pip install 'moto[server]==5.2.1' (or set AWS_ENDPOINT_URL to a running local endpoint): %w", err)
	}
	fmt.Fprintln(os.Stderr, "awstest: python3 cannot import moto; using moto_server, whose DynamoDB writes are not atomic under concurrency")
	return []string{bin}, nil
}

// StopMoto stops a moto_server started by StartMoto.
func StopMoto(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if launcher != "" {
		_ = os.Remove(launcher)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitListening(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("nothing listening on %s after %s", addr, limit)
}

// Endpoint returns the endpoint of this test binary; it fails the test when Main was
// not used.
func Endpoint(t testing.TB) string {
	t.Helper()
	if endpoint == "" {
		t.Fatal("awstest: no endpoint: call awstest.Main from TestMain")
	}
	return endpoint
}

// Config returns an SDK config for the local endpoint with dummy credentials.
func Config(t testing.TB) aws.Config {
	t.Helper()
	return ConfigFor(t, Endpoint(t))
}

// ConfigFor returns an SDK config for endpoint with dummy credentials and few retries,
// loaded as the functions load theirs (internal/awsconf).
func ConfigFor(t testing.TB, ep string) aws.Config {
	t.Helper()
	cfg, err := awsconf.Load(context.Background(),
		config.WithRegion(Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
		config.WithBaseEndpoint(ep),
		config.WithRetryMaxAttempts(3),
	)
	if err != nil {
		t.Fatalf("awstest: load config: %v", err)
	}
	return cfg
}

// DynamoDB returns a DynamoDB client on the local endpoint.
func DynamoDB(t testing.TB, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	return dynamodb.NewFromConfig(Config(t), opts...)
}

// SQS returns an SQS client on the local endpoint.
func SQS(t testing.TB, opts ...func(*sqs.Options)) *sqs.Client {
	t.Helper()
	return sqs.NewFromConfig(Config(t), opts...)
}

// SecretsManager returns a Secrets Manager client for the local endpoint.
func SecretsManager(t testing.TB) *secretsmanager.Client {
	t.Helper()
	return secretsmanager.NewFromConfig(Config(t))
}

var seq atomic.Int64

// RunID is 6 hex digits unique to this test process: resource names carry it.
func RunID() string { return runID() }

var runID = sync.OnceValue(func() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
})

// Name returns a resource name unique to this test run: prefix, the test's name and a
// counter, in the characters both DynamoDB and SQS accept, short enough for SQS's
// 80-character limit with ".fifo" added.
func Name(t testing.TB, prefix string) string {
	t.Helper()
	tn := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '-'
	}, t.Name())
	if len(tn) > 40 {
		tn = tn[len(tn)-40:]
	}
	return fmt.Sprintf("%s-%s-%s-%d", prefix, runID(), strings.Trim(tn, "-_."), seq.Add(1))
}

// TableCreator is the part of a DynamoDB client CreateTable uses.
type TableCreator interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
}

// CreateTable creates the table in describes. A test's table names are its own (Name),
// so ResourceInUseException means an earlier try of this very request was applied and
// its answer lost, after which the SDK sent it again (seen in CI under make test's load:
// a DynamoDB answer whose CRC32 did not match): the table is there, and that is success,
// as persistence.CreateTable treats it.
func CreateTable(ctx context.Context, api TableCreator, in *dynamodb.CreateTableInput) error {
	_, err := api.CreateTable(ctx, in)
	if _, ok := errors.AsType[*ddbtypes.ResourceInUseException](err); ok {
		return nil
	}
	return err
}
