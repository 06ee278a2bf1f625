package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
)

// EnvironmentHandler is the Handler of a consumer instance that is a Lambda execution
// environment: the event goes to the bootstrap as JSON through the Runtime API, with
// the invocation's deadline, and its JSON answer comes back. A timeout, a function error,
// a crash or a failed init is the invocation's error: the whole batch fails.
func EnvironmentHandler(env *lambdaenv.Environment) Handler {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		if err := invokeJSON(ctx, env, ev, &resp); err != nil {
			return events.SQSEventResponse{}, err
		}
		return resp, nil
	}
}

// EnvironmentReaper is a Reap func that invokes the reaper's environment with the
// scheduled event EventBridge would send for the rule ruleARN.
func EnvironmentReaper(env *lambdaenv.Environment, ruleARN string) func(ctx context.Context) (reaper.SweepResult, error) {
	return func(ctx context.Context) (reaper.SweepResult, error) {
		var res reaper.SweepResult
		err := invokeJSON(ctx, env, ScheduledEvent(ruleARN, time.Now()), &res)
		return res, err
	}
}

func invokeJSON(ctx context.Context, env *lambdaenv.Environment, in, out any) error {
	payload, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("runner: event: %w", err)
	}
	b, err := env.Invoke(ctx, payload)
	if err != nil {
		return fmt.Errorf("runner: invoke: %w", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("runner: the function's answer %.200q: %w", b, err)
	}
	return nil
}

// ScheduledEvent is the event an EventBridge schedule rule sends its Lambda target
// (https://docs.aws.amazon.com/eventbridge/latest/userguide/run-lambda-schedule.html;
// events/scheduled.json): version 0, detail-type "Scheduled Event", source aws.events,
// the rule's account and region, the rule as the one resource, an empty detail.
func ScheduledEvent(ruleARN string, at time.Time) events.EventBridgeEvent {
	// arn:aws:events:<region>:<account>:rule/<name>
	parts := strings.SplitN(ruleARN, ":", 6)
	region, account := "", ""
	if len(parts) == 6 {
		region, account = parts[3], parts[4]
	}
	return events.EventBridgeEvent{
		Version: "0", ID: requestID(), DetailType: "Scheduled Event", Source: "aws.events",
		AccountID: account, Time: at.UTC().Truncate(time.Second), Region: region,
		Resources: []string{ruleARN}, Detail: json.RawMessage("{}"),
	}
}
