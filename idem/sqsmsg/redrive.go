package sqsmsg

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// ContentDeduplicationID reports whether id is the deduplication id SQS derives for a
// FIFO queue with ContentBasedDeduplication: the SHA-256 of the body, in hex
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html).
// Such an id identifies a body, not an operation: two operations with the same body (the
// same credit, sent twice on purpose) share it, and SQS only deduplicates them for 5
// minutes, so it never keys a record kept for days, nor travels as a message's key.
func ContentDeduplicationID(id, body string) bool {
	if len(id) != sha256.Size*2 {
		return false
	}
	sum := sha256.Sum256([]byte(body))
	return strings.EqualFold(id, hex.EncodeToString(sum[:]))
}

// RedriveDedupPrefix starts the deduplication id a redrive gives a message it sends back
// to a FIFO input queue (idemctl redrive); the rest is derived from the message's id in
// the dead-letter queue. Such an id names a redrive, not an operation: the message's key,
// if it has one, travels as KeyAttribute.
const RedriveDedupPrefix = "redrive-"

// DedupIDIsKey reports whether a message's MessageDeduplicationId id keys it: it is
// not empty, not derived from the body (ContentDeduplicationID), and not a redrive's
// (RedriveDedupPrefix).
func DedupIDIsKey(id, body string) bool {
	return id != "" && !ContentDeduplicationID(id, body) && !strings.HasPrefix(id, RedriveDedupPrefix)
}

// RedriveAttributes returns the attributes a redrive sends back with a dead letter of
// an input message, and the key the message carries ("" for none). body, dedupID and
// attrs are the dead letter's body, MessageDeduplicationId and attributes as received.
// The message gets its own attributes back (OriginalAttributes). When it was keyed by
// its FIFO deduplication id, which the redrive changes, that id travels as KeyAttribute,
// the source the consumer reads first; a consumer's dead letter carries its key as the
// attribute already, and its own deduplication id is the dead-letter queue's, never a
// key, as a content-based one or a redrive's never is (DedupIDIsKey).
func RedriveAttributes(body, dedupID string, attrs map[string]types.MessageAttributeValue) (map[string]types.MessageAttributeValue, string, error) {
	out, err := OriginalAttributes(attrs)
	if err != nil {
		return nil, "", err
	}
	if v, ok := out[KeyAttribute]; ok {
		return out, aws.ToString(v.StringValue), nil
	}
	if _, dead := attrs[DLQSourceMessageIDAttribute]; dead || !DedupIDIsKey(dedupID, body) {
		return out, "", nil
	}
	if len(out) >= MaxMessageAttributes {
		return nil, "", fmt.Errorf("idem: cannot add the %s attribute: the message has %d attributes already", KeyAttribute, len(out))
	}
	out[KeyAttribute] = StringAttribute(dedupID)
	return out, dedupID, nil
}
