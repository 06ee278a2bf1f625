// Command fn is a Lambda function for the tests of lambdaenv and runner. Its event says
// what to do: {"do": "ok" | "error" | "panic" | "exit" | "sleep" | "barrier", ...}. It
// answers with its pid, the deadline it was given and a few variables of its
// environment. An SQS event runs each record's body as such an event ("fail" reports
// the record as a batch item failure; "<action>-first" does the action on the record's
// first receive only). Any event is also written to $RECORD_DIR, when set.
// FAIL_INIT=post makes its init fail through the Runtime API; FAIL_INIT=exit makes it
// exit during init without a word.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemgo/sqs-lambda-consumer/internal/initerr"
)

type event struct {
	Do      string `json:"do"`
	SleepMS int    `json:"sleep_ms"`
	Dir     string `json:"dir"` // barrier: a file per invocation goes here
	N       int    `json:"n"`   // barrier: wait until this many files exist
	Name    string `json:"name"`
}

type answer struct {
	PID        int               `json:"pid"`
	DeadlineMS int64             `json:"deadline_ms"`
	Env        map[string]string `json:"env"`
}

func main() {
	switch os.Getenv("FAIL_INIT") {
	case "post":
		initerr.Exit(os.Getenv, os.Stderr, os.Exit, errors.New("fn: FAIL_INIT is set"))
	case "exit":
		os.Exit(2)
	}
	lambda.Start(dispatch)
}

func dispatch(ctx context.Context, raw json.RawMessage) (any, error) {
	if dir := os.Getenv("RECORD_DIR"); dir != "" {
		name := fmt.Sprintf("%d-%d.json", time.Now().UnixNano(), os.Getpid())
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o600); err != nil {
			return nil, err
		}
	}
	var probe struct {
		Records    []events.SQSMessage `json:"Records"`
		DetailType string              `json:"detail-type"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, err
	}
	switch {
	case probe.DetailType != "":
		return map[string]int{"scanned": 0}, nil
	case probe.Records != nil:
		var resp events.SQSEventResponse
		for _, r := range probe.Records {
			var ev event
			if err := json.Unmarshal([]byte(r.Body), &ev); err != nil {
				return nil, err
			}
			switch {
			case ev.Do == "fail":
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
				continue
			case strings.HasSuffix(ev.Do, "-first"):
				ev.Do = strings.TrimSuffix(ev.Do, "-first")
				if r.Attributes["ApproximateReceiveCount"] != "1" {
					ev.Do = "ok"
				}
			}
			if _, err := handle(ctx, ev); err != nil {
				return nil, err
			}
		}
		return resp, nil
	}
	var ev event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, err
	}
	return handle(ctx, ev)
}

func handle(ctx context.Context, ev event) (answer, error) {
	dl, _ := ctx.Deadline()
	a := answer{PID: os.Getpid(), DeadlineMS: dl.UnixMilli(), Env: map[string]string{}}
	for _, k := range []string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_NAME", "GREETING", "HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			a.Env[k] = v
		}
	}
	switch ev.Do {
	case "error":
		return a, errors.New("fn: asked to fail")
	case "panic":
		panic("fn: asked to panic")
	case "exit":
		os.Exit(3)
	case "sleep":
		time.Sleep(time.Duration(ev.SleepMS) * time.Millisecond)
	case "barrier":
		if err := os.WriteFile(filepath.Join(ev.Dir, ev.Name), nil, 0o600); err != nil {
			return a, err
		}
		for limit := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			files, err := os.ReadDir(ev.Dir)
			if err != nil {
				return a, err
			}
			if len(files) >= ev.N {
				break
			}
			if time.Now().After(limit) {
				return a, fmt.Errorf("fn: %d of %d invocations at the barrier after a minute", len(files), ev.N)
			}
		}
	}
	return a, nil
}
