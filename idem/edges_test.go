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
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
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
		out := awstest.FIFOQueue(ctx, t, client, "small", map[string]string{"MaximumMessageSize": "1024"})
		dlq := awstest.FIFOQueue(ctx, t, client, "dlq", nil)
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
	out := awstest.FIFOQueue(ctx, t, client, "lowered", nil)
	dlq := awstest.FIFOQueue(ctx, t, client, "dlq", nil)
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
	dlq := awstest.FIFOQueue(ctx, t, client, "dlq", nil)
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

// The tests of this file hold what both modes promise at their edges: a guard item that
// carries no fingerprint, a refusal whose record cannot be written, the cache after a
// commit, the commit time, and a store whose refusal names a write the handler did not
// make. Each was a mutant of the single-transaction mode that no test noticed
// (RELIABILITY.md, "Mutation score").

// recordWritesFail is a store whose writes of a record without business writes (a
// refusal's, a failure's: Put and Complete with none, FailWith) fail while armed, as a
// throttled DynamoDB would; the commit of business writes passes.
type recordWritesFail struct {
	persistence.Store
	armed atomic.Bool
}

// ReadGuard reads as the store under it does (Attempt.Applied needs it).
func (s *recordWritesFail) ReadGuard(ctx context.Context, table string, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	return s.Store.(persistence.GuardReader).ReadGuard(ctx, table, key)
}

func (s *recordWritesFail) Put(ctx context.Context, rec *persistence.Record, writes []types.TransactWriteItem, seen *persistence.Record, now time.Time) (*persistence.Record, error) {
	if s.armed.Load() && len(writes) == 0 {
		return nil, errThrottled
	}
	return s.Store.Put(ctx, rec, writes, seen, now)
}

func (s *recordWritesFail) Complete(ctx context.Context, l persistence.Lease, c persistence.Completion, now time.Time) error {
	if s.armed.Load() && len(c.Writes) == 0 {
		return errThrottled
	}
	return s.Store.Complete(ctx, l, c, now)
}

func (s *recordWritesFail) FailWith(ctx context.Context, l persistence.Lease, f persistence.Failure, expiresAt, now time.Time) error {
	if s.armed.Load() {
		return errThrottled
	}
	return s.Store.FailWith(ctx, l, f, expiresAt, now)
}

// TestModesGuardItemWithoutFingerprint: a guard whose item is already there without a
// payload's fingerprint (put by a writer that did not declare it a guard: an older
// version of the handler, a migration) stands for the effect in place, as Result.Guards
// says ("the same fingerprint (or none)"): the delivery completes Guarded, without its
// writes, in both modes; it is no payload mismatch.
func TestModesGuardItemWithoutFingerprint(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		older := func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: []byte("older"), Writes: []types.TransactWriteItem{journal(e, "pay-7")}}, nil
		}
		if _, err := c.Do(ctx, req("older-writer", `{}`), older); err != nil {
			t.Fatalf("the older writer: %v", err)
		}
		var runs atomic.Int64
		res, err := c.Do(ctx, req("pay-7", `{"v":1}`), func(context.Context, *idem.Request) (idem.Result, error) {
			runs.Add(1)
			return idem.Result{Response: []byte("new"), Writes: []types.TransactWriteItem{journal(e, "pay-7"), e.bizWrite("pay-7")}, Guards: []int{0}}, nil
		})
		if err != nil || !res.Guarded || string(res.Response) != "new" {
			t.Fatalf("a guard item without a fingerprint: %+v, %v; want Guarded with the handler's response", res, err)
		}
		if n := e.bizCount(t, "pay-7"); n != 0 || runs.Load() != 1 {
			t.Fatalf("%d effects after %d runs, want none: the guard stood", n, runs.Load())
		}
		if rec := e.record(t, c, "pay-7"); rec.Status != persistence.StatusCompleted || len(rec.Outbox) != 0 {
			t.Fatalf("record %s with %d messages, want COMPLETED without messages", rec.Status, len(rec.Outbox))
		}
	})
}

