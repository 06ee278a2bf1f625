package sampleevents_test

import (
	"os"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestMain points TestSampleEvents, which runs the events through the real handler on
// the template's resources, at a local endpoint, starting moto_server when
// AWS_ENDPOINT_URL is unset.
func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }
