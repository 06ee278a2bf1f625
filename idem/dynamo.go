package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDBAPI is the part of the DynamoDB client the store uses; *dynamodb.Client
// satisfies it, and tests can wrap it.
type DynamoDBAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// InflightIndex is the name of the sparse GSI (inflight HASH, lease_until RANGE) that
// holds only IN_PROGRESS records.
const InflightIndex = "inflight"

// fence is the condition of every write a lease holder makes after its acquire.
const fence = "lease_token = :tok AND #status = :inprogress"

// DynamoStore is a Store on a DynamoDB table created as CreateTable does.
type DynamoStore struct {
	api   DynamoDBAPI
	table string
}

var _ Store = (*DynamoStore)(nil)

// NewDynamoStore returns a store on table through api.
func NewDynamoStore(api DynamoDBAPI, table string) (*DynamoStore, error) {
	if api == nil {
		return nil, errors.New("idem: DynamoDB client is nil")
	}
	if table == "" {
		return nil, errors.New("idem: table name is empty")
	}
	return &DynamoStore{api: api, table: table}, nil
}

// Table returns the table name.
func (s *DynamoStore) Table() string { return s.table }

// Create is one conditional PutItem; on a conflict the live record comes back in the
// ConditionalCheckFailedException (ReturnValuesOnConditionCheckFailure=ALL_OLD).
func (s *DynamoStore) Create(ctx context.Context, rec *Record, now time.Time) (*Record, bool, error) {
	item, err := marshalRecord(rec)
	if err != nil {
		return nil, false, err
	}
	out, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(s.table),
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(pk) OR expires_at < :now_s"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now_s": avN(now.Unix())},
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		if len(out.Attributes) == 0 {
			return nil, true, nil
		}
		// The put replaced an expired record that DynamoDB's TTL had not deleted yet.
		replaced, err := unmarshalRecord(out.Attributes)
		if err != nil {
			return nil, true, nil //nolint:nilerr // the lease is ours; the old record is only advisory
		}
		return replaced, true, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return nil, false, fmt.Errorf("idem: acquire put: %w", err)
	}
	if len(ccf.Item) == 0 {
		return nil, false, fmt.Errorf("idem: acquire put: condition failed but the old item was not returned")
	}
	old, err := unmarshalRecord(ccf.Item)
	if err != nil {
		return nil, false, fmt.Errorf("idem: acquire put: %w", err)
	}
	if old.LeaseToken == rec.LeaseToken {
		// Our own put, applied on an attempt whose response was lost (a reset connection,
		// a 5xx after the write): the SDK's retry then fails the condition on our record.
		return nil, true, nil
	}
	return old, false, nil
}

// Takeover is a compare-and-swap UpdateItem on the token, status and lease it saw.
func (s *DynamoStore) Takeover(ctx context.Context, seen *Record, next Lease, expiresAt, now time.Time) (*Record, error) {
	vals := map[string]types.AttributeValue{
		":tok":        avS(next.Token),
		":lu":         avN(epochMillis(next.Until)),
		":inprogress": avS(string(StatusInProgress)),
		":shard":      avS(next.Shard),
		":owner":      avS(next.Owner),
		":now":        avN(epochMillis(now)),
		":exp":        avN(expiresAt.Unix()),
		":one":        avN(1),
		":oldtok":     avS(seen.LeaseToken),
		":oldstatus":  avS(string(seen.Status)),
		":oldlu":      avN(epochMillis(seen.LeaseUntil)),
	}
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table),
		Key:       map[string]types.AttributeValue{attrPK: avS(seen.Key)},
		UpdateExpression: aws.String("SET lease_token = :tok, lease_until = :lu, #status = :inprogress, inflight = :shard, " +
			"#owner = :owner, updated_at = :now, expires_at = :exp ADD attempt :one REMOVE #error, retryable"),
		ConditionExpression:       aws.String("lease_token = :oldtok AND #status = :oldstatus AND lease_until = :oldlu"),
		ExpressionAttributeNames:  map[string]string{"#status": attrStatus, "#owner": attrOwner, "#error": attrError},
		ExpressionAttributeValues: vals,
		ReturnValues:              types.ReturnValueAllNew,
		// A takeover applied on an attempt whose answer was lost fails the SDK's retry:
		// the record then comes back holding our own token.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) && len(ccf.Item) > 0 {
		if rec, uerr := unmarshalRecord(ccf.Item); uerr == nil && rec.LeaseToken == next.Token {
			return rec, nil
		}
	}
	if err != nil {
		return nil, fenceErr("takeover", seen.Key, err)
	}
	rec, err := unmarshalRecord(out.Attributes)
	if err != nil {
		return nil, fmt.Errorf("idem: takeover %s: %w", redact(seen.Key), err)
	}
	return rec, nil
}