// TestModesRefusalWhoseRecordFailsIsRetried: a refusal that is stored (a payload
// mismatch found by Attempt.Applied or by the guard at commit, a permanent failure) and
// whose record write fails is retried in both modes, never dead-lettered unrecorded: the
// error is not permanent, and says both what was refused and the store's failure. The
// next delivery records the refusal.
func TestModesRefusalWhoseRecordFailsIsRetried(t *testing.T) {
	type handlerOf func(e *env, payload string) idem.HandlerFunc
	applied := func(e *env, payload string) idem.HandlerFunc {
		return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			g := journal(e, "am")
			done, err := r.Attempt.Applied(ctx, aws.ToString(g.Put.TableName), e.bizKey("journal-am"))
			if err != nil || done {
				return idem.Result{Response: []byte("ok"), Guarded: done}, err
			}
			return idem.Result{Response: []byte("ok"), Writes: []types.TransactWriteItem{g, e.bizWrite("am")}, Guards: []int{0}}, nil
		}
	}
	atCommit := func(e *env, payload string) idem.HandlerFunc {
		return func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: []byte("ok"), Writes: []types.TransactWriteItem{journal(e, "am"), e.bizWrite("am")}, Guards: []int{0}}, nil
		}
	}
	invalid := func(e *env, payload string) idem.HandlerFunc {
		return func(context.Context, *idem.Request) (idem.Result, error) {
			if payload == `{"v":2}` {
				return idem.Result{}, idem.Permanent(errors.New("amount is not a number"))
			}
			return atCommit(e, payload)(context.Background(), nil)
		}
	}
	for _, tc := range []struct {
		name string
		h    handlerOf
		want error
	}{
		{"mismatch found by Applied", applied, idem.ErrPayloadMismatch},
		{"mismatch found at commit", atCommit, idem.ErrPayloadMismatch},
		{"permanent failure", invalid, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
				ctx := context.Background()
				store := &recordWritesFail{Store: e.store}
				c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Store = store })
				if _, err := c.Do(ctx, req("am", `{"v":1}`), tc.h(e, `{"v":1}`)); err != nil {
					t.Fatalf("the first payload: %v", err)
				}
				e.forget(t, c, "am") // the record's TTL ran out; the guard item stays
				store.armed.Store(true)
				_, err := c.Do(ctx, req("am", `{"v":2}`), tc.h(e, `{"v":2}`))
				if err == nil || idem.IsPermanent(err) || !errors.Is(err, errThrottled) || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Fatalf("the refusal whose record failed: %v (permanent %t); want a retryable error that is %v and the store's",
						err, idem.IsPermanent(err), tc.want)
				}
				store.armed.Store(false)
				e.clock.Advance(10 * time.Minute) // past a lease the lease mode left IN_PROGRESS
				_, err = c.Do(ctx, req("am", `{"v":2}`), tc.h(e, `{"v":2}`))
				if !idem.IsPermanent(err) || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Fatalf("the next delivery: %v, want the refusal, permanent", err)
				}
				rec := e.record(t, c, "am")
				if rec.Status == persistence.StatusInProgress {
					t.Fatalf("record %s after the next delivery, want the refusal recorded", rec.Status)
				}
				// Completed for the first payload, the record says the one under its key
				// was refused: the ingress's status reads it without knowing that payload.
				if refused := errors.Is(tc.want, idem.ErrPayloadMismatch); rec.CompletedForAnother() != refused ||
					refused && (rec.Status != persistence.StatusCompleted || rec.Category != persistence.CategoryInvalid) {
					t.Fatalf("record %s (error %q, category %q): completed for another payload %t, want %t",
						rec.Status, rec.Error, rec.Category, rec.CompletedForAnother(), refused)
				}
				// It keeps the refused payload's fingerprint: a reader holding that payload
				// learns it was refused, one holding a third payload that the key holds
				// another's (the ingress's 200 failed and 422).
				if refused := errors.Is(tc.want, idem.ErrPayloadMismatch); refused {
					first, _ := idem.HashPayload([]byte(`{"v":1}`))
					second, _ := idem.HashPayload([]byte(`{"v":2}`))
					third, _ := idem.HashPayload([]byte(`{"v":3}`))
					if rec.PayloadHash != first || rec.RefusedHash != second || rec.HoldsAnother(second) || !rec.HoldsAnother(third) || rec.HoldsAnother(first) {
						t.Fatalf("record for %q refusing %q; want for %q refusing %q, holding another only for a third payload",
							rec.PayloadHash, rec.RefusedHash, first, second)
					}
				}
				if e.ddb != nil && e.bizCount(t, "am") != 1 {
					t.Fatalf("%d effects, want the first payload's only", e.bizCount(t, "am"))
				}
			})
		})
	}
}

