// Package telemetry names the spans and their attributes, and holds the tracer that
// package idem and its parts share (OpenTelemetry). A Client, a BatchProcessor and a
// Reaper given a
// TracerProvider (Config.Tracer, BatchConfig.Tracer, Reaper.Tracer) record spans; without
// one they record nothing and cost nothing: every hook is one nil check.
//
// Per SQS record, BatchProcessor starts SpanProcess (kind consumer). Its parent is the
// context the message carries: the W3C traceparent message attribute (TraceParentAttribute),
// else the AWSTraceHeader system attribute when it is sampled, so that the producer's
// span (the ingress's, another consumer's outbound send) and the record's are one trace.
// It links to the span of the invocation (and to an AWSTraceHeader of another trace).
// Under it: SpanAcquire with the idempotency decision (AttrDecision), SpanHandler, a
// SpanStep per step, SpanCommit, SpanRelease, SpanSend per record's outbound messages
// (with SpanMark under it), SpanDeadLetter; and the DynamoDB and SQS calls themselves
// when the SDK clients are instrumented (otelaws). The Reaper records SpanSweep, a
// SpanReap per lease it fails, and SpanSend for the messages it sends. Outbound messages
// carry their SpanSend's context on: a traceparent attribute when the message has room
// for it (SQS's 10 attributes, and the size its queue is known to take: queueRoom), and
// an AWSTraceHeader system attribute, which counts against neither; a message its queue
// refuses with the traceparent is sent again without it.
//
// No span carries a payload, a raw key or a plain hash of one (which anyone could check a
// guess against): keys appear as AttrRecord (the scope alone, as errors show them) and
// AttrKeyHash (Keys.LogHash of the key, as the logs show it), FIFO groups as
// AttrGroupHash (Keys.LogHash); without Keys the hashes are left out.
package telemetry
