package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
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
// holds only the records in flight: IN_PROGRESS, and COMPLETED with outbound messages
// not yet sent.
const InflightIndex = "inflight"

// DynamoStore is a Store on a DynamoDB table laid out as its Layout says (by default,
// CreateTable's).
type DynamoStore struct {
	api DynamoDBAPI
	s   *Schema
}

var _ Store = (*DynamoStore)(nil)

// NewDynamoStore returns a store on table through api, in the default layout.
func NewDynamoStore(api DynamoDBAPI, table string) (*DynamoStore, error) {
	return NewDynamoStoreLayout(api, Layout{Table: table})
}

// NewDynamoStoreLayout returns a store on the table of layout through api; an invalid
// layout is an error wrapping ErrLayout that names each problem.
func NewDynamoStoreLayout(api DynamoDBAPI, layout Layout) (*DynamoStore, error) {
	if api == nil {
		return nil, errors.New("idem: DynamoDB client is nil")
	}
	sc, err := layout.Schema()
	if err != nil {
		return nil, err
	}
	return &DynamoStore{api: api, s: sc}, nil
}

// Table returns the table name.
func (s *DynamoStore) Table() string { return s.s.Table }

// Key returns the table key of the record whose key is rk (Client.RecordKey).
func (s *DynamoStore) Key(rk string) map[string]types.AttributeValue { return s.s.key(rk) }

// expr builds the attribute names and values of one request: every record attribute
// goes through a placeholder, so any layout's names work, reserved words included.
type expr struct {
	s     *Schema
	names map[string]string
	vals  map[string]types.AttributeValue
}

func (s *DynamoStore) expr() *expr {
	return &expr{s: s.s, names: map[string]string{}, vals: map[string]types.AttributeValue{}}
}

// a is the placeholder of a record attribute (canonical name).
func (e *expr) a(canonical string) string {
	p := "#" + canonical
	e.names[p] = e.s.n(canonical)
	return p
}

// key is the placeholder of the key attribute whose absence means "no record".
func (e *expr) key() string {
	e.names["#key"] = e.s.keyAttr()
	return "#key"
}

// v is the placeholder of a value.
func (e *expr) v(name string, v types.AttributeValue) string {
	p := ":" + name
	e.vals[p] = v
	return p
}

// cond is the condition of a write of event ev (its row of the transitions table) with
// the values a.
func (e *expr) cond(ev Event, a CondArgs) string { return TransitionOf(ev).expr(e, a) }

func (e *expr) namesOrNil() map[string]string {
	if len(e.names) == 0 {
		return nil
	}
	return e.names
}

func (e *expr) valsOrNil() map[string]types.AttributeValue {
	if len(e.vals) == 0 {
		return nil
	}
	return e.vals
}