// Complete is one fenced UpdateItem, or one TransactWriteItems holding that update first
// and the business writes after it.
func (s *DynamoStore) Complete(ctx context.Context, l Lease, c Completion, now time.Time) error {
	data, enc, err := encodeResponse(c.Response)
	if err != nil {
		return err
	}
	outbox, outboxEnc, err := encodeOutbox(c.Outbox)
	if err != nil {
		return err
	}
	if len(data)+len(outbox) > MaxStoredResponse {
		return fmt.Errorf("%w: response and outbox are %d bytes stored, limit %d", ErrResponseTooLarge, len(data)+len(outbox), MaxStoredResponse)
	}
	set := []string{"#status = :completed", "expires_at = :exp", "updated_at = :now"}
	var remove []string
	names := map[string]string{"#status": attrStatus}
	vals := map[string]types.AttributeValue{
		":tok":        avS(l.Token),
		":inprogress": avS(string(StatusInProgress)),
		":completed":  avS(string(StatusCompleted)),
		":exp":        avN(c.ExpiresAt.Unix()),
		":now":        avN(epochMillis(now)),
	}
	names["#response"] = attrResponse
	if len(data) > 0 {
		set = append(set, "#response = :resp")
		vals[":resp"] = &types.AttributeValueMemberB{Value: data}
	} else {
		remove = append(remove, "#response")
	}
	if enc != "" {
		set = append(set, "response_enc = :enc")
		vals[":enc"] = avS(enc)
	} else {
		remove = append(remove, "response_enc")
	}
	if len(outbox) > 0 {
		// The record stays in the in-flight index until MarkSent, so the reaper finds
		// messages a crash left unsent (updated_at holds the commit time).
		set = append(set, "outbox = :outbox")
		vals[":outbox"] = &types.AttributeValueMemberB{Value: outbox}
		if c.Group != "" {
			set = append(set, "outbox_group = :group")
			vals[":group"] = avS(c.Group)
		} else {
			remove = append(remove, "outbox_group")
		}
	} else {
		remove = append(remove, "inflight", "outbox", "outbox_group")
	}
	if outboxEnc != "" {
		set = append(set, "outbox_enc = :oenc")
		vals[":oenc"] = avS(outboxEnc)
	} else {
		remove = append(remove, "outbox_enc")
	}
	if c.PayloadHash != "" {
		set = append(set, "payload_hash = :ph")
		vals[":ph"] = avS(c.PayloadHash)
	}
	expr := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	upd := &types.Update{
		TableName:                 aws.String(s.table),
		Key:                       map[string]types.AttributeValue{attrPK: avS(l.Key)},
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(fence),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: vals,
		// In a transaction, the record comes back in the cancellation reason.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if len(c.Writes) == 0 {
		_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           upd.TableName,
			Key:                                 upd.Key,
			UpdateExpression:                    upd.UpdateExpression,
			ConditionExpression:                 upd.ConditionExpression,
			ExpressionAttributeNames:            upd.ExpressionAttributeNames,
			ExpressionAttributeValues:           upd.ExpressionAttributeValues,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) && s.completedBy(ctx, l, ccf.Item, now) {
			return nil
		}
		return requestErr("complete", l.Key, err)
	}
	if len(c.Writes) > MaxWrites {
		return fmt.Errorf("idem: complete %s: %w: %d business writes, a transaction holds at most %d besides the completion", redact(l.Key), ErrInvalidRequest, len(c.Writes), MaxWrites)
	}
	items := make([]types.TransactWriteItem, 0, len(c.Writes)+1)
	items = append(items, types.TransactWriteItem{Update: upd})
	items = append(items, c.Writes...)
	_, err = s.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return nil
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return requestErr("complete", l.Key, err)
	}
	if r := tce.CancellationReasons; len(r) > 0 && aws.ToString(r[0].Code) == "ConditionalCheckFailed" {
		if s.completedBy(ctx, l, r[0].Item, now) {
			return nil
		}
		return fmt.Errorf("idem: complete %s: %w", redact(l.Key), ErrLeaseLost)
	}
	return writesRefused("complete", l.Key, tce, err)
}

