package idem_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// sizeLimitedBatch refuses, as SQS does, a SendMessageBatch with a message larger than
// limit counting its attributes (InvalidParameterValue, the whole request, as moto
// refuses one whose body alone is too large), and passes the others on to moto. moto
// 5.2.1 checks a queue's MaximumMessageSize against the body alone (sizeLimitedSQS).
type sizeLimitedBatch struct {
	next     outbox.SQSBatchSender
	limit    int
	requests atomic.Int64
}

func (s *sizeLimitedBatch) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	s.requests.Add(1)
	for _, e := range in.Entries {
		n := len(aws.ToString(e.MessageBody))
		for name, v := range e.MessageAttributes {
			n += sqsAttrSize(name, v)
		}
		if n > s.limit {
			return nil, &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: fmt.Sprintf("Message must be shorter than %d bytes.", s.limit), Fault: smithy.FaultClient}
		}
	}
	return s.next.SendMessageBatch(ctx, in, optFns...)
}

// sqsProcessor is a BatchProcessor with cfg running handler on c, which is its outbox.
func sqsProcessor(t *testing.T, c *idem.Client, handler idem.Handler, cfg sqsbatch.BatchConfig) *sqsbatch.BatchProcessor {
	t.Helper()
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: handler})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Handle, cfg.Outbox = rf, c
	bp, err := sqsbatch.NewBatchProcessor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return bp
}

// TestTracingNeverCostsADelivery (issue 37, hole 2): with a tracer on, an outbound
// message sized to its queue's own MaximumMessageSize (1 024 bytes, its key attribute
// counted) is delivered, as it is without a tracer: the traceparent attribute, which
// would take it over, is dropped, not the message. Its AWSTraceHeader, which SQS does
// not count, still carries the trace. The outbox learns the queue's room: the next
// message of that size goes without a traceparent in one request.
func TestTracingNeverCostsADelivery(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		client := awstest.SQS(t)
		out := fifoQueue(t, client, "small", map[string]string{"MaximumMessageSize": "1024"})
		dlq := fifoQueue(t, client, "dlq", nil)
		tp, _ := spanRecorder(t)
		sender := &sizeLimitedBatch{next: client, limit: sqsmsg.MinSQSMessageBytes}
		c := e.client(t, withMode(mode), func(cfg *idem.Config) {
			cfg.Sender = sender
			cfg.OutboxDeadLetter = &sqsmsg.SQSDeadLetter{API: client, QueueURL: dlq, Source: "test"}
			cfg.Tracer = tp
		})
		// Keys of one length: each message is 1 024 bytes with its key attribute.
		outKey := func(key string) string {
			pk, err := c.RecordKey(key)
			if err != nil {
				t.Fatal(err)
			}
			return outbox.OutboundKey(pk, 0)
		}
		key := outKey("sized-1")
		body := strings.Repeat("x", sqsmsg.MinSQSMessageBytes-len(idem.KeyAttribute)-len("String")-len(key))
		handler := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Messages: []idem.Message{{QueueURL: out, Body: body, GroupID: "g"}}}, nil
		})
		bp := sqsProcessor(t, c, handler, sqsbatch.BatchConfig{Tracer: tp})
		if resp, err := bp.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{keyedFIFORecord("m-1", "in", "sized-1", `{}`)}}); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batch: %+v, %v; want the record acknowledged", resp, err)
		}
		if dead := drainQueue(t, client, dlq); len(dead) != 0 {
			t.Fatalf("the message was dead-lettered: %s", aws.ToString(dead[0].MessageAttributes[sqsmsg.DLQReasonAttribute].StringValue))
		}
		got := drainQueue(t, client, out)
		if len(got) != 1 || aws.ToString(got[0].Body) != body || aws.ToString(got[0].MessageAttributes[idem.KeyAttribute].StringValue) != key {
			t.Fatalf("queue holds %d messages, want the one of 1024 bytes", len(got))
		}
		if _, has := got[0].MessageAttributes[telemetry.TraceParentAttribute]; has {
			t.Errorf("the delivered message carries a traceparent: it is over its queue's limit")
		}
		if rec := e.record(t, c, "sized-1"); len(rec.Dead) != 0 || rec.Sent != 1 {
			t.Errorf("record: dead %+v, sent %d; want the message sent", rec.Dead, rec.Sent)
		}
		sender.requests.Store(0)
		if resp, err := bp.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{keyedFIFORecord("m-2", "in", "sized-2", `{}`)}}); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("second batch: %+v, %v; want the record acknowledged", resp, err)
		}
		if n := sender.requests.Load(); n != 1 {
			t.Errorf("the second message of 1024 bytes took %d requests, want 1: the queue's room is known", n)
		}
		if got := drainQueue(t, client, out); len(got) != 1 || aws.ToString(got[0].MessageAttributes[idem.KeyAttribute].StringValue) != outKey("sized-2") {
			t.Fatalf("queue holds %d messages, want the second one", len(got))
		}
	})
}

