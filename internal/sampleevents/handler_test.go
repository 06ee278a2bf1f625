package sampleevents_test

import (
	"bytes"
	"context"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/sampleevents"
)

// TestSampleEvents pushes the sample events of the example under test
// (internal/sampleevents, the files of events/ for the wired default) through the real
// handler, one after the other against one set of tables, and checks each against its
// expected outcome: no batch item failures, the state the example's Expect gives, one
// outbound message per applied message, exactly the expected dead letters. Then it
// replays every file: nothing may change. It needs the example's example.Traffic (the
// events) and example.Checker (the state).
func TestSampleEvents(t *testing.T) {
	ctx := context.Background()
	ex := exampletest.Example(t)
	exampletest.Traffic(t, ex)
	checker := exampletest.Checker(t, ex)
	samples, err := sampleevents.Generate(ex, sampleevents.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	files, err := sampleevents.Files(samples)
	if err != nil {
		t.Fatal(err)
	}
	s := exampletest.Up(t, ex)
	cfg, err := consumerapp.FromEnv(s.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	h, err := consumerapp.New(cfg, consumerapp.Deps{DynamoDB: s.DynamoDB, SQS: s.SQS, Logs: &logs, Metrics: io.Discard, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	handler := lambda.NewHandler(h)
	outbound := ""
	confirms, outboundVar := exampletest.Confirms(ex)
	if outboundVar != "" {
		outbound = s.Must(t, outboundVar)
	}
	dlq := s.Must(t, "DLQ_URL")

	var valid, applied []example.Message
	for _, smp := range samples {
		exp := smp.Expected
		prepare := sampleevents.ExampleMessages(exp.Prepare)
		if err := example.Prepare(ctx, ex, s.DynamoDB, s.Lookup, prepare); err != nil {
			t.Fatalf("%s: Prepare: %v", smp.Name, err)
		}
		valid = append(valid, prepare...)
		applied = append(applied, exp.AppliedMessages()...)

		if failed := exampletest.Invoke(t, handler, ctx, files[smp.Name]); len(failed) != 0 {
			t.Fatalf("%s: batch item failures %v", smp.Name, failed)
		}
		sampleState(t, checker, s, smp.Name, valid, applied)
		if outbound != "" {
			got := sampleConfirmed(t, confirms, s.SQS, outbound)
			want := slices.Clone(exp.Applied)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s: outbound messages confirm %v, want one each for %v", smp.Name, got, want)
			}
		}
		got := exampletest.DrainAll(t, s.SQS, dlq)
		if len(got) != len(exp.DeadLettered) {
			t.Errorf("%s: %d dead letters, want %d (%+v)", smp.Name, len(got), len(exp.DeadLettered), exp.DeadLettered)
		}
		for _, want := range exp.DeadLettered {
			i := slices.IndexFunc(got, func(m sqstypes.Message) bool {
				return sampleAttr(m, sqsmsg.DLQSourceMessageIDAttribute) == want.MessageID
			})
			if i < 0 {
				t.Errorf("%s: no dead letter for record %s (%s)", smp.Name, want.MessageID, want.ID)
				continue
			}
			m := got[i]
			if reason := sampleAttr(m, sqsmsg.DLQReasonAttribute); !strings.Contains(reason, want.Reason) {
				t.Errorf("%s: dead letter %s: reason %q, want it to contain %q", smp.Name, want.ID, reason, want.Reason)
			}
			if aws.ToString(m.Body) != want.Body || m.Attributes["MessageGroupId"] != want.Group {
				t.Errorf("%s: dead letter %s: body %q group %q, want %q %q", smp.Name, want.ID, aws.ToString(m.Body), m.Attributes["MessageGroupId"], want.Body, want.Group)
			}
		}
	}

	// A full redelivery of every file: every key is completed, so nothing runs again; the
	// dead letters are deduplicated on their source message id.
	for _, smp := range samples {
		if failed := exampletest.Invoke(t, handler, ctx, files[smp.Name]); len(failed) != 0 {
			t.Fatalf("replay of %s: batch item failures %v", smp.Name, failed)
		}
	}
	sampleState(t, checker, s, "after the replay", valid, applied)
	if outbound != "" {
		if got := sampleConfirmed(t, confirms, s.SQS, outbound); len(got) != 0 {
			t.Errorf("the replay sent outbound messages for %v", got)
		}
	}
	if got := exampletest.DrainAll(t, s.SQS, dlq); len(got) != 0 {
		t.Errorf("the replay added %d dead letters", len(got))
	}
	for _, m := range valid {
		if strings.Contains(logs.String(), m.Body) {
			t.Errorf("the logs contain the body of %s", m.ID)
		}
	}
}

// sampleState compares Read's state with Expect's, for every name Expect returns.
func sampleState(t *testing.T, checker example.Checker, s *exampletest.Stack, when string, valid, applied []example.Message) {
	t.Helper()
	want, err := checker.Expect(valid, applied)
	if err != nil {
		t.Fatalf("%s: Expect: %v", when, err)
	}
	got, err := checker.Read(context.Background(), s.DynamoDB, s.Lookup)
	if err != nil {
		t.Fatalf("%s: Read: %v", when, err)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if got.State[name] != want[name] {
			t.Errorf("%s: %s = %d, want %d", when, name, got.State[name], want[name])
		}
	}
	if got.Applied != len(applied) {
		t.Errorf("%s: %d business effects in the tables, want %d", when, got.Applied, len(applied))
	}
}

// sampleConfirmed receives and deletes the outbound queue's messages and returns the business
// ids they confirm, sorted.
func sampleConfirmed(t *testing.T, confirms func(string) (string, bool), api *sqs.Client, url string) []string {
	t.Helper()
	ids := []string{}
	for _, m := range exampletest.DrainAll(t, api, url) {
		id, ok := confirms(aws.ToString(m.Body))
		if !ok {
			t.Errorf("outbound message %q confirms nothing", aws.ToString(m.Body))
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func sampleAttr(m sqstypes.Message, name string) string {
	return aws.ToString(m.MessageAttributes[name].StringValue)
}