// writesRefused turns the cancellation of a transaction whose first item (the record)
// passed into the error of its business writes: a *WriteConditionError listing every
// write whose condition failed, ErrInvalidRequest for writes DynamoDB refused as invalid,
// else the transaction's error (a conflict, throttling: retryable).
func writesRefused(op, key string, tce *types.TransactionCanceledException, err error) error {
	var wce *WriteConditionError
	var invalid []string
	for i, r := range tce.CancellationReasons {
		if i == 0 {
			continue
		}
		switch code := aws.ToString(r.Code); code {
		case "ConditionalCheckFailed":
			if wce == nil {
				wce = &WriteConditionError{Index: i - 1, Reason: aws.ToString(r.Message)}
			}
			wce.Failed = append(wce.Failed, FailedWrite{Index: i - 1, Item: r.Item})
		case "ValidationError", "ItemCollectionSizeLimitExceeded":
			invalid = append(invalid, fmt.Sprintf("write %d: %s: %s", i-1, code, aws.ToString(r.Message)))
		}
	}
	switch {
	case wce != nil:
		return fmt.Errorf("idem: %s %s: %w", op, redact(key), wce)
	case len(invalid) > 0:
		return fmt.Errorf("idem: %s %s: %w: %s", op, redact(key), ErrInvalidRequest, strings.Join(invalid, "; "))
	}
	return fmt.Errorf("idem: %s %s: transaction: %w", op, redact(key), err)
}

// Put is one conditional PutItem, or one TransactWriteItems holding that put first and
// the business writes after it; a failed condition on the record returns the record
// from the failure (ReturnValuesOnConditionCheckFailure=ALL_OLD).
func (s *DynamoStore) Put(ctx context.Context, rec *Record, writes []types.TransactWriteItem, seen *Record, now time.Time) (*Record, error) {
	item, err := marshalRecord(rec)
	if err != nil {
		return nil, err
	}
	if len(writes) > MaxWrites {
		return nil, fmt.Errorf("idem: put %s: %w: %d business writes, a transaction holds at most %d besides the record", redact(rec.Key), ErrInvalidRequest, len(writes), MaxWrites)
	}
	cond := "attribute_not_exists(pk) OR expires_at < :now_s"
	vals := map[string]types.AttributeValue{":now_s": avN(now.Unix())}
	var names map[string]string
	if seen != nil {
		cond = "lease_token = :oldtok AND #status = :oldstatus AND lease_until = :oldlu"
		vals = map[string]types.AttributeValue{
			":oldtok": avS(seen.LeaseToken), ":oldstatus": avS(string(seen.Status)), ":oldlu": avN(epochMillis(seen.LeaseUntil)),
		}
		names = map[string]string{"#status": attrStatus}
	}
	// existing decides a failed condition on the record: the record as it is, or nil
	// when it holds our own token (a try applied earlier whose answer was lost).
	existing := func(item map[string]types.AttributeValue) (*Record, error) {
		old, err := s.recordOf(ctx, rec.Key, item, now)
		if err != nil {
			return nil, fmt.Errorf("idem: put %s: %w", redact(rec.Key), err)
		}
		if old.LeaseToken == rec.LeaseToken {
			return nil, nil
		}
		return old, nil
	}
	if len(writes) == 0 {
		_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.table), Item: item, ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return existing(ccf.Item)
		}
		if err != nil {
			return nil, requestErr("put", rec.Key, err)
		}
		return nil, nil
	}
	items := make([]types.TransactWriteItem, 0, len(writes)+1)
	items = append(items, types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.table), Item: item, ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}})
	items = append(items, writes...)
	_, err = s.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return nil, nil
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return nil, requestErr("put", rec.Key, err)
	}
	if r := tce.CancellationReasons; len(r) > 0 && aws.ToString(r[0].Code) == "ConditionalCheckFailed" {
		return existing(r[0].Item)
	}
	return nil, writesRefused("put", rec.Key, tce, err)
}

