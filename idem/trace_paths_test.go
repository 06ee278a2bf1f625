package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
)

// wantAttr fails unless span s carries key with the value want.
func wantAttr(t *testing.T, s tracetest.SpanStub, key, want string) {
	t.Helper()
	v, ok := spanAttrValue(s, key)
	if !ok || v.String() != want {
		t.Errorf("span %s: %s = %q (set: %v), want %q", s.Name, key, v.String(), ok, want)
	}
}

// noAttr fails when span s carries key.
func noAttr(t *testing.T, s tracetest.SpanStub, key string) {
	t.Helper()
	if v, ok := spanAttrValue(s, key); ok {
		t.Errorf("span %s: %s = %q, want it unset", s.Name, key, v.String())
	}
}

// wantStatus fails unless span s ends with the status code, and (for an error) a
// description that holds text.
func wantStatus(t *testing.T, s tracetest.SpanStub, code codes.Code, text string) {
	t.Helper()
	if s.Status.Code != code || !strings.Contains(s.Status.Description, text) {
		t.Errorf("span %s: status %v %q, want %v with %q", s.Name, s.Status.Code, s.Status.Description, code, text)
	}
}

// tracedOKRecord is the SQS handler of a traced client on a MemoryStore whose handler
// answers "ok".
func tracedOKRecord(t *testing.T, tp trace.TracerProvider) sqsbatch.RecordFunc {
	t.Helper()
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte(`"ok"`)}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	return record
}

// createFails is a store whose acquisitions fail with err.
type createFails struct {
	persistence.Store
	err error
}

func (s createFails) Create(context.Context, *persistence.Record, time.Time) (*persistence.Record, bool, error) {
	return nil, false, s.err
}

