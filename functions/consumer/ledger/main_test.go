package ledger_test

import (
	"os"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestMain points the integration tests at a local endpoint, starting moto_server when
// AWS_ENDPOINT_URL is unset.
func TestMain(m *testing.M) { os.Exit(awstest.MainOwn(m)) }
