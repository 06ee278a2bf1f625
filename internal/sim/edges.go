package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
)

// The edges of SQS (issue 37, docs/behaviour.md): the handler's outbound messages carry
// up to the attributes SQS allows, some are sized to their queue's limit to the byte,
// idem's own tracer runs, and producers send messages near 1 MiB keyed by a 128-character
// deduplication id (producers.go). The oracle checks each outbound dead letter against
// the message committed (what a redrive sends back: body and attributes), that no
// message that fits its queue is dead-lettered, and that each delivered message carries
// its own record's trace context.

// spans is idem's tracer of a configuration that runs it: its provider and where its
// spans go.
type spans struct {
	tp  *sdktrace.TracerProvider
	rec *tracetest.InMemoryExporter
}

func newSpans() *spans {
	rec := tracetest.NewInMemoryExporter()
	return &spans{tp: sdktrace.NewTracerProvider(sdktrace.WithSyncer(rec)), rec: rec}
}

// tracer is the TracerProvider the consumers and reapers get: none when tracing is off.
func (c config) tracer() trace.TracerProvider {
	if c.spans == nil {
		return nil
	}
	return c.spans.tp
}

// messageHash picks, from a message's source and position, what the handler gives it:
// the same message of a re-run gets the same.
func messageHash(src string, i int) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s#%d", src, i)
	return h.Sum32()
}

// outboundAttrs are the handler's own attributes of message i of src, under
// config.attrs: 0 to 9 (with KeyAttribute, SQS's 10), with characters JSON escapes.
func outboundAttrs(src string, i int) map[string]string {
	n := int(messageHash(src, i) % sqsmsg.MaxMessageAttributes)
	if n == 0 {
		return nil
	}
	attrs := make(map[string]string, n)
	for j := range n {
		attrs[fmt.Sprintf("sim-a%d", j)] = fmt.Sprintf(`%s "%d" <&> \%d`, src, i, j)
	}
	return attrs
}

// shapeOutbound gives m, message i of src under the record key pk, the edges the
// configuration draws: its attributes, and, for some messages to the FIFO queue when
// its MaximumMessageSize is small, a body that fills it to the byte with the attributes
// and the key the middleware adds.
func (w *world) shapeOutbound(m *idem.Message, pk, src string, i int) {
	if w.sc.cfg.attrs {
		m.Attributes = outboundAttrs(src, i)
	}
	if !w.sc.cfg.exact || m.QueueURL != w.outFIFOURL || w.sc.outMaxBytes > 1500 || strings.Contains(m.Body, `"pad"`) || messageHash(src, i)%3 != 0 {
		return
	}
	size := len(m.Body) + len(`,"pad":""`) + len(idem.KeyAttribute) + len("String") + len(outbox.OutboundKey(pk, i))
	for name, v := range m.Attributes {
		size += len(name) + len("String") + len(v)
	}
	if pad := w.sc.outMaxBytes - size; pad >= 0 {
		m.Body = strings.TrimSuffix(m.Body, "}") + `,"pad":"` + strings.Repeat("x", pad) + `"}`
	}
}

// cutBodyOp is the operation whose body a dead letter holds cut (sqsmsg.DLQBodyCutAttribute
// names the whole body's length and SHA-256), or nil.
func (w *world) cutBodyOp(m simsqs.Message) *op {
	v, ok := m.Attributes[sqsmsg.DLQBodyCutAttribute]
	if !ok {
		return nil
	}
	for _, o := range w.ops {
		sum := sha256.Sum256([]byte(o.body))
		if aws.ToString(v.StringValue) == fmt.Sprintf("%d bytes, sha256 %s", len(o.body), hex.EncodeToString(sum[:])) && strings.HasPrefix(o.body, m.Body) {
			return o
		}
	}
	return nil
}