// Create is one conditional PutItem; on a conflict the live record comes back in the
// ConditionalCheckFailedException (ReturnValuesOnConditionCheckFailure=ALL_OLD).
func (s *DynamoStore) Create(ctx context.Context, rec *Record, now time.Time) (*Record, bool, error) {
	item, err := s.s.marshal(rec)
	if err != nil {
		return nil, false, err
	}
	e := s.expr()
	out, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(s.s.Table),
		Item:                                item,
		ConditionExpression:                 aws.String(e.cond(EventAcquire, CondArgs{Now: now})),
		ExpressionAttributeNames:            e.names,
		ExpressionAttributeValues:           e.vals,
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		if len(out.Attributes) == 0 {
			return nil, true, nil
		}
		// The put replaced an expired record that DynamoDB's TTL had not deleted yet.
		replaced, err := s.s.Unmarshal(out.Attributes)
		if err != nil {
			return nil, true, nil //nolint:nilerr // the lease is ours; the old record is only advisory
		}
		return replaced, true, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return nil, false, requestErr("acquire put", rec.Key, err)
	}
	if len(ccf.Item) == 0 {
		return nil, false, fmt.Errorf("idem: acquire put: condition failed but the old item was not returned")
	}
	old, err := s.s.Unmarshal(ccf.Item)
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
	e := s.expr()
	set := []string{
		e.a(attrLeaseToken) + " = " + e.v("tok", AvS(next.Token)),
		e.a(AttrLeaseUntil) + " = " + e.v("lu", avN(EpochMillis(next.Until))),
		e.a(attrStatus) + " = " + e.v("inprogress", AvS(string(StatusInProgress))),
		e.a(attrOwner) + " = " + e.v("owner", AvS(next.Owner)),
		e.a(attrUpdatedAt) + " = " + e.v("now", avN(EpochMillis(now))),
		e.a(AttrExpiresAt) + " = " + e.v("exp", avN(expiresAt.Unix())),
	}
	if s.s.hasIndex() {
		set = append(set, e.a(AttrInflight)+" = "+e.v("shard", AvS(next.Shard)))
	}
	update := "SET " + strings.Join(set, ", ") + " ADD " + e.a(AttrAttempt) + " " + e.v("one", avN(1)) +
		" REMOVE " + e.a(attrError) + ", " + e.a(attrRetryable) + ", " + e.a(attrErrorCategory) + ", " + e.a(attrErrorPublic) + ", " + e.a(attrRefusedBy)
	cond := e.cond(EventTakeover, SeenArgs(seen))
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.s.Table),
		Key:                       s.s.key(seen.Key),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  e.names,
		ExpressionAttributeValues: e.vals,
		ReturnValues:              types.ReturnValueAllNew,
		// A takeover applied on an attempt whose answer was lost fails the SDK's retry:
		// the record then comes back holding our own token.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) && len(ccf.Item) > 0 {
		if rec, uerr := s.s.Unmarshal(ccf.Item); uerr == nil && rec.LeaseToken == next.Token {
			return rec, nil
		}
	}
	if err != nil {
		return nil, fenceErr("takeover", seen.Key, err)
	}
	rec, err := s.s.Unmarshal(out.Attributes)
	if err != nil {
		return nil, fmt.Errorf("idem: takeover %s: %w", Redact(seen.Key), err)
	}
	return rec, nil
}

