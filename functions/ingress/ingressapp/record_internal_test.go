package ingressapp

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// answers is a DynamoDB that answers the ingress store's PutItem and GetItem as told: the
// answers DynamoDB gives that moto cannot be made to give on demand (a failed condition
// without the item, an item of the wrong shape, an error on a read).
type answers struct {
	persistence.DynamoDBAPI
	put    func() (*dynamodb.PutItemOutput, error)
	get    func() (*dynamodb.GetItemOutput, error)
	update func() (*dynamodb.UpdateItemOutput, error)
}

func (a *answers) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return a.update()
}

func (a *answers) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return a.put()
}

func (a *answers) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return a.get()
}

// checkAnswer wants got and err to be want, or, with wantErr, no record and an error
// that says wantErr.
func checkAnswer(t *testing.T, name string, got *record, err error, want *record, wantErr string) {
	t.Helper()
	switch {
	case wantErr != "":
		if err == nil || !strings.Contains(err.Error(), wantErr) || got != nil {
			t.Errorf("%s: %+v, %v; want an error with %q", name, got, err, wantErr)
		}
	case err != nil || !reflect.DeepEqual(got, want):
		t.Errorf("%s: %+v, %v; want %+v", name, got, err, want)
	}
}

func fullRecord(now time.Time) *record {
	return &record{
		Key: "k", PayloadHash: "h", ConsumerKey: "biz-1", State: stateSending, Token: "tok-1", SendingUntil: now.Add(time.Minute),
		Group: "g", Attempt: 2, MessageID: "m-1", CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
	}
}

// TestRecordItem: a record and its item, both ways: every field kept, and the optional
// attributes (message group, sending window, message id, consumer key) absent when unset.
func TestRecordItem(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second) // expires_at is kept in seconds
	rec := fullRecord(now)
	got, err := fromItem(rec.item())
	if err != nil || !reflect.DeepEqual(got, rec) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, rec)
	}
	bare := &record{Key: "k", PayloadHash: "h", State: stateQueued, Token: "t", Attempt: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
	it := bare.item()
	for _, a := range []string{attrGroup, attrSendingUntil, attrMessageID, attrConsumerKey} {
		if _, ok := it[a]; ok {
			t.Errorf("unset %s written: %v", a, it[a])
		}
	}
	if got, err := fromItem(it); err != nil || !reflect.DeepEqual(got, bare) {
		t.Fatalf("round trip without the optional attributes: %+v, %v; want %+v", got, err, bare)
	}
}

// TestRecordItemOfAnotherShape: an attribute of another type, or a number that does not
// parse, is an error naming the attribute, not a record with a zero value.
func TestRecordItemOfAnotherShape(t *testing.T) {
	now := time.Now()
	for name, change := range map[string]func(map[string]types.AttributeValue){
		"state as a number":   func(it map[string]types.AttributeValue) { it[attrState] = n(1) },
		"attempt as a string": func(it map[string]types.AttributeValue) { it[attrAttempt] = s("2") },
		"attempt not a number": func(it map[string]types.AttributeValue) {
			it[attrAttempt] = &types.AttributeValueMemberN{Value: "two"}
		},
	} {
		it := fullRecord(now).item()
		change(it)
		attr := map[string]string{"state as a number": attrState}[name]
		if attr == "" {
			attr = attrAttempt
		}
		if rec, err := fromItem(it); err == nil || rec != nil || !strings.Contains(err.Error(), "attribute "+attr) {
			t.Errorf("%s: %+v, %v; want an error naming %s", name, rec, err, attr)
		}
	}
}

// TestCreateAgainstAnswers: what create makes of DynamoDB's answers to its conditional
// PutItem: a record holding the request's own token counts as created (an earlier try
// applied, its answer lost); another live record is returned, from the failed
// condition's item or, when the answer did not carry it, read; an item that does not
// decode, a record gone when read, and a failed read are errors.
func TestCreateAgainstAnswers(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	mine := fullRecord(now)
	theirs := fullRecord(now)
	theirs.Token = "tok-2"
	ccf := func(item map[string]types.AttributeValue) func() (*dynamodb.PutItemOutput, error) {
		return func() (*dynamodb.PutItemOutput, error) {
			return nil, &types.ConditionalCheckFailedException{Message: aws.String("condition"), Item: item}
		}
	}
	read := func(item map[string]types.AttributeValue, err error) func() (*dynamodb.GetItemOutput, error) {
		return func() (*dynamodb.GetItemOutput, error) {
			if err != nil {
				return nil, err
			}
			return &dynamodb.GetItemOutput{Item: item}, nil
		}
	}
	noRead := func() (*dynamodb.GetItemOutput, error) { return nil, errors.New("no read expected") }
	bad := theirs.item()
	bad[attrToken] = n(7)
	for _, c := range []struct {
		name      string
		put       func() (*dynamodb.PutItemOutput, error)
		get       func() (*dynamodb.GetItemOutput, error)
		want      *record
		wantErr   string
		wantCalls int
	}{
		{"created", func() (*dynamodb.PutItemOutput, error) { return &dynamodb.PutItemOutput{}, nil }, noRead, nil, "", 0},
		{"own token, in the answer", ccf(mine.item()), noRead, nil, "", 0},
		{"another's record, in the answer", ccf(theirs.item()), noRead, theirs, "", 0},
		{"another's record, read", ccf(nil), read(theirs.item(), nil), theirs, "", 1},
		{"own token, read", ccf(nil), read(mine.item(), nil), nil, "", 1},
		{"an item of another shape", ccf(bad), noRead, nil, "attribute " + attrToken, 0},
		{"gone when read", ccf(nil), read(nil, nil), nil, "vanished", 1},
		{"the read fails", ccf(nil), read(nil, errors.New("throttled")), nil, "get record: throttled", 1},
		{"the put fails", func() (*dynamodb.PutItemOutput, error) { return nil, errors.New("unreachable") }, noRead, nil, "put record: unreachable", 0},
	} {
		calls := 0
		api := &answers{put: c.put, get: func() (*dynamodb.GetItemOutput, error) { calls++; return c.get() }}
		st := &store{api: api, table: "ingress"}
		got, err := st.create(ctx, mine, now)
		checkAnswer(t, c.name, got, err, c.want, c.wantErr)
		if calls != c.wantCalls {
			t.Errorf("%s: %d reads, want %d", c.name, calls, c.wantCalls)
		}
	}
}