// recordOf decodes the record a failed condition returned, or reads it (consistently)
// when the service returned none.
func (s *DynamoStore) recordOf(ctx context.Context, key string, item map[string]types.AttributeValue, now time.Time) (*Record, error) {
	if len(item) > 0 {
		return unmarshalRecord(item)
	}
	return s.Get(ctx, key, now)
}

// MaxWrites is the most business writes Result.Writes may hold: DynamoDB's 100 actions a
// transaction, less the completion.
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html
const MaxWrites = 99

// requestErr wraps a store error, telling a request DynamoDB refused as invalid (which
// no retry can fix) from the rest.
func requestErr(op, key string, err error) error {
	var apiErr interface{ ErrorCode() string }
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException" {
		return fmt.Errorf("idem: %s %s: %w: %w", op, redact(key), ErrInvalidRequest, err)
	}
	return fenceErr(op, key, err)
}

// MarkSent is one UpdateItem conditioned on the completion's token and a pending outbox.
func (s *DynamoStore) MarkSent(ctx context.Context, key, token string, sent int, dead []DeadMessage, now time.Time) error {
	vals := map[string]types.AttributeValue{
		":tok":       avS(token),
		":completed": avS(string(StatusCompleted)),
		":sent":      avN(int64(sent)),
		":now":       avN(epochMillis(now)),
	}
	set := "SET sent = :sent, updated_at = :now"
	if len(dead) > 0 {
		raw, err := json.Marshal(dead)
		if err != nil {
			return fmt.Errorf("idem: mark sent %s: %w", redact(key), err)
		}
		set += ", outbox_dead = :dead"
		vals[":dead"] = avS(string(raw))
	}
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       map[string]types.AttributeValue{attrPK: avS(key)},
		UpdateExpression:          aws.String(set + " REMOVE outbox, outbox_enc, outbox_group, inflight"),
		ConditionExpression:       aws.String("lease_token = :tok AND #status = :completed AND attribute_exists(outbox)"),
		ExpressionAttributeNames:  map[string]string{"#status": attrStatus},
		ExpressionAttributeValues: vals,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil // sent and marked by another delivery or the reaper, or gone
	}
	if err != nil {
		return fmt.Errorf("idem: mark sent %s: %w", redact(key), err)
	}
	return nil
}

// Retry is one UpdateItem conditioned on the token and a FAILED, not retryable record.
func (s *DynamoStore) Retry(ctx context.Context, key, token, reason string, now time.Time) error {
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      map[string]types.AttributeValue{attrPK: avS(key)},
		UpdateExpression:         aws.String("SET retryable = :true, #error = :reason, updated_at = :now"),
		ConditionExpression:      aws.String("lease_token = :tok AND #status = :failed AND retryable = :false"),
		ExpressionAttributeNames: map[string]string{"#status": attrStatus, "#error": attrError},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":tok":    avS(token),
			":failed": avS(string(StatusFailed)),
			":true":   avBool(true),
			":false":  avBool(false),
			":reason": avS(nonEmpty(reason)),
			":now":    avN(epochMillis(now)),
		},
	})
	return fenceErr("retry", key, err)
}

// ReadGuard is a strongly consistent GetItem of a guard item.
func (s *DynamoStore) ReadGuard(ctx context.Context, table string, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("idem: read guard in %s: %w", table, err)
	}
	return out.Item, nil
}

