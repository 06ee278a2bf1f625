package outbox

import (
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
)

// TestSendEntrySize: an entry counts as SQS counts it (the body, then each attribute's
// name, type and value), the traceparent it carries included, so that the batches built
// on these sizes stay within SQS's limit with tracing on.
func TestSendEntrySize(t *testing.T) {
	m := &persistence.Message{Body: "0123456789", Attributes: map[string]string{sqsmsg.KeyAttribute: "k#0"}}
	plain := len("0123456789") + len(sqsmsg.KeyAttribute) + len("String") + len("k#0")
	if got := (sendEntry{msg: m}).size(); got != plain {
		t.Errorf("without a traceparent: %d bytes, want %d", got, plain)
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if got, want := (sendEntry{msg: m, traceparent: tp}).size(), plain+len(telemetry.TraceParentAttribute)+len("String")+len(tp); got != want {
		t.Errorf("with a traceparent: %d bytes, want %d", got, want)
	}
}