// TestRequestSpansOfEachDecision: Client.Do called with no span in its context is a
// trace of its own (SpanRequest), whose acquire span says what was decided, with whom,
// and whose handler, commit and release spans say what ran and how it ended.
func TestRequestSpansOfEachDecision(t *testing.T) {
	ctx := context.Background()
	ok := func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte(`"ok"`)}, nil
	}
	newClient := func(t *testing.T, store persistence.Store, owner string) (*idem.Client, *tracetest.InMemoryExporter) {
		t.Helper()
		tp, exp := spanRecorder(t)
		c, err := idem.New(idem.Config{Store: store, Scope: "payments", Owner: owner, Tracer: tp})
		if err != nil {
			t.Fatal(err)
		}
		return c, exp
	}

	t.Run("applied then replayed", func(t *testing.T) {
		c, exp := newClient(t, memstore.NewMemoryStore(), "worker-1")
		if _, err := c.Do(ctx, req(secretKey, secretBody), ok); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		pk, _ := c.RecordKey(secretKey)
		request := one(t, spans, telemetry.SpanRequest)
		wantAttr(t, request, telemetry.AttrRecord, telemetry.RecordTraceID(pk))
		noAttr(t, request, telemetry.AttrKeyHash) // a Client has no Keys: a plain hash would let a guess be checked
		wantAttr(t, request, "idem.replayed", "false")
		wantAttr(t, request, telemetry.AttrAttempt, "1")
		wantStatus(t, request, codes.Unset, "")
		acquire := one(t, spans, telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionAcquired)
		wantAttr(t, acquire, telemetry.AttrAttempt, "1")
		wantAttr(t, acquire, telemetry.AttrOwner, "worker-1")
		if tok := spanAttr(acquire, telemetry.AttrLeaseToken); len(tok) != 8 {
			t.Errorf("lease token on the span %q, want its first 8 characters", tok)
		}
		handler := one(t, spans, telemetry.SpanHandler)
		wantAttr(t, handler, telemetry.AttrAttempt, "1")
		wantStatus(t, handler, codes.Unset, "")
		commit := one(t, spans, telemetry.SpanCommit)
		wantAttr(t, commit, "idem.writes", "0")
		wantAttr(t, commit, telemetry.AttrMessages, "0")
		wantAttr(t, commit, "idem.guarded", "false")
		wantAttr(t, commit, telemetry.AttrAttempt, "1")
		noSecrets(t, spans)

		exp.Reset()
		if res, err := c.Do(ctx, req(secretKey, secretBody), ok); err != nil || !res.Replayed {
			t.Fatalf("the duplicate: %+v %v", res, err)
		}
		request = one(t, exp.GetSpans(), telemetry.SpanRequest)
		wantAttr(t, request, "idem.replayed", "true")
		noAttr(t, request, telemetry.AttrAttempt) // no acquisition ran the handler
		wantAttr(t, one(t, exp.GetSpans(), telemetry.SpanAcquire), telemetry.AttrDecision, telemetry.DecisionReplayed)

		exp.Reset()
		if _, err := c.Do(ctx, req(secretKey, `{"iban":"other"}`), ok); !errors.Is(err, idem.ErrPayloadMismatch) {
			t.Fatalf("another payload: %v", err)
		}
		spans = exp.GetSpans()
		wantAttr(t, one(t, spans, telemetry.SpanAcquire), telemetry.AttrDecision, telemetry.DecisionMismatch)
		request = one(t, spans, telemetry.SpanRequest)
		noAttr(t, request, telemetry.AttrAttempt)
		wantStatus(t, request, codes.Error, "payload")
	})

	t.Run("failed retryably, then for good", func(t *testing.T) {
		c, exp := newClient(t, memstore.NewMemoryStore(), "worker-1")
		if _, err := c.Do(ctx, req("k-retry", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{}, errors.New("the bank timed out")
		}); err == nil {
			t.Fatal("the handler's error was not returned")
		}
		spans := exp.GetSpans()
		wantStatus(t, one(t, spans, telemetry.SpanHandler), codes.Error, "the bank timed out")
		release := one(t, spans, telemetry.SpanRelease)
		wantAttr(t, release, telemetry.AttrRetryable, "true")
		wantStatus(t, release, codes.Unset, "") // the release itself was written

		exp.Reset()
		if _, err := c.Do(ctx, req("k-retry", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{}, idem.Permanent(errors.New("account closed"))
		}); !idem.IsPermanent(err) {
			t.Fatalf("the refusal: %v", err)
		}
		spans = exp.GetSpans()
		wantAttr(t, one(t, spans, telemetry.SpanAcquire), telemetry.AttrDecision, telemetry.DecisionTakenOver)
		wantAttr(t, one(t, spans, telemetry.SpanHandler), telemetry.AttrAttempt, "2")
		wantAttr(t, one(t, spans, telemetry.SpanRelease), telemetry.AttrRetryable, "false")

		exp.Reset()
		var stored *idem.StoredError
		if _, err := c.Do(ctx, req("k-retry", `{}`), ok); !errors.As(err, &stored) {
			t.Fatalf("after the refusal: %v", err)
		}
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionStored)
		wantStatus(t, acquire, codes.Unset, "") // the store answered: a decision, not its failure
	})

	t.Run("held by a live lease", func(t *testing.T) {
		store := memstore.NewMemoryStore()
		first, _ := newClient(t, store, "worker-1")
		second, exp := newClient(t, store, "worker-2")
		var inner error
		if _, err := first.Do(ctx, req("k-held", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			_, inner = second.Do(ctx, req("k-held", `{}`), ok)
			return idem.Result{Response: []byte("1")}, nil
		}); err != nil {
			t.Fatal(err)
		}
		var held *idem.LeaseHeldError
		if !errors.As(inner, &held) {
			t.Fatalf("the second delivery: %v, want a LeaseHeldError", inner)
		}
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionInProgress)
		wantAttr(t, acquire, telemetry.AttrOwner, "worker-1")
		wantAttr(t, acquire, telemetry.AttrLeaseUntil, held.Until.UTC().Format(time.RFC3339Nano))
	})

	t.Run("a takeover lost to another holder", func(t *testing.T) {
		store := memstore.NewMemoryStore()
		c, _ := newClient(t, store, "worker-1")
		if _, err := c.Do(ctx, req("k-race", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{}, errors.New("transient")
		}); err == nil {
			t.Fatal("no error")
		}
		racer, exp := newClient(t, takeoverFails{store, fmt.Errorf("injected: %w", idem.ErrLeaseLost)}, "worker-2")
		if _, err := racer.Do(ctx, req("k-race", `{}`), ok); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("the lost takeover: %v", err)
		}
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionInProgress)
		noAttr(t, acquire, telemetry.AttrOwner) // the winner is not known
	})

	t.Run("the store down", func(t *testing.T) {
		c, exp := newClient(t, createFails{memstore.NewMemoryStore(), errors.New("injected: store down")}, "worker-1")
		if _, err := c.Do(ctx, req("k-down", `{}`), ok); err == nil {
			t.Fatal("no error")
		}
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionError)
		wantStatus(t, acquire, codes.Error, "store down")
	})

	t.Run("a commit that fails", func(t *testing.T) {
		c, exp := newClient(t, &commitFaults{Store: memstore.NewMemoryStore(), complete: errors.New("injected: commit refused")}, "worker-1")
		if _, err := c.Do(ctx, req("k-commit", `{}`), ok); err == nil {
			t.Fatal("no error")
		}
		commit := one(t, exp.GetSpans(), telemetry.SpanCommit)
		wantStatus(t, commit, codes.Error, "commit refused")
		noAttr(t, commit, telemetry.AttrAttempt) // nothing was committed by any attempt
	})

	t.Run("a record written without an attempt count, taken over", func(t *testing.T) {
		// A record another writer left (a Powertools record has no attempt attribute):
		// its lease ended, so the next delivery takes it over from that holder.
		store := memstore.NewMemoryStore()
		now := time.Now()
		pk, err := idem.RecordKey("payments", "k-old", false)
		if err != nil {
			t.Fatal(err)
		}
		if _, created, err := store.Create(ctx, &persistence.Record{Key: pk, Status: persistence.StatusInProgress, LeaseToken: "old-token",
			LeaseUntil: now.Add(-time.Minute).Truncate(time.Millisecond), Inflight: "0", ExpiresAt: now.Add(time.Hour), Owner: "elsewhere",
			CreatedAt: now, UpdatedAt: now}, now); err != nil || !created {
			t.Fatalf("create: %v %v", created, err)
		}
		c, exp := newClient(t, store, "worker-1")
		if _, err := c.Do(ctx, req("k-old", `{}`), ok); err != nil {
			t.Fatal(err)
		}
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionTakenOver)
		wantAttr(t, acquire, telemetry.AttrPreviousOwner, "elsewhere")
		wantAttr(t, acquire, telemetry.AttrAttempt, "1")
	})
}

