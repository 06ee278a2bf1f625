package awstest_test

import (
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestStartMotoNamesTheInstall: without moto on PATH, the error says how to install it.
func TestStartMotoNamesTheInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, cmd, err := awstest.StartMoto()
	if err == nil {
		awstest.StopMoto(cmd)
		t.Fatal("StartMoto found moto on an empty PATH")
	}
	if !strings.Contains(err.Error(), "python3 -m pip install 'moto[server]==5.2.1'") {
		t.Errorf("error %q does not say how to install moto", err)
	}
}