// Complete is one fenced UpdateItem, or one TransactWriteItems holding that update first
// and the business writes after it. A home write (Completion.Home) is folded into the
// record's update: its attributes become the record's, its own item is not written.
func (s *DynamoStore) Complete(ctx context.Context, l Lease, c Completion, now time.Time) error {
	data, enc, err := EncodeResponse(c.Response)
	if err != nil {
		return err
	}
	outbox, outboxEnc, err := EncodeOutbox(c.Outbox)
	if err != nil {
		return err
	}
	if len(data)+len(outbox) > MaxStoredResponse {
		return fmt.Errorf("%w: response and outbox are %d bytes stored, limit %d", ErrResponseTooLarge, len(data)+len(outbox), MaxStoredResponse)
	}
	writes, home, index, err := s.fold(l.Key, c.Writes, c.Home-1)
	if err != nil {
		return err
	}
	e := s.expr()
	set := []string{
		e.a(attrStatus) + " = " + e.v("completed", AvS(string(StatusCompleted))),
		e.a(attrUpdatedAt) + " = " + e.v("now", avN(EpochMillis(now))),
	}
	var remove []string
	if home == nil {
		set = append(set, e.a(AttrExpiresAt)+" = "+e.v("exp", avN(c.ExpiresAt.Unix())))
	} else {
		// The record is the guard's home: it lives as long as the guard, for good.
		remove = append(remove, e.a(AttrExpiresAt))
		names := slices.Sorted(maps.Keys(home))
		for i, name := range names {
			p := fmt.Sprintf("#h%d", i)
			e.names[p] = name
			set = append(set, p+" = "+e.v(fmt.Sprintf("h%d", i), home[name]))
		}
	}
	if len(data) > 0 {
		set = append(set, e.a(attrResponse)+" = "+e.v("resp", &types.AttributeValueMemberB{Value: data}))
	} else {
		remove = append(remove, e.a(attrResponse))
	}
	if enc != "" {
		set = append(set, e.a(AttrResponseEnc)+" = "+e.v("enc", AvS(enc)))
	} else {
		remove = append(remove, e.a(AttrResponseEnc))
	}
	if len(outbox) > 0 {
		// The record stays in the in-flight index until MarkSent, so the reaper finds
		// messages a crash left unsent (updated_at holds the commit time).
		set = append(set, e.a(attrOutbox)+" = "+e.v("outbox", &types.AttributeValueMemberB{Value: outbox}))
		if c.Group != "" {
			set = append(set, e.a(attrOutboxGroup)+" = "+e.v("group", AvS(c.Group)))
		} else {
			remove = append(remove, e.a(attrOutboxGroup))
		}
	} else {
		remove = append(remove, e.a(AttrInflight), e.a(attrOutbox), e.a(attrOutboxGroup))
	}
	if outboxEnc != "" {
		set = append(set, e.a(attrOutboxEnc)+" = "+e.v("oenc", AvS(outboxEnc)))
	} else {
		remove = append(remove, e.a(attrOutboxEnc))
	}
	if c.PayloadHash != "" {
		set = append(set, e.a(attrPayloadHash)+" = "+e.v("ph", AvS(c.PayloadHash)))
	}
	if f := c.Refusal; f.Reason != "" {
		// A takeover or a create left no error: only a refusal sets one.
		set = append(set, e.a(attrError)+" = "+e.v("reason", AvS(f.Reason)))
		if f.Category != "" {
			set = append(set, e.a(attrErrorCategory)+" = "+e.v("category", AvS(string(f.Category))))
		}
		if f.Public != "" {
			set = append(set, e.a(attrErrorPublic)+" = "+e.v("public", AvS(f.Public)))
		}
		if c.RefusedHash != "" {
			set = append(set, e.a(attrRefusedHash)+" = "+e.v("refusedhash", AvS(c.RefusedHash)))
		}
	}
	update := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		update += " REMOVE " + strings.Join(remove, ", ")
	}
	cond := e.cond(EventCommit, CondArgs{Token: l.Token})
	upd := &types.Update{
		TableName:                 aws.String(s.s.Table),
		Key:                       s.s.key(l.Key),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  e.names,
		ExpressionAttributeValues: e.vals,
		// In a transaction, the record comes back in the cancellation reason.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if len(writes) == 0 {
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
	if len(writes) > MaxWrites {
		return fmt.Errorf("idem: complete %s: %w: %d business writes, a transaction holds at most %d besides the completion", Redact(l.Key), ErrInvalidRequest, len(writes), MaxWrites)
	}
	items := make([]types.TransactWriteItem, 0, len(writes)+1)
	items = append(items, types.TransactWriteItem{Update: upd})
	items = append(items, writes...)
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
		return fmt.Errorf("idem: complete %s: %w", Redact(l.Key), ErrLeaseLost)
	}
	return writesRefused("complete", l.Key, tce, err, index)
}

// fold takes the home write out of writes: it returns the other writes, the home's
// attributes (nil without a home), and for each remaining write its position in the
// handler's writes. A home must be a Put to the record's own table: its key attributes
// are replaced by the record's key.
func (s *DynamoStore) fold(key string, writes []types.TransactWriteItem, home int) ([]types.TransactWriteItem, map[string]types.AttributeValue, []int, error) {
	index := make([]int, 0, len(writes))
	if home < 0 || home >= len(writes) {
		for i := range writes {
			index = append(index, i)
		}
		return writes, nil, index, nil
	}
	h := writes[home].Put
	if h == nil || aws.ToString(h.TableName) != s.s.Table {
		return nil, nil, nil, fmt.Errorf("idem: complete %s: %w: the record's home (write %d) must be a Put to the record's table %s",
			Redact(key), ErrInvalidRequest, home, s.s.Table)
	}
	attrs := map[string]types.AttributeValue{}
	for name, v := range h.Item {
		if name == s.s.pk || name == s.s.sk {
			continue
		}
		if slices.Contains(slices.Collect(maps.Values(s.s.names)), name) {
			return nil, nil, nil, fmt.Errorf("idem: complete %s: %w: the record's home (write %d) sets %s, an attribute of the record",
				Redact(key), ErrInvalidRequest, home, name)
		}
		attrs[name] = v
	}
	out := make([]types.TransactWriteItem, 0, len(writes)-1)
	for i, w := range writes {
		if i != home {
			out = append(out, w)
			index = append(index, i)
		}
	}
	return out, attrs, index, nil
}