// TestInjectTrace: a producer's message gets its span's context as the traceparent
// attribute and the AWSTraceHeader system attribute, keeping the producer's own
// attributes; with SQS's 10 attributes already, or its own traceparent, only the
// header; without a span, nothing.
func TestInjectTrace(t *testing.T) {
	tp, _ := spanRecorder(t)
	ctx, span := tp.Tracer("test").Start(context.Background(), "producer", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	sc := span.SpanContext()
	wantTP := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
	tid := sc.TraceID().String()
	wantHeader := fmt.Sprintf("Root=1-%s-%s;Parent=%s;Sampled=1", tid[:8], tid[8:], sc.SpanID())
	attrs := func(n int) map[string]sqstypes.MessageAttributeValue {
		m := map[string]sqstypes.MessageAttributeValue{}
		for i := range n {
			m[fmt.Sprintf("a%d", i)] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
		}
		return m
	}
	for name, c := range map[string]struct {
		attrs  map[string]sqstypes.MessageAttributeValue
		wantTP string // "": none added
		n      int    // attributes after
	}{
		"no attributes":       {nil, wantTP, 1},
		"one of its own":      {attrs(1), wantTP, 2},
		"nine of its own":     {attrs(9), wantTP, 10},
		"ten already":         {attrs(10), "", 10},
		"its own traceparent": {map[string]sqstypes.MessageAttributeValue{telemetry.TraceParentAttribute: {DataType: aws.String("String"), StringValue: aws.String("mine")}}, "mine", 1},
	} {
		in := &sqs.SendMessageInput{MessageAttributes: c.attrs}
		telemetry.InjectTrace(ctx, in)
		got := in.MessageAttributes[telemetry.TraceParentAttribute]
		if aws.ToString(got.StringValue) != c.wantTP || len(in.MessageAttributes) != c.n {
			t.Errorf("%s: traceparent %q of %d attributes, want %q of %d", name, aws.ToString(got.StringValue), len(in.MessageAttributes), c.wantTP, c.n)
		}
		if c.wantTP == wantTP && aws.ToString(got.DataType) != "String" {
			t.Errorf("%s: traceparent's type %q", name, aws.ToString(got.DataType))
		}
		for k := range c.attrs {
			if _, ok := in.MessageAttributes[k]; !ok {
				t.Errorf("%s: the producer's attribute %s was lost", name, k)
			}
		}
		h := in.MessageSystemAttributes[telemetry.AWSTraceHeader]
		if aws.ToString(h.StringValue) != wantHeader || aws.ToString(h.DataType) != "String" {
			t.Errorf("%s: AWSTraceHeader %q (%q), want %q", name, aws.ToString(h.StringValue), aws.ToString(h.DataType), wantHeader)
		}
	}
	in := &sqs.SendMessageInput{}
	telemetry.InjectTrace(context.Background(), in)
	if in.MessageAttributes != nil || in.MessageSystemAttributes != nil {
		t.Errorf("without a span: %v %v", in.MessageAttributes, in.MessageSystemAttributes)
	}
}

// TestRecordSpanContexts: what the record's span takes from the message. A message that
// carries both contexts of one trace (as InjectTrace puts them) has the W3C one as its
// parent and links only the invocation; one whose X-Ray context is of another trace
// links it too, even sampled; a traceparent attribute that is not a string is ignored.
// The span carries the receive count.
func TestRecordSpanContexts(t *testing.T) {
	tr := newTraced(t, true, 0)
	ctx, producer := tr.tp.Tracer("test").Start(context.Background(), "producer", trace.WithSpanKind(trace.SpanKindProducer))
	producer.End()
	in := &sqs.SendMessageInput{}
	telemetry.InjectTrace(ctx, in)
	msg := func(id, key string) events.SQSMessage {
		return events.SQSMessage{
			MessageId: id, Body: `{}`, EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:input",
			Attributes: map[string]string{"ApproximateReceiveCount": "3", telemetry.AWSTraceHeader: aws.ToString(in.MessageSystemAttributes[telemetry.AWSTraceHeader].StringValue)},
			MessageAttributes: map[string]events.SQSMessageAttribute{
				idem.KeyAttribute:              {DataType: "String", StringValue: aws.String(key)},
				telemetry.TraceParentAttribute: {DataType: "String", StringValue: in.MessageAttributes[telemetry.TraceParentAttribute].StringValue},
			},
		}
	}

	inv := tr.deliver(t, msg("m-both", "k-both"))
	process := one(t, tr.rec.GetSpans(), telemetry.SpanProcess)
	if process.Parent.SpanID() != producer.SpanContext().SpanID() || len(process.Links) != 1 || process.Links[0].SpanContext.SpanID() != inv.SpanID() {
		t.Errorf("both contexts of one trace: parent %v, links %v; want the producer, and the invocation linked", process.Parent.SpanID(), process.Links)
	}
	wantAttr(t, process, telemetry.AttrReceiveCount, "3")

	tr.rec.Reset()
	other := msg("m-other", "k-other")
	other.Attributes[telemetry.AWSTraceHeader] = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	tr.deliver(t, other)
	process = one(t, tr.rec.GetSpans(), telemetry.SpanProcess)
	if process.Parent.SpanID() != producer.SpanContext().SpanID() || len(process.Links) != 2 || process.Links[1].SpanContext.SpanID().String() != "53995c3f42cd8ad8" {
		t.Errorf("an X-Ray context of another trace: parent %v, links %v; want the producer, the X-Ray context linked", process.Parent.SpanID(), process.Links)
	}

	tr.rec.Reset()
	binary := msg("m-binary", "k-binary")
	binary.MessageAttributes[telemetry.TraceParentAttribute] = events.SQSMessageAttribute{DataType: "Binary", BinaryValue: []byte("00-x")}
	delete(binary.Attributes, telemetry.AWSTraceHeader)
	tr.deliver(t, binary)
	if process = one(t, tr.rec.GetSpans(), telemetry.SpanProcess); process.Parent.IsValid() {
		t.Errorf("a binary traceparent: parent %v, want a root", process.Parent)
	}
}

// TestRecordSpanOutcomes: a record's span ends in error when the record failed or was
// dead-lettered (a message without a key, here), with the error; an applied record's
// and a duplicate's end well, and a duplicate's names no attempt. The send span says how
// many of its messages were dead-lettered.
func TestRecordSpanOutcomes(t *testing.T) {
	tp, exp := spanRecorder(t)
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", Sender: &capture{}, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: idem.HandlerFunc(func(_ context.Context, r *idem.Request) (idem.Result, error) {
		if string(r.Payload) == `"fail"` {
			return idem.Result{}, errors.New("downstream unavailable")
		}
		return idem.Result{Response: []byte(`"ok"`), Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/out", Body: "x"}}}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	dl := &fakeDL{}
	batch, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: record, Outbox: client, DeadLetter: dl, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	keyless := events.SQSMessage{MessageId: "m-keyless", Body: `{}`, ReceiptHandle: "rh-keyless"} // no key attribute, not FIFO
	for _, c := range []struct {
		msg     events.SQSMessage
		outcome string
		code    codes.Code
		text    string
	}{
		{keyedFIFORecord("m-ok", "g-1", "k-ok", `{}`), "ok", codes.Unset, ""},
		{keyedFIFORecord("m-dup", "g-1", "k-ok", `{}`), "ok", codes.Unset, ""},
		{keyedFIFORecord("m-fail", "g-3", "k-fail", `"fail"`), "retry", codes.Error, "downstream unavailable"},
		{keyless, "dead_lettered", codes.Error, idem.KeyAttribute},
	} {
		exp.Reset()
		if _, err := batch.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{c.msg}}); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		process := one(t, spans, telemetry.SpanProcess)
		wantAttr(t, process, "idem.batch_outcome", c.outcome)
		wantStatus(t, process, c.code, c.text)
		switch c.msg.MessageId {
		case "m-ok":
			wantAttr(t, process, telemetry.AttrAttempt, "1")
			wantAttr(t, one(t, spans, telemetry.SpanSend), telemetry.AttrDeadLettered, "0")
		case "m-dup":
			wantAttr(t, process, telemetry.AttrOutcome, "duplicate")
			noAttr(t, process, telemetry.AttrAttempt)
		}
	}
	if len(dl.ids) != 1 || dl.ids[0] != "m-keyless" {
		t.Errorf("dead-lettered %v, want the message without a key", dl.ids)
	}
}

