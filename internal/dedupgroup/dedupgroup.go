// Package dedupgroup checks what a FIFO queue in high-throughput mode needs from its
// senders. With DeduplicationScope messageGroup, SQS drops a repeated
// MessageDeduplicationId only when it comes with the same MessageGroupId
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/high-throughput-fifo.html),
// so the deduplication a sender relies on survives only if it always sends a given
// deduplication id with one group.
package dedupgroup

import "fmt"

// Map records, per queue and deduplication id, the group it was sent with. The zero
// value is ready to use; it is not safe for concurrent use.
type Map struct {
	groups map[[2]string]string
}

// Add records that dedupID was sent to queue with group, and returns an error when the
// same id was sent to that queue with another group before.
func (m *Map) Add(queue, dedupID, group string) error {
	if m.groups == nil {
		m.groups = map[[2]string]string{}
	}
	k := [2]string{queue, dedupID}
	if g, ok := m.groups[k]; ok && g != group {
		return fmt.Errorf("dedupgroup: deduplication id %q sent to %s with group %q and with group %q: per-group deduplication would let both through", dedupID, queue, g, group)
	}
	m.groups[k] = group
	return nil
}

// Len is the number of distinct (queue, deduplication id) pairs recorded.
func (m *Map) Len() int { return len(m.groups) }