// writesRefused turns the cancellation of a transaction whose first item (the record)
// passed into the error of its business writes: a *WriteConditionError listing every
// write whose condition failed, ErrInvalidRequest for writes DynamoDB refused as invalid,
// else the transaction's error (a conflict, throttling: retryable). index maps each
// transaction item after the first to its position in the handler's writes.
func writesRefused(op, key string, tce *types.TransactionCanceledException, err error, index []int) error {
	var wce *WriteConditionError
	var invalid []string
	pos := func(i int) int {
		if i-1 < len(index) {
			return index[i-1]
		}
		return i - 1
	}
	for i, r := range tce.CancellationReasons {
		if i == 0 {
			continue
		}
		switch code := aws.ToString(r.Code); code {
		case "ConditionalCheckFailed":
			if wce == nil {
				wce = &WriteConditionError{Index: pos(i), Reason: aws.ToString(r.Message)}
			}
			wce.Failed = append(wce.Failed, FailedWrite{Index: pos(i), Item: r.Item})
		case "ValidationError", "ItemCollectionSizeLimitExceeded":
			invalid = append(invalid, fmt.Sprintf("write %d: %s: %s", pos(i), code, aws.ToString(r.Message)))
		}
	}
	switch {
	case wce != nil:
		return fmt.Errorf("idem: %s %s: %w", op, Redact(key), wce)
	case len(invalid) > 0:
		return fmt.Errorf("idem: %s %s: %w: %s", op, Redact(key), ErrInvalidRequest, strings.Join(invalid, "; "))
	}
	return fmt.Errorf("idem: %s %s: transaction: %w", op, Redact(key), err)
}

// Put is one conditional PutItem, or one TransactWriteItems holding that put first and
// the business writes after it; a failed condition on the record returns the record
// from the failure (ReturnValuesOnConditionCheckFailure=ALL_OLD). A home write is folded
// into the record, as in Complete.
func (s *DynamoStore) Put(ctx context.Context, rec *Record, writes []types.TransactWriteItem, seen *Record, now time.Time) (*Record, error) {
	writes, home, index, err := s.fold(rec.Key, writes, rec.Home-1)
	if err != nil {
		return nil, err
	}
	item, err := s.s.marshal(rec)
	if err != nil {
		return nil, err
	}
	if home != nil {
		// The record is the guard's home: it lives as long as the guard, for good.
		delete(item, s.s.n(AttrExpiresAt))
		maps.Copy(item, home)
	}
	if len(writes) > MaxWrites {
		return nil, fmt.Errorf("idem: put %s: %w: %d business writes, a transaction holds at most %d besides the record", Redact(rec.Key), ErrInvalidRequest, len(writes), MaxWrites)
	}
	e := s.expr()
	cond := e.cond(EventPut, CondArgs{Now: now})
	if seen != nil {
		e = s.expr()
		cond = e.cond(EventPutOver, SeenArgs(seen))
	}
	// existing decides a failed condition on the record: the record as it is, or nil
	// when it holds our own token (a try applied earlier whose answer was lost).
	existing := func(item map[string]types.AttributeValue) (*Record, error) {
		old, err := s.recordOf(ctx, rec.Key, item, now)
		if err != nil {
			return nil, fmt.Errorf("idem: put %s: %w", Redact(rec.Key), err)
		}
		if old.LeaseToken == rec.LeaseToken {
			return nil, nil
		}
		return old, nil
	}
	if len(writes) == 0 {
		_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.s.Table), Item: item, ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: e.namesOrNil(), ExpressionAttributeValues: e.valsOrNil(),
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
		TableName: aws.String(s.s.Table), Item: item, ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.namesOrNil(), ExpressionAttributeValues: e.valsOrNil(),
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
	return nil, writesRefused("put", rec.Key, tce, err, index)
}