// TestOutboundTraceparentWithinTheSizeLimit: an outbound message takes the traceparent
// attribute only when it still fits, to the byte, what its queue is known to take, as
// SQS counts its size (body, and each attribute's name, type and value): here, a queue
// that took a message of MaxOutboundMessageBytes. A queue known to take no more than
// SQS's least MaximumMessageSize gives a larger message none. A message that sets a
// traceparent of its own keeps it.
func TestOutboundTraceparentWithinTheSizeLimit(t *testing.T) {
	const traceparent = len(telemetry.TraceParentAttribute) + len("String") + len("00-") + 32 + len("-") + 16 + len("-01")
	const q = "https://sqs.us-east-1.amazonaws.com/123456789012/q"
	for _, c := range []struct {
		name  string
		known bool // the queue took a message of MaxOutboundMessageBytes before
		msg   idem.Message
		room  bool
		value string
	}{
		{"fits to the byte", true, idem.Message{Body: strings.Repeat("x", sqsmsg.MaxOutboundMessageBytes-traceparent)}, true, ""},
		{"one byte over", true, idem.Message{Body: strings.Repeat("x", sqsmsg.MaxOutboundMessageBytes-traceparent+1)}, false, ""},
		{"the least queue, to the byte", false, idem.Message{Body: strings.Repeat("x", sqsmsg.MinSQSMessageBytes-traceparent)}, true, ""},
		{"over the least queue", false, idem.Message{Body: strings.Repeat("x", sqsmsg.MinSQSMessageBytes-traceparent+1)}, false, ""},
		{"its own traceparent", false, idem.Message{Body: "x", Attributes: map[string]string{telemetry.TraceParentAttribute: "mine"}}, true, "mine"},
	} {
		tr := newTraced(t, true, 0)
		if c.known {
			learn := idem.Message{QueueURL: q, Body: strings.Repeat("y", sqsmsg.MaxOutboundMessageBytes)}
			if errs := tr.client.Deliver(context.Background(), []*outbox.Pending{{Key: "payments#first", Token: "t", Messages: []idem.Message{learn}}}); errs[0] != nil {
				t.Fatal(errs[0])
			}
		}
		c.msg.QueueURL = q
		errs := tr.client.Deliver(context.Background(), []*outbox.Pending{{Key: "payments#k", Token: "t", Messages: []idem.Message{c.msg}}})
		if errs[0] != nil || len(tr.out.entries) == 0 {
			t.Fatalf("%s: %v, %d entries sent", c.name, errs[0], len(tr.out.entries))
		}
		got, has := tr.out.entries[len(tr.out.entries)-1].MessageAttributes[telemetry.TraceParentAttribute]
		if has != c.room || c.value != "" && aws.ToString(got.StringValue) != c.value {
			t.Errorf("%s: traceparent %v %q, want %v %q", c.name, has, aws.ToString(got.StringValue), c.room, c.value)
		}
	}
}

