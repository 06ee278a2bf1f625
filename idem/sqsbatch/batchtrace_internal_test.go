package sqsbatch

import "testing"

// TestQueueName: the queue of an event source is what follows the ARN's last colon,
// even when that colon is the source's first byte; a source without a colon names none.
func TestQueueName(t *testing.T) {
	for arn, want := range map[string]string{
		"arn:aws:sqs:us-east-1:123456789012:orders.fifo": "orders.fifo",
		":orders":                  "orders",
		"orders":                   "",
		"arn:aws:sqs:us-east-1:1:": "",
	} {
		if got := queueName(arn); got != want {
			t.Errorf("queueName(%q) = %q, want %q", arn, got, want)
		}
	}
}
