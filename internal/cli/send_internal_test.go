package cli

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/internal/dedupgroup"
)

// traffic is n distinct messages over at most groups groups, shaped as any example's
// traffic is: what send does with messages does not depend on their bodies.
func traffic(seed uint64, n, groups int, rng *rand.Rand) []example.Message {
	out := make([]example.Message, n)
	for i := range out {
		id := fmt.Sprintf("msg-%d-%05d", seed, i)
		out[i] = example.Message{ID: id, Key: "test:" + id, Group: fmt.Sprintf("group-%d-%d", seed, rng.IntN(groups)), Body: `{"id":"` + id + `"}`}
	}
	return out
}

// flakySender fails entries by message body: transient failures the given number of
// times, sender faults always.
type flakySender struct {
	mu        sync.Mutex
	transient map[string]int // body -> failures left
	fault     map[string]bool
	calls     int
	callErr   error
	received  []string // bodies accepted, in order
}

func (f *flakySender) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.callErr != nil {
		return nil, f.callErr
	}
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		body := aws.ToString(e.MessageBody)
		switch {
		case f.fault[body]:
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), Message: aws.String("bad"), SenderFault: true})
		case f.transient[body] > 0:
			f.transient[body]--
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("try again")})
		default:
			out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
			f.received = append(f.received, body)
		}
	}
	return out, nil
}

func testMessages(t *testing.T, n int, fifo bool) []*outgoing {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	msgs, err := messages(traffic(1, n, 3, rng), copies{}, fifo, rng)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestSenderRetriesFailedEntries(t *testing.T) {
	msgs := testMessages(t, 25, true)
	api := &flakySender{
		transient: map[string]int{msgs[1].body: 2, msgs[12].body: maxEntryRetries + 1},
		fault:     map[string]bool{msgs[20].body: true},
	}
	s := &sender{api: api, queueURL: "q", concurrency: 3}
	failures, err := s.send(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	// msgs[1] succeeds on its third try; msgs[12] fails all 1+3 tries; msgs[20] is a
	// sender fault, not retried.
	if len(failures) != 2 || s.sent.Load() != 23 {
		t.Fatalf("%d failures, %d sent; want 2 and 23", len(failures), s.sent.Load())
	}
	got := map[string]string{}
	for _, f := range failures {
		got[f.msg.msg.ID] = f.reason
	}
	if !strings.HasPrefix(got[msgs[12].msg.ID], "InternalError") || !strings.HasPrefix(got[msgs[20].msg.ID], "InvalidParameterValue") {
		t.Errorf("failures %v", got)
	}
	if !msgs[1].sent.Load() || msgs[12].sent.Load() || msgs[20].sent.Load() {
		t.Error("sent flags wrong")
	}
}

func TestSenderKeepsGroupOrder(t *testing.T) {
	msgs := testMessages(t, 60, true)
	api := &flakySender{}
	s := &sender{api: api, queueURL: "q", concurrency: 4}
	if _, err := s.send(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	// Per group, the queue saw the messages in the order given.
	pos := map[string]int{}
	for i, b := range api.received {
		pos[b] = i
	}
	last := map[string]int{}
	for _, m := range msgs {
		p, seen := pos[m.body]
		if !seen {
			t.Fatalf("%s not sent", m.msg.ID)
		}
		if prev, ok := last[m.group]; ok && p < prev {
			t.Errorf("group %s: %s sent before an earlier message", m.group, m.msg.ID)
		}
		last[m.group] = p
	}
}

func TestSenderStopsOnCallError(t *testing.T) {
	api := &flakySender{callErr: errors.New("queue does not exist")}
	s := &sender{api: api, queueURL: "q", concurrency: 2}
	_, err := s.send(context.Background(), testMessages(t, 100, false))
	if err == nil || !strings.Contains(err.Error(), "queue does not exist") {
		t.Fatalf("error %v", err)
	}
	if api.calls > 2 {
		t.Errorf("%d calls after the first error; the workers should stop", api.calls)
	}
}

// TestMessagesDuplicates: --duplicates sends copies with the original's deduplication id
// (SQS drops them within its window), --duplicates-past-window copies with a new one,
// the same for the same run and another for another run; both keep the body, the key
// and the group.
func TestMessagesDuplicates(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	msgs, err := messages(traffic(3, 20, 2, rng), copies{same: 0.25, late: 0.5, run: "7"}, true, rng)
	if err != nil {
		t.Fatal(err)
	}
	same, late := 0, 0
	byID := map[string]*outgoing{}
	for _, m := range msgs {
		if !m.dup {
			byID[m.msg.ID] = m
			continue
		}
		o := byID[m.msg.ID]
		if o == nil || o.body != m.body || o.key != m.key || o.group != m.group || o.dedup != outbox.DeduplicationID(m.msg.Key) {
			t.Fatalf("duplicate %+v of %+v", m, o)
		}
		switch m.dedup {
		case o.dedup:
			same++
		case outbox.DeduplicationID("again-7-" + m.key):
			late++
		default:
			t.Errorf("duplicate of %s with deduplication id %q", m.msg.ID, m.dedup)
		}
	}
	if same != 5 || late != 10 || len(msgs) != 35 {
		t.Errorf("%d same-id and %d new-id copies in %d messages, want 5 and 10 in 35", same, late, len(msgs))
	}
}

// TestDeduplicationIDsKeepTheirGroup: `idemctl send` (messages and their duplicates)
// and `idemctl redrive` (the same dead letter redriven twice, from a FIFO dead-letter
// queue and from a standard one) send each deduplication id with one group, as the
// input queue's per-group deduplication (high-throughput FIFO) needs.
func TestDeduplicationIDsKeepTheirGroup(t *testing.T) {
	var m dedupgroup.Map
	rng := rand.New(rand.NewPCG(12, 13))
	out, err := messages(traffic(12, 300, 5, rng), copies{same: 0.5}, true, rng)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		if err := m.Add("input", o.dedup, o.group); err != nil {
			t.Error(err)
		}
	}
	if len(out)-m.Len() != 150 {
		t.Errorf("%d messages, %d distinct ids: want the 150 duplicates to repeat an id", len(out), m.Len())
	}

	r := &redriver{queue: "input", fifo: true}
	key := idem.KeyAttribute
	for _, dl := range []types.Message{
		{MessageId: aws.String("dl-1"), Body: aws.String("{}"), Attributes: map[string]string{"MessageGroupId": "acct-a"}},
		{MessageId: aws.String("dl-2"), Body: aws.String("{}"), MessageAttributes: map[string]types.MessageAttributeValue{
			key: {DataType: aws.String("String"), StringValue: aws.String("payment:p-2")}}}, // from a standard DLQ: no group
	} {
		for range 2 { // redriven twice: the second copy must be a duplicate of the first
			in, err := r.redriveInput(dl)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Add("input", aws.ToString(in.MessageDeduplicationId), aws.ToString(in.MessageGroupId)); err != nil {
				t.Error(err)
			}
		}
	}
}