// countingStore counts the reads and writes of records.
type countingStore struct {
	persistence.Store
	calls atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, pk string, now time.Time) (*persistence.Record, error) {
	s.calls.Add(1)
	return s.Store.Get(ctx, pk, now)
}

func (s *countingStore) Create(ctx context.Context, rec *persistence.Record, now time.Time) (*persistence.Record, bool, error) {
	s.calls.Add(1)
	return s.Store.Create(ctx, rec, now)
}

func (s *countingStore) Put(ctx context.Context, rec *persistence.Record, writes []types.TransactWriteItem, seen *persistence.Record, now time.Time) (*persistence.Record, error) {
	s.calls.Add(1)
	return s.Store.Put(ctx, rec, writes, seen, now)
}

// TestModesCacheAnswersWhatThisContainerCommitted: with Config.CacheSize, a key this
// client committed (without messages) is answered from memory in both modes: its
// duplicates make no request, and another payload under it is refused without one.
func TestModesCacheAnswersWhatThisContainerCommitted(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		store := &countingStore{Store: e.store}
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Store, cfg.CacheSize = store, 10 })
		var runs atomic.Int64
		if _, err := c.Do(ctx, req("warm", `{"a":1}`), effect(e, &runs, "warm", "first")); err != nil {
			t.Fatal(err)
		}
		store.calls.Store(0)
		for range 3 {
			res, err := c.Do(ctx, req("warm", `{"a":1}`), effect(e, &runs, "warm", "again"))
			if err != nil || !res.Replayed || string(res.Response) != "first" {
				t.Fatalf("duplicate: %+v, %v; want the first response", res, err)
			}
		}
		if _, err := c.Do(ctx, req("warm", `{"a":2}`), effect(e, &runs, "warm", "other")); !errors.Is(err, idem.ErrPayloadMismatch) {
			t.Fatalf("another payload: %v, want ErrPayloadMismatch", err)
		}
		if n := store.calls.Load(); n != 0 || runs.Load() != 1 {
			t.Fatalf("%d store requests and %d runs for the duplicates, want none: answered from the cache", n, runs.Load())
		}
	})
}

// TestModesUpdatedAtIsTheCommitTime: a committed record's UpdatedAt is when it was
// committed, after the handler ran, not when the delivery started: the reaper sends a
// crash's pending messages in that order, in both modes.
func TestModesUpdatedAtIsTheCommitTime(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		o := newOutbox(t)
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = &failingSender{} })
		start := e.clock.Now()
		var runs atomic.Int64
		slow := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			e.clock.Advance(90 * time.Second) // a handler that takes its time
			return journalEffect(e, o, &runs, "slow")(ctx, r)
		}
		if _, err := c.Do(ctx, req("slow", `{}`), slow); err == nil {
			t.Fatal("the send did not fail")
		}
		rec := e.record(t, c, "slow")
		if want := start.Add(90 * time.Second); !rec.UpdatedAt.Equal(want) || !rec.CreatedAt.Equal(start) {
			t.Fatalf("created %v, updated %v; want created at the start %v and updated at the commit %v", rec.CreatedAt, rec.UpdatedAt, start, want)
		}
		if rec.Inflight == "" || len(rec.Outbox) != 1 {
			t.Fatalf("record in the index %q with %d pending, want in the index with one", rec.Inflight, len(rec.Outbox))
		}
	})
}

