package ingressapp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// DynamoDBAPI is the DynamoDB client the ingress uses: *dynamodb.Client satisfies it.
// It calls PutItem, UpdateItem and GetItem on its own table and GetItem on the
// consumer's (through persistence.DynamoStore, whose interface this is); nothing else.
type DynamoDBAPI = persistence.DynamoDBAPI

// States of an ingress record.
const (
	// stateSending: the holder of token is sending the message; until sendingUntil
	// nobody else may.
	stateSending = "SENDING"
	// stateUnsent: the send failed (the holder said so); the next request of the key
	// with the same body sends it.
	stateUnsent = "UNSENT"
	// stateQueued: SQS accepted the message. Final.
	stateQueued = "QUEUED"
)

// Attribute names of the ingress record (docs/ingress.md).
const (
	attrPK           = "pk"
	attrPayloadHash  = "payload_hash"
	attrState        = "state"
	attrToken        = "token"
	attrSendingUntil = "sending_until"
	attrGroup        = "message_group"
	attrAttempt      = "attempt"
	attrMessageID    = "message_id"
	attrCreatedAt    = "created_at"
	attrUpdatedAt    = "updated_at"
	attrExpiresAt    = "expires_at"
	attrConsumerKey  = "consumer_key"
)

// record is the ingress's record of one key, in its own table.
type record struct {
	Key         string // partition key: idem.RecordKey(scope, key, false) of the client's key
	PayloadHash string // idem.HashPayload(body), as the consumer computes it
	// ConsumerKey is the idempotency key the consumer derives from the message sent (its
	// KEY_SOURCE rule): the client's key, or the business id in the body. "" in records
	// written before it was kept: the client's key.
	ConsumerKey  string
	State        string
	Token        string    // 128 random bits per sending attempt: fences mark and release
	SendingUntil time.Time // stateSending: when the holder's attempt is over for sure
	Group        string    // the FIFO message group the body gave
	Attempt      int       // sending attempts
	MessageID    string    // stateQueued: SQS's MessageId
	CreatedAt    time.Time
	UpdatedAt    time.Time
	ExpiresAt    time.Time // TTL: the key is free again afterwards
}

// ErrChanged means a fenced write found the record changed since it was read: another
// request of the key took it over.
var ErrChanged = errors.New("ingress: the record changed (another request of the key took it over)")

// store keeps the ingress records in one DynamoDB table (partition key pk, TTL
// expires_at).
type store struct {
	api   DynamoDBAPI
	table string
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func (r *record) item() map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{
		attrPK: s(r.Key), attrPayloadHash: s(r.PayloadHash), attrState: s(r.State), attrToken: s(r.Token),
		attrAttempt: n(int64(r.Attempt)), attrCreatedAt: n(r.CreatedAt.UnixMilli()), attrUpdatedAt: n(r.UpdatedAt.UnixMilli()),
		attrExpiresAt: n(r.ExpiresAt.Unix()),
	}
	if r.Group != "" {
		it[attrGroup] = s(r.Group)
	}
	if !r.SendingUntil.IsZero() {
		it[attrSendingUntil] = n(r.SendingUntil.UnixMilli())
	}
	if r.MessageID != "" {
		it[attrMessageID] = s(r.MessageID)
	}
	if r.ConsumerKey != "" {
		it[attrConsumerKey] = s(r.ConsumerKey)
	}
	return it
}

func fromItem(it map[string]types.AttributeValue) (*record, error) {
	attrs := persistence.Attrs{Item: it}
	str, num := attrs.S, attrs.N
	r := &record{
		Key: str(attrPK), PayloadHash: str(attrPayloadHash), State: str(attrState), Token: str(attrToken),
		Group: str(attrGroup), Attempt: int(num(attrAttempt)), MessageID: str(attrMessageID), ConsumerKey: str(attrConsumerKey),
		CreatedAt: time.UnixMilli(num(attrCreatedAt)).UTC(), UpdatedAt: time.UnixMilli(num(attrUpdatedAt)).UTC(),
		ExpiresAt: time.Unix(num(attrExpiresAt), 0).UTC(),
	}
	if ms := num(attrSendingUntil); ms != 0 {
		r.SendingUntil = time.UnixMilli(ms).UTC()
	}
	if err := attrs.Err(); err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	return r, nil
}

// expired reports whether the record's TTL has passed: DynamoDB deletes expired items
// late, so every read and condition treats them as absent. expires_at is in epoch
// seconds, and the record lives through its last second, as create's condition
// (expires_at < now's second) and the consumer's records (persistence.Record.Expired)
// have it.
func (r *record) expired(now time.Time) bool { return persistence.PastExpiry(r.ExpiresAt, now) }

// create writes rec unless a live record of its key exists (one conditional PutItem).
// When one does it writes nothing and returns it. A record already holding rec's token
// counts as created: an earlier try of this very request was applied, its answer lost.
func (st *store) create(ctx context.Context, rec *record, now time.Time) (existing *record, err error) {
	_, err = st.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(st.table),
		Item:                                rec.item(),
		ConditionExpression:                 aws.String("attribute_not_exists(#pk) OR #exp < :now"),
		ExpressionAttributeNames:            map[string]string{"#pk": attrPK, "#exp": attrExpiresAt},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": n(now.Unix())},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		if err != nil {
			return nil, fmt.Errorf("ingress: put record: %w", err)
		}
		return nil, nil
	}
	old, err := st.oldItem(ctx, rec.Key, ccf.Item, now)
	if err != nil {
		return nil, err
	}
	if old.Token == rec.Token {
		return nil, nil
	}
	return old, nil
}

