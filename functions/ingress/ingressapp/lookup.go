package ingressapp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
)

// RecordView is the ingress's record of a key as an operator sees it (`idemctl inspect`,
// `idemctl trace`): what happened to the request, never its body or its key.
type RecordView struct {
	Record string `json:"record"` // its partition key, as telemetry.RecordTraceID shows it
	// State is SENDING (a request is sending its message), UNSENT (its send failed; the
	// next request of the key sends it) or QUEUED (SQS took it).
	State        string     `json:"state"`
	Attempt      int        `json:"attempt"` // sending attempts
	MessageID    string     `json:"message_id,omitempty"`
	SendingUntil *time.Time `json:"sending_until,omitempty"`
	// ConsumerRecord is the consumer's record of the request, as telemetry.RecordTraceID shows
	// it ("" in records written before it was kept: the key's own).
	ConsumerRecord string    `json:"consumer_record,omitempty"`
	GroupHash      string    `json:"group_hash,omitempty"`
	PayloadHash    string    `json:"payload_hash"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	Expired        bool      `json:"expired"`
}

// ErrNoRecord means the ingress has no record of the key.
var ErrNoRecord = errors.New("ingress: no record of the key")

// ReadRecord reads the ingress's record of key in scope from its table: the one place
// outside the ingress that knows how the ingress keys its records. Expired records are
// shown (Expired set): DynamoDB deletes them late.
func ReadRecord(ctx context.Context, api DynamoDBAPI, table, scope, key string) (*RecordView, error) {
	pk, err := idem.RecordKey(scope, key, false)
	if err != nil {
		return nil, err
	}
	st := &store{api: api, table: table}
	rec, err := st.get(ctx, pk, time.Time{}) // the zero time: expired or not
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%w (table %s)", ErrNoRecord, table)
	}
	v := &RecordView{
		Record: telemetry.RecordTraceID(rec.Key), State: rec.State, Attempt: rec.Attempt, MessageID: rec.MessageID, PayloadHash: rec.PayloadHash,
		CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, ExpiresAt: rec.ExpiresAt, Expired: rec.expired(time.Now()),
	}
	if !rec.SendingUntil.IsZero() {
		v.SendingUntil = &rec.SendingUntil
	}
	if rec.Group != "" {
		v.GroupHash = idem.HashKey(rec.Group)
	}
	if rec.ConsumerKey != "" {
		if cpk, err := idem.RecordKey(scope, rec.ConsumerKey, false); err == nil {
			v.ConsumerRecord = telemetry.RecordTraceID(cpk)
		}
	}
	return v, nil
}
