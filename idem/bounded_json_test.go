package idem_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/canonjson"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDeepBodyIsRefusedWithinBoundedMemory (issue 38, finding 2): a 2 MB body of nested
// arrays, and a 1 MiB one nested past the bound, are refused as too large
// (ErrJSONTooLarge) by a scan that neither recurses nor allocates per level; a document
// at the bound is still fingerprinted.
func TestDeepBodyIsRefusedWithinBoundedMemory(t *testing.T) {
	for _, n := range []int{1 << 20, 1 << 19, canonjson.MaxJSONDepth + 1} {
		doc := []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
		var err error
		if got := allocated(func() { _, err = idem.HashPayload(doc) }); got > 1<<20 {
			t.Errorf("depth %d: %d bytes allocated, want at most 1 MiB", n, got)
		}
		if !errors.Is(err, idem.ErrJSONTooLarge) {
			t.Errorf("depth %d: %v, want ErrJSONTooLarge", n, err)
		}
		if len(doc) <= sqsmsg.MaxSQSMessageBytes && !strings.Contains(err.Error(), "nested deeper than") {
			t.Errorf("depth %d: %v, want it to say it is nested too deep", n, err)
		}
	}
	// Brackets inside strings are text, not nesting.
	text := []byte(`{"note":"` + strings.Repeat("[", 4*canonjson.MaxJSONDepth) + `"}`)
	if _, err := canonjson.CanonicalJSON(text); err != nil {
		t.Errorf("brackets in a string: %v", err)
	}
	at := []byte(strings.Repeat("[", canonjson.MaxJSONDepth) + strings.Repeat("]", canonjson.MaxJSONDepth))
	if _, err := canonjson.CanonicalJSON(at); err != nil {
		t.Errorf("a document nested exactly %d deep: %v", canonjson.MaxJSONDepth, err)
	}
	long := []byte(`"` + strings.Repeat("x", sqsmsg.MaxSQSMessageBytes) + `"`)
	if _, err := idem.HashPayload(long); !errors.Is(err, idem.ErrJSONTooLarge) {
		t.Errorf("a body longer than %d bytes: %v, want ErrJSONTooLarge", sqsmsg.MaxSQSMessageBytes, err)
	}
}

// TestFlatBodyAtTheSizeBoundStaysSmall: the worst flat body SQS can carry (1 MiB of empty
// objects, each a map once decoded) is fingerprinted in far less memory than the
// consumer's 256 MB.
func TestFlatBodyAtTheSizeBoundStaysSmall(t *testing.T) {
	n := (sqsmsg.MaxSQSMessageBytes - 2) / 3
	doc := []byte("[" + strings.TrimSuffix(strings.Repeat("{},", n), ",") + "]")
	var err error
	got := allocated(func() { _, err = idem.HashPayload(doc) })
	if err != nil {
		t.Fatal(err)
	}
	if got > 96<<20 {
		t.Errorf("%d bytes allocated for a %d-byte body, want at most 96 MiB", got, len(doc))
	}
	t.Logf("%d bytes allocated for a %d-byte body", got, len(doc))
}

// TestDeepBodyIsDeadLetteredAtOnce (issue 38, finding 2): in a FIFO group, a body nested
// past the bound is dead-lettered at once with its reason, the handler never runs for it,
// and the group's next record runs in the same batch.
func TestDeepBodyIsDeadLetteredAtOnce(t *testing.T) {
	h := &countingHandler{}
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: newClient(t), Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	dl := &fakeDL{}
	p := newProcessor(t, sqsbatch.BatchConfig{Handle: rf, DeadLetter: dl})
	deep := strings.Repeat("[", 1<<19) + strings.Repeat("]", 1<<19)
	first, next := keyedMsg("m1", "k-deep", deep), keyedMsg("m2", "k-next", `{"amount_cents":1}`)
	first.Attributes = map[string]string{"MessageGroupId": "acct-1"}
	next.Attributes = map[string]string{"MessageGroupId": "acct-1"}
	resp, err := p.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{first, next}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failureIDs(resp); len(got) != 0 {
		t.Errorf("failures = %v, want none: the group is not held", got)
	}
	if len(dl.ids) != 1 || dl.ids[0] != "m1" {
		t.Fatalf("dead-lettered %v, want m1", dl.ids)
	}
	if !errors.Is(dl.causes[0], idem.ErrJSONTooLarge) || !idem.IsPermanent(dl.causes[0]) {
		t.Errorf("m1's reason %v, want a permanent ErrJSONTooLarge", dl.causes[0])
	}
	if h.count("k-deep") != 0 || h.count("k-next") != 1 {
		t.Errorf("handler runs: k-deep %d, k-next %d; want 0 and 1", h.count("k-deep"), h.count("k-next"))
	}
}