// checkEdges is the oracle of the edges.
func (w *world) checkEdges() {
	for _, m := range w.sqs.Messages(w.dlq) {
		if _, ok := m.Attributes[sqsmsg.DLQOutboundQueueAttribute]; ok {
			w.checkDeadOutbound(m)
		}
	}
	w.checkTraceContexts()
}

// checkDeadOutbound: what a redrive sends back for an outbound dead letter
// (sqsmsg.OriginalAttributes, the body) is the message the handler committed, and the
// message did not fit its queue.
func (w *world) checkDeadOutbound(m simsqs.Message) {
	o := &w.obs
	var b outbound
	if json.Unmarshal([]byte(m.Body), &b) != nil {
		return // checkOutbound says so
	}
	attrs, err := sqsmsg.OriginalAttributes(m.Attributes)
	if err != nil {
		o.violation("redrive", "the dead letter of message %d of %s cannot be redriven: %v", b.I, shortID(b.Src), err)
		return
	}
	got := map[string]string{}
	size := len(m.Body)
	for name, v := range attrs {
		got[name] = aws.ToString(v.StringValue)
		size += len(name) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	if got[idem.KeyAttribute] == "" {
		o.violation("redrive", "the dead letter of message %d of %s has no %s: redriven, it would be another message", b.I, shortID(b.Src), idem.KeyAttribute)
	}
	delete(got, idem.KeyAttribute)
	want := map[string]string{}
	if w.sc.cfg.attrs {
		want = outboundAttrs(b.Src, b.I)
	}
	if !maps.Equal(got, want) {
		o.violation("redrive", "the dead letter of message %d of %s redrives with the attributes %v, not the %d committed %v", b.I, shortID(b.Src), got, len(want), want)
	}
	limit := simsqs.MaxQueueBytes
	if q := aws.ToString(m.Attributes[sqsmsg.DLQOutboundQueueAttribute].StringValue); q == w.outFIFOURL {
		limit = w.sc.outMaxBytes
	}
	if size <= limit {
		o.violation("outbound", "message %d of %s was dead-lettered although it fits its queue (%d bytes with its attributes, the queue takes %d)", b.I, shortID(b.Src), size, limit)
	}
}

// checkTraceContexts: each delivered outbound message that carries a traceparent is in
// the trace of a delivery of its own operation: every record's span (telemetry.SpanProcess)
// is the root of a trace of its own here (producers send no trace context), and the
// send of a record's messages is under the span of the record that committed them, or
// of a later delivery of its key that found them pending.
func (w *world) checkTraceContexts() {
	if w.sc.cfg.spans == nil {
		return
	}
	records := map[trace.TraceID]string{} // a record span's trace -> the input message's id
	for _, s := range w.sc.cfg.spans.rec.GetSpans() {
		if s.Name != telemetry.SpanProcess {
			continue
		}
		for _, kv := range s.Attributes {
			if string(kv.Key) == "messaging.message.id" {
				records[s.SpanContext.TraceID()] = kv.Value.AsString()
			}
		}
	}
	inputs := map[string]simsqs.Message{}
	for _, a := range w.sqs.Accepted() {
		inputs[a.Msg.ID] = a.Msg
	}
	for _, a := range w.sqs.Accepted() {
		tp, ok := a.Msg.Attributes[telemetry.TraceParentAttribute]
		var b outbound
		if !ok || (a.Queue != w.outFIFO && a.Queue != w.outStd) || json.Unmarshal([]byte(a.Msg.Body), &b) != nil {
			continue
		}
		carrier := propagation.MapCarrier{telemetry.TraceParentAttribute: aws.ToString(tp.StringValue)}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
		in, found := inputs[records[sc.TraceID()]]
		if !found {
			continue // the reaper's send, or a trace not recorded
		}
		if op := w.opOf(in); op != nil && op.effectID() != b.Src {
			w.obs.violation("trace", "message %d of %s carries the trace context of the record of %s (message %s): another record's", b.I, shortID(b.Src), shortID(op.effectID()), in.ID)
		}
	}
}