// recordOf decodes the record a failed condition returned, or reads it (consistently)
// when the service returned none.
func (s *DynamoStore) recordOf(ctx context.Context, key string, item map[string]types.AttributeValue, now time.Time) (*Record, error) {
	if len(item) > 0 {
		return s.s.Unmarshal(item)
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
		return fmt.Errorf("idem: %s %s: %w: %w", op, Redact(key), ErrInvalidRequest, err)
	}
	return fenceErr(op, key, err)
}

// MarkSent is one UpdateItem conditioned on the completion's token and a pending outbox.
func (s *DynamoStore) MarkSent(ctx context.Context, key, token string, sent int, dead []DeadMessage, now time.Time) error {
	e := s.expr()
	set := []string{
		e.a(attrSent) + " = " + e.v("sent", avN(int64(sent))),
		e.a(attrUpdatedAt) + " = " + e.v("now", avN(EpochMillis(now))),
	}
	if len(dead) > 0 {
		raw, err := json.Marshal(dead)
		if err != nil {
			return fmt.Errorf("idem: mark sent %s: %w", Redact(key), err)
		}
		set = append(set, e.a(attrOutboxDead)+" = "+e.v("dead", AvS(string(raw))))
	}
	update := "SET " + strings.Join(set, ", ") + " REMOVE " + strings.Join([]string{e.a(attrOutbox), e.a(attrOutboxEnc), e.a(attrOutboxGroup), e.a(AttrInflight)}, ", ")
	cond := e.cond(EventMarkSent, CondArgs{Token: token})
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.s.Table), Key: s.s.key(key),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.vals,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil // sent and marked by another delivery or the reaper, or gone
	}
	if err != nil {
		return fmt.Errorf("idem: mark sent %s: %w", Redact(key), err)
	}
	return nil
}

// Retry is one UpdateItem conditioned on the token and a FAILED, not retryable record.
func (s *DynamoStore) Retry(ctx context.Context, key, token, reason string, now time.Time) error {
	e := s.expr()
	update := fmt.Sprintf("SET %s = %s, %s = %s, %s = %s", e.a(attrRetryable), e.v("true", avBool(true)),
		e.a(attrError), e.v("reason", AvS(NonEmpty(reason))), e.a(attrUpdatedAt), e.v("now", avN(EpochMillis(now))))
	return s.fenced(ctx, EventClear, "retry", key, CondArgs{Token: token}, e, update)
}

// Retain is one UpdateItem of the expiry, conditioned on the token and the status.
func (s *DynamoStore) Retain(ctx context.Context, key, token string, until, now time.Time) error {
	e := s.expr()
	update := fmt.Sprintf("SET %s = %s, %s = %s", e.a(AttrExpiresAt), e.v("exp", avN(until.Unix())), e.a(attrUpdatedAt), e.v("now", avN(EpochMillis(now))))
	return s.fenced(ctx, EventRetain, "retain", key, CondArgs{Token: token}, e, update)
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

// fenced is one UpdateItem of key conditioned as ev's row says, with the values a.
func (s *DynamoStore) fenced(ctx context.Context, ev Event, op, key string, a CondArgs, e *expr, update string) error {
	cond := e.cond(ev, a)
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.s.Table), Key: s.s.key(key),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.vals,
	})
	return fenceErr(op, key, err)
}

