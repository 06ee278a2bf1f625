package persistence

import (
	"encoding/json"
	"fmt"
)

// Message is an outbound SQS message that a handler asks for in Result.Messages. It is
// stored in the record by the same transaction that commits the handler's writes, and
// sent only after that commit succeeded: a refused or guarded commit sends nothing, and a
// crash after the commit loses nothing (the next delivery of the key, or the reaper,
// sends what is still pending).
type Message struct {
	// QueueURL is the destination queue (required).
	QueueURL string `json:"q"`
	// Body is the message body (required): at most MaxOutboundMessageBytes together with
	// the attributes, in the characters SQS accepts.
	Body string `json:"b"`
	// GroupID is the MessageGroupId; required for a FIFO queue (URL ending in ".fifo").
	// Keep it a function of the idempotency key (or of something the key determines),
	// so a resend lands in the group of the first send.
	GroupID string `json:"g,omitempty"`
	// DeduplicationID is the MessageDeduplicationId for a FIFO queue. Leave it empty to
	// get one derived from the record key and the message's position in Messages, so a
	// resend is a duplicate downstream.
	DeduplicationID string `json:"d,omitempty"`
	// Attributes are String message attributes (at most 9: the middleware adds
	// KeyAttribute with the message's own idempotency key, OutboundKey, so a consumer
	// built on this package finds it where it looks first). A handler that sets
	// KeyAttribute itself must give each message of a result a key of its own.
	Attributes map[string]string `json:"a,omitempty"`
}

// encodeOutbox is the stored form of pending messages (JSON, compressed like responses).
func EncodeOutbox(msgs []Message) ([]byte, string, error) {
	if len(msgs) == 0 {
		return nil, "", nil
	}
	raw, err := json.Marshal(msgs)
	if err != nil {
		return nil, "", fmt.Errorf("idem: encode outbox: %w", err)
	}
	return encodeBlob(raw, "outbox")
}

func DecodeOutbox(data []byte, enc string) ([]Message, error) {
	raw, err := DecodeResponse(data, enc)
	if err != nil {
		return nil, fmt.Errorf("idem: outbox: %w", err)
	}
	var msgs []Message
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, fmt.Errorf("idem: decode outbox: %w", err)
	}
	return msgs, nil
}