// TestGetAgainstAnswers: what get makes of DynamoDB's answers to its read: no item is no
// record, whatever the time (the status lookup reads with the zero time, so that an
// expired record still shows); an expired record (its expires_at before now's second) is
// none, except at the zero time; an
// item that does not decode and a failed read are errors.
func TestGetAgainstAnswers(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	live := fullRecord(now)
	expired := fullRecord(now)
	expired.ExpiresAt = now.Add(-time.Hour)
	bad := live.item()
	bad[attrState] = n(1)
	// expires_at is in seconds: a record lives through its last second, as the put's
	// condition (expires_at < now's second) and the consumer's records have it.
	lastSecond := fullRecord(now)
	lastSecond.ExpiresAt = now
	for _, c := range []struct {
		name    string
		item    map[string]types.AttributeValue
		err     error
		at      time.Time
		want    *record
		wantErr string
	}{
		{"no item", nil, nil, now, nil, ""},
		{"no item, at the zero time", nil, nil, time.Time{}, nil, ""},
		{"a live record", live.item(), nil, now, live, ""},
		{"an expired record", expired.item(), nil, now, nil, ""},
		{"a record in its last second", lastSecond.item(), nil, now.Add(999 * time.Millisecond), lastSecond, ""},
		{"a record a second past its last", lastSecond.item(), nil, now.Add(time.Second), nil, ""},
		{"an expired record, at the zero time", expired.item(), nil, time.Time{}, expired, ""},
		{"an item of another shape", bad, nil, now, nil, "attribute " + attrState},
		{"an item of another shape, expired or not", bad, nil, time.Time{}, nil, "attribute " + attrState},
		{"the read fails", nil, errors.New("throttled"), now, nil, "get record: throttled"},
	} {
		api := &answers{get: func() (*dynamodb.GetItemOutput, error) {
			if c.err != nil {
				return nil, c.err
			}
			return &dynamodb.GetItemOutput{Item: c.item}, nil
		}}
		st := &store{api: api, table: "ingress"}
		got, err := st.get(ctx, "k", c.at)
		checkAnswer(t, c.name, got, err, c.want, c.wantErr)
	}
}

// TestTakeoverAgainstAnswers: what takeover makes of DynamoDB's answers to its
// conditional UpdateItem: the record as updated; a failed condition whose item holds the
// new token is an earlier try of this very takeover, applied and its answer lost (the
// record it left is returned); a failed condition with another token, without the item,
// or with an item that does not decode is ErrChanged; any other error is returned.
func TestTakeoverAgainstAnswers(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	seen := fullRecord(now)
	mine := fullRecord(now)
	mine.Token, mine.Attempt = "tok-new", seen.Attempt+1
	theirs := fullRecord(now)
	theirs.Token = "tok-other"
	bad := mine.item()
	bad[attrAttempt] = s("3")
	ccf := func(item map[string]types.AttributeValue) func() (*dynamodb.UpdateItemOutput, error) {
		return func() (*dynamodb.UpdateItemOutput, error) {
			return nil, &types.ConditionalCheckFailedException{Message: aws.String("condition"), Item: item}
		}
	}
	for _, c := range []struct {
		name    string
		update  func() (*dynamodb.UpdateItemOutput, error)
		want    *record
		wantErr error
		wantMsg string
	}{
		{"taken over", func() (*dynamodb.UpdateItemOutput, error) {
			return &dynamodb.UpdateItemOutput{Attributes: mine.item()}, nil
		}, mine, nil, ""},
		{"own token in the failed condition", ccf(mine.item()), mine, nil, ""},
		{"another's token", ccf(theirs.item()), nil, ErrChanged, ""},
		{"no item in the failed condition", ccf(nil), nil, ErrChanged, ""},
		{"an item of another shape", ccf(bad), nil, ErrChanged, ""},
		{"the update fails", func() (*dynamodb.UpdateItemOutput, error) { return nil, errors.New("throttled") }, nil, nil, "take over record: throttled"},
	} {
		st := &store{api: &answers{update: c.update}, table: "ingress"}
		got, err := st.takeover(ctx, seen, "tok-new", now.Add(time.Minute), now)
		switch {
		case c.wantErr != nil || c.wantMsg != "":
			if err == nil || got != nil || (c.wantErr != nil && !errors.Is(err, c.wantErr)) || !strings.Contains(err.Error(), c.wantMsg) {
				t.Errorf("%s: %+v, %v; want %v %q", c.name, got, err, c.wantErr, c.wantMsg)
			}
		case err != nil || !reflect.DeepEqual(got, c.want):
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}
