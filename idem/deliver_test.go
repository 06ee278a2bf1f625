package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// flakySender is SQS on moto, but for the SendMessageBatch requests it is told to fail
// (by their number, from 1), which fail as a lost connection does.
type flakySender struct {
	api   outbox.SQSBatchSender
	n     atomic.Int64
	fails map[int64]bool
}

func (f *flakySender) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	if f.fails[f.n.Add(1)] {
		return nil, errors.New("connection reset by peer")
	}
	return f.api.SendMessageBatch(ctx, in, opts...)
}

func drainQueue(t *testing.T, client *sqs.Client, url string) []sqstypes.Message {
	t.Helper()
	return (&outboxQueues{sqs: client, url: url}).drain(t)
}

func keyedFIFORecord(id, group, key, body string) events.SQSMessage {
	return events.SQSMessage{
		MessageId: id, Body: body, ReceiptHandle: "rh-" + id,
		Attributes:        map[string]string{"MessageGroupId": group, "MessageDeduplicationId": key},
		MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String", key)},
	}
}

// TestDeliverKeepsGroupOrderAfterAFailedRequest: once a request fails, no later message
// of its FIFO group goes out in the same delivery, so downstream order follows commit
// order: within a record of more than 10 messages (two requests), and across the records
// of one input group (hole 4).
func TestDeliverKeepsGroupOrderAfterAFailedRequest(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		client := awstest.SQS(t)
		out := awstest.FIFOQueue(ctx, t, client, "order", nil)
		msgs := func(prefix string, n int) []idem.Message {
			var ms []idem.Message
			for i := range n {
				ms = append(ms, idem.Message{QueueURL: out, Body: fmt.Sprintf("%s-%02d", prefix, i), GroupID: "g"})
			}
			return ms
		}
		// Within a record: 12 messages, the first request (10) fails.
		flaky := &flakySender{api: client, fails: map[int64]bool{1: true}}
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = flaky })
		twelve := func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Messages: msgs("a", 12)}, nil
		}
		if _, err := c.Do(ctx, req("twelve", `{}`), twelve); err == nil || idem.IsPermanent(err) {
			t.Fatalf("first request failed: %v, want a retryable error", err)
		}
		if got := bodies(drainQueue(t, client, out)); len(got) != 0 {
			t.Fatalf("after the first request failed, the queue holds %v: later messages of the group overtook it", got)
		}
		if n := flaky.n.Load(); n != 1 {
			t.Fatalf("%d send requests, want 1: the failed one, and none for the two messages it held back", n)
		}
		if _, err := c.Do(ctx, req("twelve", `{}`), twelve); err != nil {
			t.Fatalf("redelivery: %v", err)
		}
		got := bodies(drainQueue(t, client, out))
		if strings.Join(got, ",") != strings.Join(bodiesOf(msgs("a", 12)), ",") {
			t.Fatalf("queue holds %v, want a-00..a-11 in order", got)
		}
		// Across records of one input group, in one batch: A's 10 messages fill the first
		// request, which fails; B's message, committed after A in the group, must wait.
		flaky = &flakySender{api: client, fails: map[int64]bool{1: true}}
		c = e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = flaky })
		rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: idem.HandlerFunc(func(_ context.Context, r *idem.Request) (idem.Result, error) {
			if r.Key == "rec-a" {
				return idem.Result{Messages: msgs("A", 10)}, nil
			}
			return idem.Result{Messages: msgs("B", 1)}, nil
		})})
		if err != nil {
			t.Fatal(err)
		}
		bp, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: rf, Outbox: c})
		if err != nil {
			t.Fatal(err)
		}
		ev := events.SQSEvent{Records: []events.SQSMessage{keyedFIFORecord("m-a", "in", "rec-a", `{"n":1}`), keyedFIFORecord("m-b", "in", "rec-b", `{"n":2}`)}}
		resp, err := bp.Process(ctx, ev)
		if err != nil || len(resp.BatchItemFailures) != 2 {
			t.Fatalf("batch with a failed send: %+v, %v; want both records back", resp, err)
		}
		if got := bodies(drainQueue(t, client, out)); len(got) != 0 {
			t.Fatalf("after A's request failed, the queue holds %v: B overtook A", got)
		}
		if resp, err := bp.Process(ctx, ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("redelivery: %+v, %v", resp, err)
		}
		want := append(bodiesOf(msgs("A", 10)), "B-00")
		if got := bodies(drainQueue(t, client, out)); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("queue holds %v, want %v", got, want)
		}
	})
}