// TestTracedMessageRefusedIsSentAgainWithout (issue 37, hole 2): a queue took a message
// of 2 000 bytes, so a message of 1 500 bytes gets a traceparent; the queue's
// MaximumMessageSize has since been lowered to 1 500 bytes and it refuses the message
// with the traceparent. The message is sent again at once without it and delivered, not
// dead-lettered, and the next one of that size goes without one in one request.
func TestTracedMessageRefusedIsSentAgainWithout(t *testing.T) {
	ctx := context.Background()
	client := awstest.SQS(t)
	out := fifoQueue(t, client, "lowered", nil)
	dlq := fifoQueue(t, client, "dlq", nil)
	tp, _ := spanRecorder(t)
	sender := &sizeLimitedBatch{next: client, limit: sqsmsg.MaxSQSMessageBytes}
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", Sender: sender, Tracer: tp,
		OutboxDeadLetter: &sqsmsg.SQSDeadLetter{API: client, QueueURL: dlq, Source: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	send := func(key string, size int) {
		t.Helper()
		attrCost := len(idem.KeyAttribute) + len("String") + len(key)
		m := idem.Message{QueueURL: out, Body: strings.Repeat("z", size-attrCost), GroupID: "g", DeduplicationID: key, Attributes: map[string]string{idem.KeyAttribute: key}}
		if errs := c.Deliver(ctx, []*outbox.Pending{{Key: "payments#" + key, Token: "t", Messages: []idem.Message{m}}}); errs[0] != nil {
			t.Fatalf("deliver %s: %v", key, errs[0])
		}
	}
	send("m-1", 2000)
	sender.limit = 1500
	sender.requests.Store(0)
	send("m-2", 1500)
	if n := sender.requests.Load(); n != 2 {
		t.Errorf("the message of 1500 bytes took %d requests, want 2: with its traceparent, refused, then without", n)
	}
	sender.requests.Store(0)
	send("m-3", 1500)
	if n := sender.requests.Load(); n != 1 {
		t.Errorf("the next message of 1500 bytes took %d requests, want 1: the queue's lowered room is known", n)
	}
	if dead := drainQueue(t, client, dlq); len(dead) != 0 {
		t.Fatalf("%d messages dead-lettered, want none", len(dead))
	}
	got := drainQueue(t, client, out)
	if len(got) != 3 {
		t.Fatalf("queue holds %d messages, want 3", len(got))
	}
	for _, m := range got[1:] {
		if _, has := m.MessageAttributes[telemetry.TraceParentAttribute]; has {
			t.Errorf("a message of 1500 bytes carries a traceparent over its queue's limit")
		}
	}
}

// TestEachOutboundMessageCarriesItsOwnRecordsTrace (issue 37, hole 3): the outbox sends
// the messages of several traced records in one request, and each message carries the
// trace context of its own record's send: its record's trace (the producer's), and the
// span of that record's SpanSend, never another record's.
func TestEachOutboundMessageCarriesItsOwnRecordsTrace(t *testing.T) {
	tr := newTraced(t, true, 0)
	const n = 4
	var records []events.SQSMessage
	producers := map[string]trace.SpanContext{} // outbound key -> its record's producer span
	for i := range n {
		msg, producer := tr.produced(t, fmt.Sprintf("m-%d", i))
		key := fmt.Sprintf("k-%d", i)
		msg.MessageAttributes[idem.KeyAttribute] = strAttr("String", key)
		records = append(records, msg)
		pk, err := tr.client.RecordKey(key)
		if err != nil {
			t.Fatal(err)
		}
		producers[outbox.OutboundKey(pk, 0)] = producer
	}
	resp, err := tr.batch.Process(context.Background(), events.SQSEvent{Records: records})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("process: %+v %v", resp, err)
	}
	if len(tr.out.spans) != 1 || len(tr.out.entries) != n {
		t.Fatalf("%d requests with %d messages, want the %d messages in one request", len(tr.out.spans), len(tr.out.entries), n)
	}
	sends := map[trace.SpanID]trace.TraceID{} // SpanSend -> its trace
	for _, s := range tr.rec.GetSpans() {
		if s.Name == telemetry.SpanSend {
			sends[s.SpanContext.SpanID()] = s.SpanContext.TraceID()
		}
	}
	for _, e := range tr.out.entries {
		key := aws.ToString(e.MessageAttributes[idem.KeyAttribute].StringValue)
		producer, ok := producers[key]
		if !ok {
			t.Fatalf("a message with key %q, of no record", key)
		}
		carrier := propagation.MapCarrier{telemetry.TraceParentAttribute: aws.ToString(e.MessageAttributes[telemetry.TraceParentAttribute].StringValue)}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
		if !sc.IsValid() || sc.TraceID() != producer.TraceID() || sends[sc.SpanID()] != producer.TraceID() {
			t.Errorf("message %s carries %s/%s, want a SpanSend of its own record's trace %s", key, sc.TraceID(), sc.SpanID(), producer.TraceID())
		}
	}
}