// completedBy reports whether a completion whose fence failed had in fact been committed
// by the same lease: the first attempt of the write was applied, its response was lost,
// and the SDK's retry then found the record COMPLETED under this token. item is the
// record returned with the failed condition; when the emulator or service returned none,
// a consistent read decides (this path is rare: only after a failed fence).
func (s *DynamoStore) completedBy(ctx context.Context, l Lease, item map[string]types.AttributeValue, now time.Time) bool {
	rec, err := s.recordOf(ctx, l.Key, item, now)
	return err == nil && rec.Status == StatusCompleted && rec.LeaseToken == l.Token
}

// Fail is one fenced UpdateItem.
func (s *DynamoStore) Fail(ctx context.Context, l Lease, reason string, retryable bool, expiresAt, now time.Time) error {
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      map[string]types.AttributeValue{attrPK: avS(l.Key)},
		UpdateExpression:         aws.String("SET #status = :failed, #error = :reason, retryable = :retryable, expires_at = :exp, updated_at = :now REMOVE inflight"),
		ConditionExpression:      aws.String(fence),
		ExpressionAttributeNames: map[string]string{"#status": attrStatus, "#error": attrError},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":tok":        avS(l.Token),
			":inprogress": avS(string(StatusInProgress)),
			":failed":     avS(string(StatusFailed)),
			":reason":     avS(nonEmpty(reason)),
			":retryable":  avBool(retryable),
			":exp":        avN(expiresAt.Unix()),
			":now":        avN(epochMillis(now)),
		},
	})
	return fenceErr("fail", l.Key, err)
}

// AddStep is one fenced UpdateItem adding to the steps set.
func (s *DynamoStore) AddStep(ctx context.Context, l Lease, step string, now time.Time) error {
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      map[string]types.AttributeValue{attrPK: avS(l.Key)},
		UpdateExpression:         aws.String("SET updated_at = :now ADD steps :step"),
		ConditionExpression:      aws.String(fence),
		ExpressionAttributeNames: map[string]string{"#status": attrStatus},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":tok":        avS(l.Token),
			":inprogress": avS(string(StatusInProgress)),
			":step":       &types.AttributeValueMemberSS{Value: []string{step}},
			":now":        avN(epochMillis(now)),
		},
	})
	return fenceErr("step "+step, l.Key, err)
}

// Extend is one fenced UpdateItem of lease_until (which also moves the record in the
// in-flight index).
func (s *DynamoStore) Extend(ctx context.Context, l Lease, until, now time.Time) error {
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      map[string]types.AttributeValue{attrPK: avS(l.Key)},
		UpdateExpression:         aws.String("SET lease_until = :lu, updated_at = :now"),
		ConditionExpression:      aws.String(fence),
		ExpressionAttributeNames: map[string]string{"#status": attrStatus},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":tok":        avS(l.Token),
			":inprogress": avS(string(StatusInProgress)),
			":lu":         avN(epochMillis(until)),
			":now":        avN(epochMillis(now)),
		},
	})
	return fenceErr("extend", l.Key, err)
}

// Get is a strongly consistent GetItem.
func (s *DynamoStore) Get(ctx context.Context, key string, now time.Time) (*Record, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            map[string]types.AttributeValue{attrPK: avS(key)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("idem: get %s: %w", redact(key), err)
	}
	if len(out.Item) == 0 {
		return nil, fmt.Errorf("idem: get %s: %w", redact(key), ErrNotFound)
	}
	rec, err := unmarshalRecord(out.Item)
	if err != nil {
		return nil, fmt.Errorf("idem: get %s: %w", redact(key), err)
	}
	if rec.expired(now) {
		return nil, fmt.Errorf("idem: get %s: %w (expired)", redact(key), ErrNotFound)
	}
	return rec, nil
}

// staleCursor is the continuation of a Stale page: the GSI's LastEvaluatedKey.
type staleCursor struct {
	PK         string `json:"pk"`
	Shard      string `json:"s"`
	LeaseUntil string `json:"lu"`
}