// oldItem is the record a failed condition returned, read when the answer did not
// carry it.
func (st *store) oldItem(ctx context.Context, key string, item map[string]types.AttributeValue, now time.Time) (*record, error) {
	if len(item) > 0 {
		return fromItem(item)
	}
	rec, err := st.get(ctx, key, now)
	if rec == nil && err == nil {
		err = fmt.Errorf("ingress: %w (the record vanished after a failed condition)", ErrChanged)
	}
	return rec, err
}

// get reads the record of key (strongly consistent); nil when there is none or it
// expired.
func (st *store) get(ctx context.Context, key string, now time.Time) (*record, error) {
	out, err := st.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.table), Key: map[string]types.AttributeValue{attrPK: s(key)}, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("ingress: get record: %w", err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	rec, err := fromItem(out.Item)
	if err != nil || rec.expired(now) {
		return nil, err
	}
	return rec, nil
}

// takeover gives the record, as seen (token and state), to a new sending attempt: a
// new token and window, attempt + 1. A record that changed since gives ErrChanged.
func (st *store) takeover(ctx context.Context, seen *record, token string, until, now time.Time) (*record, error) {
	out, err := st.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.table),
		Key:       map[string]types.AttributeValue{attrPK: s(seen.Key)},
		UpdateExpression: aws.String("SET #tok = :new, #state = :sending, #until = :until, #upd = :now, #exp = :exp " +
			"ADD #att :one"),
		ConditionExpression: aws.String("#tok = :old AND #state = :seen"),
		ExpressionAttributeNames: map[string]string{"#tok": attrToken, "#state": attrState, "#until": attrSendingUntil,
			"#upd": attrUpdatedAt, "#exp": attrExpiresAt, "#att": attrAttempt},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":new": s(token), ":old": s(seen.Token), ":sending": s(stateSending), ":seen": s(seen.State),
			":until": n(until.UnixMilli()), ":now": n(now.UnixMilli()), ":exp": n(seen.ExpiresAt.Unix()), ":one": n(1),
		},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		if cur, _ := fromItem(ccf.Item); cur != nil && cur.Token == token {
			return cur, nil // applied by an earlier try whose answer was lost
		}
		return nil, ErrChanged
	case err != nil:
		return nil, fmt.Errorf("ingress: take over record: %w", err)
	}
	return fromItem(out.Attributes)
}

// queued marks the record sent, fenced on the sender's token.
func (st *store) queued(ctx context.Context, key, token, messageID string, now time.Time) error {
	return st.holderWrite(ctx, "mark queued", key, token, now, stateQueued, true, map[string]types.AttributeValue{attrMessageID: s(messageID)})
}

// adopted marks the record of a request that the consumer already knows sent, with
// nothing sent, and makes it live until exp (the consumer's record's end), fenced on the
// holder's token.
func (st *store) adopted(ctx context.Context, key, token string, exp, now time.Time) error {
	return st.holderWrite(ctx, "adopt", key, token, now, stateQueued, false, map[string]types.AttributeValue{attrExpiresAt: n(exp.Unix())})
}

// unsent releases the sender's hold after a failed send, fenced on its token, so the
// next request of the key sends at once instead of after the window.
func (st *store) unsent(ctx context.Context, key, token string, now time.Time) error {
	return st.holderWrite(ctx, "release", key, token, now, stateUnsent, false, nil)
}

// holderWrite ends the sending attempt of token: one UpdateItem that sets the state to
// state and the attributes of set, and removes the window, on the condition that the
// record still holds token and is SENDING (or already QUEUED, when again is set: a
// repeated mark).
func (st *store) holderWrite(ctx context.Context, op, key, token string, now time.Time, state string, again bool, set map[string]types.AttributeValue) error {
	names := map[string]string{"#state": attrState, "#upd": attrUpdatedAt, "#until": attrSendingUntil, "#tok": attrToken}
	vals := map[string]types.AttributeValue{":state": s(state), ":sending": s(stateSending), ":now": n(now.UnixMilli()), ":mine": s(token)}
	update := "SET #state = :state, #upd = :now"
	for _, attr := range slices.Sorted(maps.Keys(set)) {
		names["#"+attr], vals[":"+attr] = attr, set[attr]
		update += ", #" + attr + " = :" + attr
	}
	cond := "#tok = :mine AND #state = :sending"
	if again {
		cond = "#tok = :mine AND #state IN (:sending, :state)"
	}
	_, err := st.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.table), Key: map[string]types.AttributeValue{attrPK: s(key)},
		UpdateExpression: aws.String(update + " REMOVE #until"), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
	})
	return fenced(op, err)
}

func fenced(op string, err error) error {
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return fmt.Errorf("ingress: %s: %w", op, ErrChanged)
	case err != nil:
		return fmt.Errorf("ingress: %s: %w", op, err)
	}
	return nil
}