// movedOn is a store on which every listed lease has moved on before its reap.
type movedOn struct{ persistence.Store }

func (movedOn) Reap(context.Context, persistence.StaleLease, string, time.Time) error {
	return fmt.Errorf("injected: %w", idem.ErrLeaseLost)
}

// TestReapSpanOfALeaseThatMovedOn: a listed lease that moved on before its reap (its
// holder committed, or a redelivery took it over) is no failure of the sweep: its span
// says not reaped, without an error or a lateness. A reaped lease's span says how late
// past its end and the grace it was reaped.
func TestReapSpanOfALeaseThatMovedOn(t *testing.T) {
	now := time.Now()
	later := now.Add(2 * time.Minute)
	for _, moved := range []bool{false, true} {
		tp, exp := spanRecorder(t)
		var store persistence.Store = memstore.NewMemoryStore()
		pk, err := idem.RecordKey("payments", "k-stale", false)
		if err != nil {
			t.Fatal(err)
		}
		if _, created, err := store.Create(context.Background(), &persistence.Record{Key: pk, Status: persistence.StatusInProgress, LeaseToken: "0123456789abcdef",
			LeaseUntil: now.Truncate(time.Millisecond), Inflight: "0", ExpiresAt: now.Add(time.Hour), Attempt: 1, Owner: "crashed", CreatedAt: now, UpdatedAt: now}, now); err != nil || !created {
			t.Fatalf("create: %v %v", created, err)
		}
		if moved {
			store = movedOn{store}
		}
		r := &reaper.Reaper{Store: store, Shards: 1, Grace: time.Second, Clock: func() time.Time { return later }, Tracer: tp}
		if _, err := r.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		reap := one(t, spans, telemetry.SpanReap)
		wantAttr(t, reap, telemetry.AttrLeaseToken, "01234567")
		wantStatus(t, reap, codes.Unset, "")
		wantStatus(t, one(t, spans, telemetry.SpanSweep), codes.Unset, "")
		if moved {
			wantAttr(t, reap, telemetry.AttrReaped, "false")
			noAttr(t, reap, telemetry.AttrLate)
		} else {
			wantAttr(t, reap, telemetry.AttrReaped, "true")
			wantAttr(t, reap, telemetry.AttrLate, fmt.Sprint(later.Sub(now.Truncate(time.Millisecond).Add(time.Second)).Milliseconds()))
		}
	}
}

// quietSpan is a caller's span that is not recording yet keeps what it is given.
type quietSpan struct {
	noop.Span
	attrs []attribute.KeyValue
}

func (*quietSpan) IsRecording() bool                        { return false }
func (s *quietSpan) SetAttributes(kv ...attribute.KeyValue) { s.attrs = append(s.attrs, kv...) }

// TestRecordNotesNothingOnASpanThatIsNotRecording: the SQS handler writes what it learned
// of a record only to a span that records; a span of the caller's that says it does not
// is given nothing, whatever its SetAttributes would do.
func TestRecordNotesNothingOnASpanThatIsNotRecording(t *testing.T) {
	tp, _ := spanRecorder(t)
	record := tracedOKRecord(t, tp)
	for _, msg := range []events.SQSMessage{
		{MessageId: "m-keyless", Body: `{}`},
		keyedFIFORecord("m-keyed", "g", "k-1", `{}`),
	} {
		span := &quietSpan{}
		_ = record(trace.ContextWithSpan(context.Background(), span), msg)
		if len(span.attrs) != 0 {
			t.Errorf("%s: a span that is not recording was given %v", msg.MessageId, span.attrs)
		}
	}
}