// Stale is one Query of the sparse in-flight index: it reads in-flight records only,
// never the whole table.
func (s *DynamoStore) Stale(ctx context.Context, shard string, before time.Time, limit int, cursor string) ([]StaleLease, string, error) {
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		IndexName:              aws.String(InflightIndex),
		KeyConditionExpression: aws.String("inflight = :shard AND lease_until < :before"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":shard":  avS(shard),
			":before": avN(epochMillis(before)),
		},
	}
	if limit > 0 {
		in.Limit = aws.Int32(int32(min(limit, 1000)))
	}
	if cursor != "" {
		var c staleCursor
		if err := json.Unmarshal([]byte(cursor), &c); err != nil {
			return nil, "", fmt.Errorf("idem: stale: bad cursor: %w", err)
		}
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			attrPK:         avS(c.PK),
			attrInflight:   avS(c.Shard),
			attrLeaseUntil: &types.AttributeValueMemberN{Value: c.LeaseUntil},
		}
	}
	out, err := s.api.Query(ctx, in)
	if err != nil {
		return nil, "", fmt.Errorf("idem: stale shard %s: %w", shard, err)
	}
	recs := make([]StaleLease, 0, len(out.Items))
	for _, item := range out.Items {
		r, err := unmarshalRecord(item)
		if err != nil {
			return nil, "", fmt.Errorf("idem: stale shard %s: %w", shard, err)
		}
		recs = append(recs, StaleLease{Key: r.Key, Token: r.LeaseToken, LeaseUntil: r.LeaseUntil, Owner: r.Owner, Attempt: r.Attempt})
	}
	next := ""
	if lek := out.LastEvaluatedKey; len(lek) > 0 {
		c := staleCursor{}
		if v, ok := lek[attrPK].(*types.AttributeValueMemberS); ok {
			c.PK = v.Value
		}
		if v, ok := lek[attrInflight].(*types.AttributeValueMemberS); ok {
			c.Shard = v.Value
		}
		if v, ok := lek[attrLeaseUntil].(*types.AttributeValueMemberN); ok {
			c.LeaseUntil = v.Value
		}
		b, err := json.Marshal(c)
		if err != nil {
			return nil, "", fmt.Errorf("idem: stale shard %s: cursor: %w", shard, err)
		}
		next = string(b)
	}
	return recs, next, nil
}

// Reap is one UpdateItem conditioned on the token and lease end the reaper read.
func (s *DynamoStore) Reap(ctx context.Context, sl StaleLease, reason string, now time.Time) error {
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      map[string]types.AttributeValue{attrPK: avS(sl.Key)},
		UpdateExpression:         aws.String("SET #status = :failed, #error = :reason, retryable = :true, updated_at = :now REMOVE inflight"),
		ConditionExpression:      aws.String(fence + " AND lease_until = :lu"),
		ExpressionAttributeNames: map[string]string{"#status": attrStatus, "#error": attrError},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":tok":        avS(sl.Token),
			":inprogress": avS(string(StatusInProgress)),
			":lu":         avN(epochMillis(sl.LeaseUntil)),
			":failed":     avS(string(StatusFailed)),
			":reason":     avS(nonEmpty(reason)),
			":true":       avBool(true),
			":now":        avN(epochMillis(now)),
		},
	})
	return fenceErr("reap", sl.Key, err)
}

// fenceErr turns a failed fencing condition into ErrLeaseLost and wraps other errors.
func fenceErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("idem: %s %s: %w", op, redact(key), ErrLeaseLost)
	}
	return fmt.Errorf("idem: %s %s: %w", op, redact(key), err)
}

func nonEmpty(s string) string {
	if s == "" {
		return "unspecified"
	}
	return s
}

// shardOf spreads keys over n in-flight index shards.
func shardOf(key string, n int) string {
	if n <= 1 {
		return "0"
	}
	var h uint32 = 2166136261 // FNV-1a
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return strconv.Itoa(int(h % uint32(n)))
}