// TestDeliverSplitsRequestsAt256KiB: two messages that together pass the outbox's
// 256 KiB request limit go in two requests, and both arrive; at the limit exactly,
// one request.
func TestDeliverSplitsRequestsAt256KiB(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		client := awstest.SQS(t)
		out := awstest.FIFOQueue(ctx, t, client, "big", nil)
		counted := &flakySender{api: client}
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = counted })
		big := func(tag string) idem.Message {
			return idem.Message{QueueURL: out, Body: tag + strings.Repeat("x", 150*1024), GroupID: "g"}
		}
		if _, err := c.Do(ctx, req("two-big", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Messages: []idem.Message{big("a"), big("b")}}, nil
		}); err != nil {
			t.Fatal(err)
		}
		if n := counted.n.Load(); n != 2 {
			t.Errorf("%d send requests for two messages of 150 KiB, want 2", n)
		}
		if got := drainQueue(t, client, out); len(got) != 2 {
			t.Errorf("%d messages arrived, want 2", len(got))
		}
		// At the limits exactly: two messages whose sizes (body and attributes, as SQS
		// counts them) add up to 256 KiB go in one request; one message of 256 KiB is
		// taken and sent.
		exact := func(key string, size int) idem.Message {
			overhead := len(idem.KeyAttribute) + len("String") + len(key)
			return idem.Message{QueueURL: out, Body: strings.Repeat("y", size-overhead), GroupID: "g", Attributes: map[string]string{idem.KeyAttribute: key}}
		}
		for name, msgs := range map[string][]idem.Message{
			"two halves":  {exact("half-a", sqsmsg.MaxOutboundMessageBytes/2), exact("half-b", sqsmsg.MaxOutboundMessageBytes/2)},
			"the largest": {exact("largest", sqsmsg.MaxOutboundMessageBytes)},
		} {
			counted.n.Store(0)
			if _, err := c.Do(ctx, req(name, `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
				return idem.Result{Messages: msgs}, nil
			}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if n := counted.n.Load(); n != 1 {
				t.Errorf("%s: %d send requests, want 1", name, n)
			}
			if got := drainQueue(t, client, out); len(got) != len(msgs) {
				t.Errorf("%s: %d messages arrived, want %d", name, len(got), len(msgs))
			}
		}
	})
}

// TestOversizeMessageAloneIsNotSentTwice: a request of one message that SQS refuses for
// good is not split and sent again: the message is dead-lettered after one request.
func TestOversizeMessageAloneIsNotSentTwice(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		client := awstest.SQS(t)
		out := awstest.FIFOQueue(ctx, t, client, "small", map[string]string{"MaximumMessageSize": "1024"})
		dlq := awstest.FIFOQueue(ctx, t, client, "dlq", nil)
		counted := &flakySender{api: client}
		c := e.client(t, withMode(mode), func(cfg *idem.Config) {
			cfg.Sender = counted
			cfg.OutboxDeadLetter = &sqsmsg.SQSDeadLetter{API: client, QueueURL: dlq, Source: "test"}
		})
		big := strings.Repeat("x", 2000)
		if _, err := c.Do(ctx, req("big-alone", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Messages: []idem.Message{{QueueURL: out, Body: big, GroupID: "g"}}}, nil
		}); err != nil {
			t.Fatal(err)
		}
		if n := counted.n.Load(); n != 1 {
			t.Errorf("%d send requests, want 1", n)
		}
		checkDeadOutbound(t, client, dlq, out, big)
		// Without a dead-letter queue for outbound messages, the message stays pending,
		// and the error says why.
		bare := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = client })
		_, err := bare.Do(ctx, req("big-no-dlq", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Messages: []idem.Message{{QueueURL: out, Body: big, GroupID: "g"}}}, nil
		})
		if err == nil || !strings.Contains(err.Error(), "no dead-letter queue for outbound messages") {
			t.Errorf("an oversize message without an outbound dead-letter queue: %v", err)
		}
		if rec := e.record(t, bare, "big-no-dlq"); len(rec.Outbox) != 1 {
			t.Errorf("its record holds %d pending messages, want 1", len(rec.Outbox))
		}
	})
}

func bodiesOf(ms []idem.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Body)
	}
	return out
}

// TestOversizeOutboundMessageIsDeadLettered: a queue whose MaximumMessageSize is 1 KiB
// refuses a larger message that the outbox's own limit (256 KiB) let through. The
// message is dead-lettered with the reason, marked in its record and counted, and it
// holds up neither its group nor another key's messages, in the batch and in the
// reaper's sweep (hole 6).
func TestOversizeOutboundMessageIsDeadLettered(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		client := awstest.SQS(t)
		out := awstest.FIFOQueue(ctx, t, client, "small", map[string]string{"MaximumMessageSize": "1024"})
		dlq := awstest.FIFOQueue(ctx, t, client, "dlq", nil)
		dl := &sqsmsg.SQSDeadLetter{API: client, QueueURL: dlq, Source: "test"}
		big := strings.Repeat("x", 2000)
		handler := idem.HandlerFunc(func(_ context.Context, r *idem.Request) (idem.Result, error) {
			body := "small " + r.Key
			if strings.HasPrefix(r.Key, "big") {
				body = big
			}
			return idem.Result{Messages: []idem.Message{{QueueURL: out, Body: body, GroupID: "g"}}}, nil
		})
		metrics := emf.NewMetrics(nil, "ns", "test")
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = client; cfg.OutboxDeadLetter = dl })
		bp := sqsProcessor(t, c, handler, sqsbatch.BatchConfig{Metrics: metrics})
		ev := events.SQSEvent{Records: []events.SQSMessage{keyedFIFORecord("m-1", "in", "big-1", `{"n":1}`), keyedFIFORecord("m-2", "in", "small-2", `{"n":2}`)}}
		if resp, err := bp.Process(ctx, ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batch: %+v, %v; want both records acknowledged", resp, err)
		}
		if got := bodies(drainQueue(t, client, out)); len(got) != 1 || got[0] != "small small-2" {
			t.Fatalf("queue holds %v, want the other key's message", got)
		}
		checkDeadOutbound(t, client, dlq, out, big)
		rec := e.record(t, c, "big-1")
		if len(rec.Outbox) != 0 || rec.Inflight != "" || len(rec.Dead) != 1 || rec.Dead[0].Index != 0 || rec.Dead[0].Queue != out ||
			!strings.Contains(rec.Dead[0].Reason, "1024") || rec.Sent != 0 {
			t.Fatalf("record of big-1: outbox %d, inflight %q, dead %+v, sent %d; want marked, with the message dead-lettered and why, none sent",
				len(rec.Outbox), rec.Inflight, rec.Dead, rec.Sent)
		}
		if rec := e.record(t, c, "small-2"); rec.Sent != 1 || len(rec.Dead) != 0 {
			t.Fatalf("record of small-2: sent %d, dead %+v; want its message sent", rec.Sent, rec.Dead)
		}
		if got := metrics.Snapshot(); got[emf.MetricOutboundDeadLettered] != 1 || got[emf.MetricOutboundSent] != 1 {
			t.Fatalf("%s = %v, %s = %v; want 1 and 1 (small-2's message)", emf.MetricOutboundDeadLettered, got[emf.MetricOutboundDeadLettered],
				emf.MetricOutboundSent, got[emf.MetricOutboundSent])
		}
		// The reaper's sweep: two keys left pending by a crash, the oversize one first.
		crashed := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = &failingSender{} })
		for _, key := range []string{"big-3", "small-4"} {
			if _, err := crashed.Do(ctx, req(key, `{}`), handler); err == nil {
				t.Fatalf("%s: want the send to fail", key)
			}
			e.clock.Advance(time.Second)
		}
		e.clock.Advance(6 * time.Minute) // past the leases (5 minutes without a deadline) and the grace
		r := &reaper.Reaper{Store: e.store, Grace: time.Second, MaxLease: 5 * time.Minute, Clock: e.clock.Now, Sender: client, DeadLetter: dl}
		sw, err := r.Sweep(ctx)
		if err != nil || sw.Sent != 2 || sw.DeadLettered != 1 || sw.Unsent != 0 {
			t.Fatalf("sweep: %+v, %v; want both records done, one message dead-lettered", sw, err)
		}
		if got := bodies(drainQueue(t, client, out)); len(got) != 1 || got[0] != "small small-4" {
			t.Fatalf("after the sweep the queue holds %v, want the other key's message", got)
		}
		checkDeadOutbound(t, client, dlq, out, big)
	})
}

func checkDeadOutbound(t *testing.T, client *sqs.Client, dlq, out, body string) {
	t.Helper()
	got := drainQueue(t, client, dlq)
	if len(got) != 1 || aws.ToString(got[0].Body) != body {
		t.Fatalf("dead-letter queue holds %d messages, want the oversize one", len(got))
	}
	a := got[0].MessageAttributes
	if q := aws.ToString(a[sqsmsg.DLQOutboundQueueAttribute].StringValue); q != out {
		t.Errorf("%s = %q, want %q", sqsmsg.DLQOutboundQueueAttribute, q, out)
	}
	if r := aws.ToString(a[sqsmsg.DLQReasonAttribute].StringValue); !strings.Contains(r, "1024") {
		t.Errorf("%s = %q, want the queue's refusal", sqsmsg.DLQReasonAttribute, r)
	}
	if k := aws.ToString(a[idem.KeyAttribute].StringValue); k == "" {
		t.Errorf("the dead letter lost the message's key")
	}
}

// queueDown is an SQS sender whose every request to a queue fails with that queue's error.
type queueDown map[string]error

func (q queueDown) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return nil, q[aws.ToString(in.QueueUrl)]
}

// TestDeliverTellsTheFirstCause: of a record's messages not sent, the error its caller
// gets is the cause met first in the order of its messages: the first queue's, and in
// that queue the failed request's, not the "an earlier message of its group was not
// sent" of the messages held back behind it.
func TestDeliverTellsTheFirstCause(t *testing.T) {
	const a, b = "https://sqs.us-east-1.amazonaws.com/123456789012/a.fifo", "https://sqs.us-east-1.amazonaws.com/123456789012/b.fifo"
	errA, errB := errors.New("queue a throttled"), errors.New("queue b throttled")
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "cause", Sender: queueDown{a: errA, b: errB}})
	if err != nil {
		t.Fatal(err)
	}
	h := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		var msgs []idem.Message
		for i := range 11 { // two requests to a: the second holds messages held back
			msgs = append(msgs, idem.Message{QueueURL: a, Body: fmt.Sprint("a", i), GroupID: "g"})
		}
		return idem.Result{Messages: append(msgs, idem.Message{QueueURL: b, Body: "b", GroupID: "g"})}, nil
	})
	_, err = c.Do(context.Background(), &idem.Request{Key: "k", Payload: []byte(`{}`)}, h)
	if !errors.Is(err, errA) || errors.Is(err, errB) {
		t.Fatalf("error %v, want queue a's", err)
	}
}

// TestDeliverWithoutASender: pending messages and no sender configured is an error for
// each pending, naming Config.Sender, and nothing is marked sent.
func TestDeliverWithoutASender(t *testing.T) {
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "nosender"})
	if err != nil {
		t.Fatal(err)
	}
	p := &outbox.Pending{Key: "nosender#k", Token: "t", Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/q", Body: "x"}}}
	errs := c.Deliver(context.Background(), []*outbox.Pending{p})
	if len(errs) != 1 || errs[0] == nil || !strings.Contains(errs[0].Error(), "Config.Sender") {
		t.Fatalf("errors %v, want one naming Config.Sender", errs)
	}
}

// TestDeliverOfAMessageWithoutAttributesSendsNone: an outbound message without attributes
// reaches the sender with none (nil), not with an empty map, when tracing is off.
func TestDeliverOfAMessageWithoutAttributesSendsNone(t *testing.T) {
	out := &capture{}
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "s", Sender: out})
	if err != nil {
		t.Fatal(err)
	}
	errs := c.Deliver(context.Background(), []*outbox.Pending{{Key: "s#k", Token: "t", Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/q", Body: "b"}}}})
	if errs[0] != nil || len(out.entries) != 1 {
		t.Fatalf("%v, %d entries sent", errs[0], len(out.entries))
	}
	if attrs := out.entries[0].MessageAttributes; attrs != nil {
		t.Errorf("attributes %#v, want none", attrs)
	}
}
