package awstest_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

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

// TestMotoExitsWithItsTestBinary: a test binary killed before its cleanup runs (go
// test's timeout, a SIGKILL) leaves no moto behind. The test runs itself again as a
// child that starts moto and waits; it kills the child and expects moto's port to close.
func TestMotoExitsWithItsTestBinary(t *testing.T) {
	if os.Getenv("AWSTEST_MOTO_CHILD") == "1" {
		endpoint, _, err := awstest.StartMoto()
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("endpoint", endpoint)
		select {} // until killed
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestMotoExitsWithItsTestBinary$")
	cmd.Env = append(os.Environ(), "AWSTEST_MOTO_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	endpoint, ok := strings.CutPrefix(strings.TrimSpace(line), "endpoint http://")
	if err != nil || !ok {
		t.Fatalf("the child said %q, %v", line, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", endpoint, time.Second)
		if err != nil {
			return // moto is gone
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("moto still listens on %s 20s after its test binary was killed", endpoint)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