// TestMessageTooLargeForItsDeadLetterIsDeadLetteredAtOnce (issue 37, hole 4): a
// producer's message 100 bytes under SQS's 1 MiB, keyed by a 128-character FIFO
// deduplication id, fails for good. Its dead letter cannot hold the whole body beside its
// key and signature, yet it is dead-lettered on this first failure, with its reason: the
// record is no batch item failure, so its FIFO group goes on. Its body is cut, with the
// whole body's length and SHA-256, and the rest is kept: key, reason, group.
func TestMessageTooLargeForItsDeadLetterIsDeadLetteredAtOnce(t *testing.T) {
	ctx := context.Background()
	client := awstest.SQS(t)
	dlq := fifoQueue(t, client, "dlq", nil)
	keys, err := sqsmsg.NewKeys(bytes.Repeat([]byte("s"), sqsmsg.MinSecretBytes))
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("validate: amount_cents is not a number")
	handler := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) { return idem.Result{}, idem.Permanent(cause) })
	dl := &sqsmsg.SQSDeadLetter{API: &sizeLimitedSQS{next: client, limit: sqsmsg.MaxSQSMessageBytes}, QueueURL: dlq, Source: "consumer", Keys: keys}
	bp := sqsProcessor(t, c, handler, sqsbatch.BatchConfig{DeadLetter: dl})

	dedup := strings.Repeat("d", sqsmsg.MaxDeduplicationIDChars)
	body := strings.Repeat("é", (sqsmsg.MaxSQSMessageBytes-100)/2) // 2-byte runes: a cut may fall inside one
	msg := events.SQSMessage{MessageId: "m-1", Body: body, EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:input.fifo",
		Attributes: map[string]string{"MessageGroupId": "account-7", "MessageDeduplicationId": dedup, "ApproximateReceiveCount": "1"}}
	resp, err := bp.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{msg}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("process: %+v, %v; want the record dead-lettered and acknowledged at once", resp, err)
	}
	got := drainQueue(t, client, dlq)
	if len(got) != 1 {
		t.Fatalf("dead-letter queue holds %d messages, want 1", len(got))
	}
	a := got[0].MessageAttributes
	kept := aws.ToString(got[0].Body)
	sum := sha256.Sum256([]byte(body))
	if !strings.HasPrefix(body, kept) || !utf8.ValidString(kept) || len(kept) < len(body)-1024 {
		t.Errorf("dead letter's body: %d bytes, want the first bytes of the %d-byte body, cut at a rune", len(kept), len(body))
	}
	if want := fmt.Sprintf("%d bytes, sha256 %s", len(body), hex.EncodeToString(sum[:])); attrString(a, sqsmsg.DLQBodyCutAttribute) != want {
		t.Errorf("%s = %q, want %q", sqsmsg.DLQBodyCutAttribute, attrString(a, sqsmsg.DLQBodyCutAttribute), want)
	}
	if r := attrString(a, sqsmsg.DLQReasonAttribute); !strings.Contains(r, cause.Error()) {
		t.Errorf("%s = %q, want the cause", sqsmsg.DLQReasonAttribute, r)
	}
	if attrString(a, idem.KeyAttribute) != dedup || got[0].Attributes["MessageGroupId"] != "account-7" {
		t.Errorf("key %q, group %q: want the deduplication id and the group", attrString(a, idem.KeyAttribute), got[0].Attributes["MessageGroupId"])
	}
	if err := keys.VerifyDeadLetter(got[0]); err != nil {
		t.Errorf("the dead letter's signature: %v", err)
	}
}
