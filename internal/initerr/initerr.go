// Package initerr reports a Lambda function's failed init the way the Runtime API asks:
// a POST to /runtime/init/error with the error document, then the process exits
// (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html#runtimes-api-initerror).
// Lambda then fails the invocation with that error and starts a new environment for the
// next one. aws-lambda-go has no call for it: its lambda.Start begins after the init.
package initerr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Type is the errorType of a configuration that cannot work.
const Type = "ConfigError"

// Post sends err to the Runtime API at api (the value of AWS_LAMBDA_RUNTIME_API) as an
// init error of errType. An empty api (not under Lambda) is not an error: there is no
// one to tell.
func Post(client *http.Client, api, errType string, err error) error {
	if api == "" {
		return nil
	}
	doc, jerr := json.Marshal(struct {
		Message string   `json:"errorMessage"`
		Type    string   `json:"errorType"`
		Trace   []string `json:"stackTrace"`
	}{err.Error(), errType, []string{}})
	if jerr != nil {
		return fmt.Errorf("initerr: %w", jerr)
	}
	req, rerr := http.NewRequest(http.MethodPost, "http://"+api+"/2018-06-01/runtime/init/error", bytes.NewReader(doc))
	if rerr != nil {
		return fmt.Errorf("initerr: %w", rerr)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Lambda-Runtime-Function-Error-Type", "Unhandled")
	resp, derr := client.Do(req)
	if derr != nil {
		return fmt.Errorf("initerr: post init error: %w", derr)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("initerr: post init error: status %s", resp.Status)
	}
	return nil
}

// Exit is what a function's main calls when its init fails: it writes err to stderr,
// posts it to the Runtime API named by getenv("AWS_LAMBDA_RUNTIME_API") and exits with
// status 1 through exit.
func Exit(getenv func(string) string, stderr io.Writer, exit func(int), err error) {
	fmt.Fprintln(stderr, err)
	client := &http.Client{Timeout: 5 * time.Second}
	if perr := Post(client, getenv("AWS_LAMBDA_RUNTIME_API"), Type, err); perr != nil {
		fmt.Fprintln(stderr, perr)
	}
	exit(1)
}
