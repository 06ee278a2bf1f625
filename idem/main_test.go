package idem_test

import (
	"os"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

func TestMain(m *testing.M) { os.Exit(awstest.MainOwn(m)) }