// FailWith is one fenced UpdateItem.
func (s *DynamoStore) FailWith(ctx context.Context, l Lease, f Failure, expiresAt, now time.Time) error {
	e := s.expr()
	set := []string{
		e.a(attrStatus) + " = " + e.v("failed", AvS(string(StatusFailed))),
		e.a(attrError) + " = " + e.v("reason", AvS(NonEmpty(f.Reason))),
		e.a(attrRetryable) + " = " + e.v("retryable", avBool(f.Retryable)),
		e.a(AttrExpiresAt) + " = " + e.v("exp", avN(expiresAt.Unix())),
		e.a(attrUpdatedAt) + " = " + e.v("now", avN(EpochMillis(now))),
	}
	remove := []string{e.a(AttrInflight)}
	if f.Category != "" {
		set = append(set, e.a(attrErrorCategory)+" = "+e.v("category", AvS(string(f.Category))))
	} else {
		remove = append(remove, e.a(attrErrorCategory))
	}
	if f.Public != "" {
		set = append(set, e.a(attrErrorPublic)+" = "+e.v("public", AvS(f.Public)))
	} else {
		remove = append(remove, e.a(attrErrorPublic))
	}
	if by := f.RefusedBy.String(); by != "" {
		set = append(set, e.a(attrRefusedBy)+" = "+e.v("refusedby", AvS(by)))
	} else {
		remove = append(remove, e.a(attrRefusedBy))
	}
	update := "SET " + strings.Join(set, ", ") + " REMOVE " + strings.Join(remove, ", ")
	return s.fenced(ctx, FailEvent(f), "fail", l.Key, CondArgs{Token: l.Token}, e, update)
}

// AddStep is one fenced UpdateItem adding to the steps set, and to the answers set when
// the step answered; it sets the expiry when one is given.
func (s *DynamoStore) AddStep(ctx context.Context, l Lease, step string, answer []byte, expiresAt, now time.Time) error {
	e := s.expr()
	set := e.a(attrUpdatedAt) + " = " + e.v("now", avN(EpochMillis(now)))
	if !expiresAt.IsZero() {
		set += ", " + e.a(AttrExpiresAt) + " = " + e.v("exp", avN(expiresAt.Unix()))
	}
	update := fmt.Sprintf("SET %s ADD %s %s", set, e.a(attrSteps), e.v("step", &types.AttributeValueMemberSS{Value: []string{step}}))
	if answer != nil {
		update += fmt.Sprintf(", %s %s", e.a(attrStepAnswers), e.v("answer", answersSet(map[string][]byte{step: answer})))
	}
	return s.fenced(ctx, EventStep, "step "+step, l.Key, CondArgs{Token: l.Token}, e, update)
}

// Extend is one fenced UpdateItem of lease_until (which also moves the record in the
// in-flight index).
func (s *DynamoStore) Extend(ctx context.Context, l Lease, until, now time.Time) error {
	e := s.expr()
	update := fmt.Sprintf("SET %s = %s, %s = %s", e.a(AttrLeaseUntil), e.v("lu", avN(EpochMillis(until))), e.a(attrUpdatedAt), e.v("now", avN(EpochMillis(now))))
	return s.fenced(ctx, EventExtend, "extend", l.Key, CondArgs{Token: l.Token}, e, update)
}

// Get is a strongly consistent GetItem.
func (s *DynamoStore) Get(ctx context.Context, key string, now time.Time) (*Record, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.s.Table),
		Key:            s.s.key(key),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("idem: get %s: %w", Redact(key), err)
	}
	if len(out.Item) == 0 {
		return nil, fmt.Errorf("idem: get %s: %w", Redact(key), ErrNotFound)
	}
	rec, err := s.s.Unmarshal(out.Item)
	if err != nil {
		return nil, fmt.Errorf("idem: get %s: %w", Redact(key), err)
	}
	if rec.Expired(now) {
		return nil, fmt.Errorf("idem: get %s: %w (expired)", Redact(key), ErrNotFound)
	}
	return rec, nil
}