// TestModesPermanentCommitErrorIsAPermanentError: a commit DynamoDB refuses for good
// (more writes than a transaction holds) is the same error in both modes: a
// *PermanentError (the dead-letter reason reads "permanent: ...") that is
// ErrInvalidRequest, with nothing committed.
func TestModesPermanentCommitErrorIsAPermanentError(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		c := e.client(t, withMode(mode))
		h := func(context.Context, *idem.Request) (idem.Result, error) {
			writes := make([]types.TransactWriteItem, persistence.MaxWrites+1)
			for i := range writes {
				writes[i] = e.bizWrite(fmt.Sprint("many-", i))
			}
			return idem.Result{Writes: writes}, nil
		}
		_, err := c.Do(context.Background(), req("many", `{}`), h)
		var pe *idem.PermanentError
		if !errors.As(err, &pe) || !errors.Is(err, idem.ErrInvalidRequest) {
			t.Fatalf("%d writes: %v, want a *PermanentError that is ErrInvalidRequest", persistence.MaxWrites+1, err)
		}
		if e.ddb != nil && e.bizCount(t, "many-0") != 0 {
			t.Fatal("a write of the refused commit landed")
		}
		// MaxWrites exactly: with the record, DynamoDB's 100 actions, committed.
		if _, err := c.Do(context.Background(), req("most", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			writes := make([]types.TransactWriteItem, persistence.MaxWrites)
			for i := range writes {
				writes[i] = e.bizWrite(fmt.Sprint("most-", i))
			}
			return idem.Result{Writes: writes}, nil
		}); err != nil {
			t.Fatalf("%d writes: %v, want them committed", persistence.MaxWrites, err)
		}
	})
}

// refusingStore refuses every commit of business writes with wce, as a Store of the
// user's own might: the write it names may be out of the handler's range, and the item
// of the failed write may be missing.
type refusingStore struct {
	persistence.Store
	wce idem.WriteConditionError
}

func (s *refusingStore) refusal(n int) error {
	if n == 0 {
		return nil
	}
	w := s.wce
	return fmt.Errorf("idem: commit: %w", &w)
}

func (s *refusingStore) Put(ctx context.Context, rec *persistence.Record, writes []types.TransactWriteItem, seen *persistence.Record, now time.Time) (*persistence.Record, error) {
	if err := s.refusal(len(writes)); err != nil {
		return nil, err
	}
	return s.Store.Put(ctx, rec, writes, seen, now)
}

func (s *refusingStore) Complete(ctx context.Context, l persistence.Lease, c persistence.Completion, now time.Time) error {
	if err := s.refusal(len(c.Writes)); err != nil {
		return err
	}
	return s.Store.Complete(ctx, l, c, now)
}

