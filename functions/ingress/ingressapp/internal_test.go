package ingressapp

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
)

// TestSQSText: the characters SQS refuses in a message body are refused before anything
// is written.
func TestSQSText(t *testing.T) {
	for s, ok := range map[string]bool{
		"{\"a\":\"tab\there\"}\r\n": true, "é ✓ 𝄞": true, "\u0000": false, "\u001f": false, "\uFFFE": false, "\uFFFF": false, "\uFFFD": true,
	} {
		if err := sqsText([]byte(s)); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", s, err, ok)
		}
	}
}

// TestValidKey: the keys the ingress takes.
func TestValidKey(t *testing.T) {
	for key, ok := range map[string]bool{
		"8e03978e-40d5-43e8-bc93-6894a57f9324": true, "payment:pay-1": true, "a.b_c~d@e+f=g": true,
		strings.Repeat("k", MaxKeyLength): true, strings.Repeat("k", MaxKeyLength+1): false,
		"": false, "a b": false, "a,b": false, "a/b": false, "a%20b": false, `"a"`: false, "é": false, "a?b": false, "a#b": false,
		// The bounds of each range, and the characters just past them.
		"azAZ09": true, "`": false, "{": false, "[": false, "/": false, ";": false,
	} {
		if err := ValidKey(key); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", key, err, ok)
		}
	}
	if err := ValidKey("ab/c"); err == nil || !strings.HasSuffix(err.Error(), "at position 3") {
		t.Errorf("ab/c: %v, want the position of / (3)", err)
	}
}

// TestStatusOf: each row of docs/ingress.md's table of statuses, from the consumer's
// record to the answer, every field compared: a failure's category, the reason the
// example chose to show and the request id, never the error itself.
func TestStatusOf(t *testing.T) {
	const key, hash, raw = "pay-1", "fp-1", "AccessDenied: arn:aws:iam::123456789012:role/consumer"
	loc := RequestsPath + "/pay-1"
	refused := (&idem.WriteConditionError{Explained: true, Reason: "currency EUR does not match the account's JPY"}).Error()
	for _, c := range []struct {
		name string
		rec  *persistence.Record
		want Status
	}{
		{"no record", nil, Status{Key: key, Status: StatusAccepted, Location: loc}},
		{"held", &persistence.Record{Status: persistence.StatusInProgress, PayloadHash: hash, Attempt: 2},
			Status{Key: key, Status: StatusInProgress, Attempts: 2, Location: loc}},
		{"reaped", &persistence.Record{Status: persistence.StatusFailed, Retryable: true, Error: reaper.ReasonLeaseExpired, PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusInProgress, Category: string(persistence.CategoryRetrying), Attempts: 1, Location: loc}},
		{"throttled", &persistence.Record{Status: persistence.StatusFailed, Retryable: true, Error: raw, Category: persistence.CategoryRetrying, Owner: "req-7", PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusInProgress, Category: string(persistence.CategoryRetrying), RequestID: "req-7", Attempts: 1, Location: loc}},
		{"completed, JSON", &persistence.Record{Status: persistence.StatusCompleted, PayloadHash: hash, Attempt: 3, Response: []byte(`{"ok":true}`)},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`{"ok":true}`), Attempts: 3, Location: loc}},
		{"completed, text", &persistence.Record{Status: persistence.StatusCompleted, PayloadHash: hash, Attempt: 1, Response: []byte("done")},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`"done"`), Attempts: 1, Location: loc}},
		{"completed, bytes", &persistence.Record{Status: persistence.StatusCompleted, PayloadHash: hash, Attempt: 1, Response: []byte{0xff, 0x00}},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`"/wA="`), ResponseEncoding: "base64", Attempts: 1, Location: loc}},
		{"completed, empty", &persistence.Record{Status: persistence.StatusCompleted, PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusCompleted, Attempts: 1, Location: loc}},
		{"failed for good", &persistence.Record{Status: persistence.StatusFailed, Error: "bad amount", Category: persistence.CategoryInvalid, Public: "amount_cents must be positive", Owner: "req-1", PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusFailed, Category: string(persistence.CategoryInvalid), Reason: "amount_cents must be positive", RequestID: "req-1", Attempts: 1, Location: loc}},
		{"failed for good, before categories", &persistence.Record{Status: persistence.StatusFailed, Error: raw, PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusFailed, Category: string(persistence.CategoryInvalid), Attempts: 1, Location: loc}},
		{"refused, redrivable", &persistence.Record{Status: persistence.StatusFailed, Retryable: true, Error: refused, Category: persistence.CategoryRefused, Public: "the payment's currency does not match the account's", Owner: "req-2", PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusFailed, Category: string(persistence.CategoryRefused), Reason: "the payment's currency does not match the account's", RequestID: "req-2", Redrivable: true, Attempts: 1, Location: loc}},
		{"another body", &persistence.Record{Status: persistence.StatusCompleted, PayloadHash: "fp-2", Attempt: 1, Response: []byte(`{}`)},
			Status{Key: key, Status: StatusFailed, Category: string(persistence.CategoryInvalid), Reason: payloadMismatch, Attempts: 1, Location: loc}},
		{"no fingerprint stored", &persistence.Record{Status: persistence.StatusCompleted, Attempt: 1, Response: []byte(`{}`)},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`{}`), Attempts: 1, Location: loc}},
	} {
		got := statusOf(key, hash, c.rec)
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", c.want) {
			t.Errorf("%s:\n  got  %+v\n  want %+v", c.name, got, c.want)
		}
		if strings.Contains(fmt.Sprintf("%+v", got), "AccessDenied") {
			t.Errorf("%s: the raw error reached the answer: %+v", c.name, got)
		}
		// Only accepted and in_progress change by themselves.
		if final := c.name != "no record" && c.name != "held" && c.name != "reaped" && c.name != "throttled"; got.Final() != final {
			t.Errorf("%s: Final() = %v, want %v", c.name, got.Final(), final)
		}
	}
}

// TestBase64BodyTitles: a body marked base64 is refused as too large on its decoded
// length's estimate only when the estimate passes the limit by more than base64's
// padding (3 bytes); within that, it is decoded, and one that does not decode is
// refused as such.
func TestBase64BodyTitles(t *testing.T) {
	a := &App{cfg: Config{MaxBodyBytes: 3000}} // divisible by 3: the estimate can be limit+3 exactly
	for n, title := range map[int]string{
		(3000 + 3) / 3 * 4: titleInvalidBody,  // estimate 3003: decoded, and it does not decode
		(3000 + 6) / 3 * 4: titleBodyTooLarge, // estimate 3006: refused before the decode
	} {
		_, ans, ok := a.body(LambdaFunctionURLRequest{Body: strings.Repeat("!", n), IsBase64Encoded: true})
		if ok || ans.problem == nil || ans.problem.Title != title {
			t.Errorf("%d characters that are no base64: %+v, want %q", n, ans.problem, title)
		}
	}
}

// TestHeaderPrefersTheLowerCaseName: of two entries that name one header in different
// cases (an event built by hand; function URLs give names in lower case), the lower-case
// one is read, every time.
func TestHeaderPrefersTheLowerCaseName(t *testing.T) {
	h := map[string]string{"idempotency-key": "k1", "Idempotency-Key": "k2", "IDEMPOTENCY-KEY": "k3"}
	for range 64 {
		if v, ok := header(h, KeyHeader); !ok || v != "k1" {
			t.Fatalf("header = %q, %v; want k1, the lower-case entry", v, ok)
		}
	}
}

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