// ErrNoIndex is returned by Stale on a layout without the in-flight index: the reaper
// cannot run there (see Layout.InflightIndex).
var ErrNoIndex = errors.New("idem: the table has no in-flight index (Layout.InflightIndex is NoIndex): the reaper cannot list stale leases")

// Stale is one Query of the sparse in-flight index: it reads in-flight records only,
// never the whole table.
func (s *DynamoStore) Stale(ctx context.Context, shard string, before time.Time, limit int, cursor string) ([]StaleLease, string, error) {
	if !s.s.hasIndex() {
		return nil, "", ErrNoIndex
	}
	e := s.expr()
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.s.Table),
		IndexName:                 aws.String(s.s.index),
		KeyConditionExpression:    aws.String(fmt.Sprintf("%s = %s AND %s < %s", e.a(AttrInflight), e.v("shard", AvS(shard)), e.a(AttrLeaseUntil), e.v("before", avN(EpochMillis(before))))),
		ExpressionAttributeNames:  e.names,
		ExpressionAttributeValues: e.vals,
	}
	if limit > 0 {
		in.Limit = aws.Int32(int32(min(limit, 1000)))
	}
	if cursor != "" {
		var c map[string]string
		if err := json.Unmarshal([]byte(cursor), &c); err != nil {
			return nil, "", fmt.Errorf("idem: stale: bad cursor: %w", err)
		}
		in.ExclusiveStartKey = map[string]types.AttributeValue{}
		for name, v := range c {
			if name == s.s.n(AttrLeaseUntil) {
				in.ExclusiveStartKey[name] = &types.AttributeValueMemberN{Value: v}
			} else {
				in.ExclusiveStartKey[name] = AvS(v)
			}
		}
	}
	out, err := s.api.Query(ctx, in)
	if err != nil {
		return nil, "", fmt.Errorf("idem: stale shard %s: %w", shard, err)
	}
	recs := make([]StaleLease, 0, len(out.Items))
	for _, item := range out.Items {
		if _, ours := s.s.recordKey(item); !ours {
			// The index belongs to the table, and a table may hold the records of other
			// consumers under another static partition key or key prefix: theirs are not
			// this store's to list (their reaper lists them).
			continue
		}
		r, err := s.s.Unmarshal(item)
		if err != nil {
			return nil, "", fmt.Errorf("idem: stale shard %s: %w", shard, err)
		}
		recs = append(recs, StaleLease{Key: r.Key, Token: r.LeaseToken, LeaseUntil: r.LeaseUntil, Owner: r.Owner, Attempt: r.Attempt})
	}
	next := ""
	if lek := out.LastEvaluatedKey; len(lek) > 0 {
		// The index's LastEvaluatedKey: the table's key and the index's, as strings.
		c := map[string]string{}
		for name, v := range lek {
			switch x := v.(type) {
			case *types.AttributeValueMemberS:
				c[name] = x.Value
			case *types.AttributeValueMemberN:
				c[name] = x.Value
			}
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
	e := s.expr()
	update := fmt.Sprintf("SET %s = %s, %s = %s, %s = %s, %s = %s REMOVE %s",
		e.a(attrStatus), e.v("failed", AvS(string(StatusFailed))), e.a(attrError), e.v("reason", AvS(NonEmpty(reason))),
		e.a(attrRetryable), e.v("true", avBool(true)), e.a(attrUpdatedAt), e.v("now", avN(EpochMillis(now))), e.a(AttrInflight))
	return s.fenced(ctx, EventReap, "reap", sl.Key, CondArgs{Token: sl.Token, LeaseUntil: sl.LeaseUntil}, e, update)
}

// fenceErr turns a failed fencing condition into ErrLeaseLost and wraps other errors.
func fenceErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("idem: %s %s: %w", op, Redact(key), ErrLeaseLost)
	}
	return fmt.Errorf("idem: %s %s: %w", op, Redact(key), err)
}

func NonEmpty(s string) string {
	if s == "" {
		return "unspecified"
	}
	return s
}

// shardOf spreads keys over n in-flight index shards.
func ShardOf(key string, n int) string {
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