// TestModesExplainOnlyTheHandlersWrites: Result.Explain is asked about a write of the
// handler's only, at its position: a refusal that names a position outside Writes is
// returned as the store gave it, the handler's Explain not called; a refusal without
// the failed item asks Explain with a nil item. Both modes.
func TestModesExplainOnlyTheHandlersWrites(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wce       idem.WriteConditionError
		wantIndex int // the position Explain is asked about; -1: not asked
	}{
		{"position past the writes", idem.WriteConditionError{Index: 2, Reason: "store's reason", Failed: []idem.FailedWrite{{Index: 2}}}, -1},
		{"negative position", idem.WriteConditionError{Index: -1, Reason: "store's reason", Failed: []idem.FailedWrite{{Index: -1}}}, -1},
		{"no failed item", idem.WriteConditionError{Index: 1, Reason: "store's reason"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
				e := newMemoryEnv(t)
				c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Store = &refusingStore{Store: e.store, wce: tc.wce} })
				asked := -1
				h := func(context.Context, *idem.Request) (idem.Result, error) {
					writes := []types.TransactWriteItem{e.bizWrite("a"), e.bizWrite("b")}
					return idem.Result{Writes: writes, Explain: func(i int, item map[string]types.AttributeValue) string {
						asked = i
						if item != nil {
							return "account " + fmt.Sprint(writes[i].Update.Key) + " has an item"
						}
						return "account b does not exist"
					}}, nil
				}
				_, err := c.Do(context.Background(), req("refused", `{}`), h)
				var got *idem.WriteConditionError
				if !errors.As(err, &got) || !idem.IsPermanent(err) {
					t.Fatalf("%s: %v, want the refusal, permanent", mode, err)
				}
				if asked != tc.wantIndex {
					t.Fatalf("%s: Explain asked about write %d, want %d", mode, asked, tc.wantIndex)
				}
				if want := map[bool]string{true: "account b does not exist", false: "store's reason"}[tc.wantIndex >= 0]; got.Reason != want || got.Explained != (tc.wantIndex >= 0) {
					t.Fatalf("%s: reason %q (explained %t), want %q", mode, got.Reason, got.Explained, want)
				}
			}
		})
	}
}

// releaseFails is a store whose FailWith fails while fails is above zero, as a throttled
// or unreachable DynamoDB would.
type releaseFails struct {
	persistence.Store
	fails atomic.Int64
}

var errThrottled = errors.New("ProvisionedThroughputExceededException: throttled")

func (s *releaseFails) FailWith(ctx context.Context, l persistence.Lease, f persistence.Failure, expiresAt, now time.Time) error {
	if s.fails.Add(-1) >= 0 {
		return errThrottled
	}
	return s.Store.FailWith(ctx, l, f, expiresAt, now)
}

// TestUnrecordedRefusalIsRetried: a business rule's refusal whose release of the record
// fails is not permanent (dead-lettered, it would leave the record IN_PROGRESS for the
// reaper to fail as an expired lease, and a status that reads in_progress for good): it is
// retried, and the next delivery, once the lease ended, meets the refusal again and
// records it. What the error says (ErrRefused, the store's error) stays visible.
func TestUnrecordedRefusalIsRetried(t *testing.T) {
	ctx := context.Background()
	store := &releaseFails{Store: memstore.NewMemoryStore()}
	store.fails.Store(1)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	c, err := idem.New(idem.Config{Store: store, Scope: "payments", Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := func(context.Context, *idem.Request) (idem.Result, error) {
		runs.Add(1)
		return idem.Result{}, idem.Refuse("account closed")
	}
	rk, err := idem.RecordKey("payments", "k-1", false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(ctx, req("k-1", `{"amount":1}`), h)
	if err == nil || idem.IsPermanent(err) || !errors.Is(err, idem.ErrRefused) || !errors.Is(err, errThrottled) {
		t.Fatalf("the refusal whose release failed: %v (permanent %t), want a retryable error that is ErrRefused and the store's", err, idem.IsPermanent(err))
	}
	if rec, err := store.Get(ctx, rk, now); err != nil || rec.Status != persistence.StatusInProgress {
		t.Fatalf("the record after the failed release: %+v, %v; want IN_PROGRESS", rec, err)
	}
	now = now.Add(10 * time.Minute) // past the lease (no deadline: DefaultLease, 5 minutes)
	_, err = c.Do(ctx, req("k-1", `{"amount":1}`), h)
	if !idem.IsPermanent(err) || !errors.Is(err, idem.ErrRefused) {
		t.Fatalf("the redelivery: %v, want the refusal, permanent", err)
	}
	rec, err := store.Get(ctx, rk, now)
	if err != nil || rec.Status != persistence.StatusFailed || !rec.Retryable {
		t.Fatalf("the record after the redelivery: %+v, %v; want FAILED, retryable (a refusal is redriven after the fix)", rec, err)
	}
	if runs.Load() != 2 {
		t.Fatalf("the handler ran %d times, want 2", runs.Load())
	}
}
