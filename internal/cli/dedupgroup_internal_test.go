package cli

import (
	"math/rand/v2"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/dedupgroup"
)

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
