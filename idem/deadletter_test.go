package idem_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// captureSender is an SQSSender fake that keeps the last request.
type captureSender struct {
	in  *sqs.SendMessageInput
	err error
}

func (c *captureSender) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	c.in = in
	if c.err != nil {
		return nil, c.err
	}
	return &sqs.SendMessageOutput{MessageId: aws.String("new")}, nil
}

var fixedNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func poisonMsg() events.SQSMessage {
	return events.SQSMessage{
		MessageId:      "6b1f2c1e-1111-4222-8333-944445555666",
		Body:           `{"payment_id":"p-1","amount_cents":"not a number"}`,
		EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:payments.fifo",
		Attributes:     map[string]string{"MessageGroupId": "acct-9", "MessageDeduplicationId": "dedup-9"},
		MessageAttributes: map[string]events.SQSMessageAttribute{
			idem.KeyAttribute: strAttr("String", "key-9"),
			"amount":          strAttr("Number", "12.5"),
			"kind":            strAttr("String.custom", "payment"),
			"blob":            {DataType: "Binary", BinaryValue: []byte{0, 1, 2, 0xff}},
		},
	}
}

func attrString(attrs map[string]types.MessageAttributeValue, name string) string {
	return aws.ToString(attrs[name].StringValue)
}

func TestSQSDeadLetterInput(t *testing.T) {
	many := poisonMsg()
	for i := range 12 {
		many.MessageAttributes[fmt.Sprintf("a%02d", i)] = strAttr("String", "v")
	}
	noKey := poisonMsg()
	delete(noKey.MessageAttributes, idem.KeyAttribute)
	std := poisonMsg()
	std.Attributes = map[string]string{}
	std.MessageAttributes = nil
	weirdID := poisonMsg()
	weirdID.MessageId = strings.Repeat("é", 100)
	redriven := poisonMsg()
	redriven.MessageAttributes[sqsmsg.DLQReasonAttribute] = strAttr("String", "old reason")

	tests := []struct {
		name   string
		dl     sqsmsg.SQSDeadLetter
		msg    events.SQSMessage
		cause  error
		check  func(t *testing.T, in *sqs.SendMessageInput)
		attrs  int
		reason string
	}{
		{
			name:   "FIFO queue, attributes copied",
			dl:     sqsmsg.SQSDeadLetter{QueueURL: "http://q/dlq.fifo", Source: "consumer-fn"},
			msg:    poisonMsg(),
			cause:  idem.Permanent(errors.New("amount_cents is not a number")),
			attrs:  9,
			reason: "permanent: amount_cents is not a number",
			check: func(t *testing.T, in *sqs.SendMessageInput) {
				if got := aws.ToString(in.MessageGroupId); got != "acct-9" {
					t.Errorf("MessageGroupId = %q", got)
				}
				if got := aws.ToString(in.MessageDeduplicationId); got != "dlq-6b1f2c1e-1111-4222-8333-944445555666" {
					t.Errorf("MessageDeduplicationId = %q", got)
				}
				a := in.MessageAttributes
				if attrString(a, idem.KeyAttribute) != "key-9" || attrString(a, "amount") != "12.5" ||
					aws.ToString(a["amount"].DataType) != "Number" || aws.ToString(a["kind"].DataType) != "String.custom" ||
					string(a["blob"].BinaryValue) != "\x00\x01\x02\xff" || aws.ToString(a["blob"].DataType) != "Binary" {
					t.Errorf("original attributes not copied: %+v", a)
				}
				if attrString(a, sqsmsg.DLQSourceMessageIDAttribute) != "6b1f2c1e-1111-4222-8333-944445555666" ||
					attrString(a, sqsmsg.DLQSourceQueueAttribute) != "arn:aws:sqs:us-east-1:000000000000:payments.fifo" ||
					attrString(a, sqsmsg.DLQFailedAtAttribute) != "2030-01-02T03:04:05Z" ||
					attrString(a, sqsmsg.DLQSourceAttribute) != "consumer-fn" {
					t.Errorf("dlq attributes: %+v", a)
				}
			},
		},
		{
			name:   "standard queue: no group, no dedup id, no source",
			dl:     sqsmsg.SQSDeadLetter{QueueURL: "http://q/dlq"},
			msg:    std,
			cause:  errors.New("x"),
			attrs:  4,
			reason: "x",
			check: func(t *testing.T, in *sqs.SendMessageInput) {
				if in.MessageGroupId != nil || in.MessageDeduplicationId != nil {
					t.Errorf("group %v / dedup %v set on a standard queue", in.MessageGroupId, in.MessageDeduplicationId)
				}
				if _, ok := in.MessageAttributes[sqsmsg.DLQSourceAttribute]; ok {
					t.Error("dlq-source set without a Source")
				}
			},
		},
		{
			name:   "FIFO DLQ for a standard source uses the dead-letter group",
			dl:     sqsmsg.SQSDeadLetter{QueueURL: "http://q/dlq.fifo"},
			msg:    std,
			cause:  errors.New("x"),
			attrs:  4,
			reason: "x",
			check: func(t *testing.T, in *sqs.SendMessageInput) {
				if got := aws.ToString(in.MessageGroupId); got != "dead-letter" {
					t.Errorf("MessageGroupId = %q, want dead-letter", got)
				}
			},
		},
		{
			name:   "at most 10 attributes, key kept",
			dl:     sqsmsg.SQSDeadLetter{QueueURL: "http://q/dlq.fifo", Source: "fn"},
			msg:    many,
			cause:  errors.New("x"),
			attrs:  10,
			reason: "x",
			check: func(t *testing.T, in *sqs.SendMessageInput) {
				a := in.MessageAttributes
				// 5 dlq-* + the key + the first 4 others in name order: a00..a03.
				for _, name := range []string{sqsmsg.DLQReasonAttribute, sqsmsg.DLQSourceAttribute, idem.KeyAttribute, "a00", "a03"} {
					if _, ok := a[name]; !ok {
						t.Errorf("attribute %s dropped", name)
					}
				}
				if _, ok := a["a04"]; ok {
					t.Error("a04 kept beyond the limit")
				}
			},
		},
		{
			name:   "key from the FIFO dedup id is kept as the key attribute",
			dl:     sqsmsg.SQSDeadLetter{QueueURL: "http://q/dlq.fifo"},
			msg:    noKey,
			cause:  errors.New("x"),
			attrs:  8,
			reason: "x",
			check: func(t *testing.T, in *sqs.SendMessageInput) {
				if got := attrString(in.MessageAttributes, idem.KeyAttribute); got != "dedup-9" {
					t.Errorf("key attribute = %q, want the dedup id", got)
				}
			},
		},
		{
			name:   "long reason truncated at a rune boundary and cleaned",
			dl:     sqsmsg.SQSDeadLetter{QueueURL: "http://q/dlq"},
			msg:    std,
			cause:  errors.New("bad\x00\x1b[31m " + strings.Repeat("€", 400)),
			attrs:  4,
			reason: "bad\uFFFD\uFFFD[31m " + strings.Repeat("€", (1024-len("bad\uFFFD\uFFFD[31m "))/3),
		},
		{
			name:   "nil cause",
			dl:     sqsmsg.SQSDeadLetter{QueueURL: "http://q/dlq"},
			msg:    std,
			attrs:  4,
			reason: "unknown error",
		},
		{
			name:   "message id not usable as a dedup id is hashed",
			dl:     sqsmsg.SQSDeadLetter{QueueURL: "http://q/dlq.fifo"},
			msg:    weirdID,
			cause:  errors.New("x"),
			attrs:  8,
			reason: "x",
			check: func(t *testing.T, in *sqs.SendMessageInput) {
				id := aws.ToString(in.MessageDeduplicationId)
				if !strings.HasPrefix(id, "dlq-") || len(id) > 128 || strings.ContainsFunc(id, func(r rune) bool { return r < '!' || r > '~' }) {
					t.Errorf("MessageDeduplicationId %q is not a valid dedup id", id)
				}
			},
		},
		{
			name:   "an earlier dead-lettering's attributes are replaced",
			dl:     sqsmsg.SQSDeadLetter{QueueURL: "http://q/dlq.fifo"},
			msg:    redriven,
			cause:  errors.New("new reason"),
			attrs:  8,
			reason: "new reason",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &captureSender{}
			dl := tt.dl
			dl.API, dl.Clock = api, func() time.Time { return fixedNow }
			if err := dl.DeadLetter(context.Background(), tt.msg, tt.cause); err != nil {
				t.Fatalf("DeadLetter: %v", err)
			}
			in := api.in
			if aws.ToString(in.QueueUrl) != tt.dl.QueueURL || aws.ToString(in.MessageBody) != tt.msg.Body {
				t.Errorf("queue %q body %q: want %q and the original body", aws.ToString(in.QueueUrl), aws.ToString(in.MessageBody), tt.dl.QueueURL)
			}
			if len(in.MessageAttributes) != tt.attrs {
				t.Errorf("%d attributes, want %d: %v", len(in.MessageAttributes), tt.attrs, in.MessageAttributes)
			}
			reason := attrString(in.MessageAttributes, sqsmsg.DLQReasonAttribute)
			if reason != tt.reason {
				t.Errorf("reason = %q, want %q", reason, tt.reason)
			}
			if len(reason) > sqsmsg.MaxDLQReasonBytes || !utf8.ValidString(reason) {
				t.Errorf("reason is %d bytes, valid UTF-8 %v", len(reason), utf8.ValidString(reason))
			}
			for name, v := range in.MessageAttributes {
				if v.DataType == nil || (v.StringValue == nil) == (v.BinaryValue == nil) {
					t.Errorf("attribute %s is malformed: %+v", name, v)
				}
			}
			if tt.check != nil {
				tt.check(t, in)
			}
		})
	}
}

func TestSQSDeadLetterErrors(t *testing.T) {
	sendErr := errors.New("throttled")
	tests := []struct {
		name    string
		dl      *sqsmsg.SQSDeadLetter
		wantIs  error
		wantHas string
	}{
		{"send fails", &sqsmsg.SQSDeadLetter{API: &captureSender{err: sendErr}, QueueURL: "http://q/dlq"}, sendErr, "throttled"},
		{"no API", &sqsmsg.SQSDeadLetter{QueueURL: "http://q/dlq"}, nil, "API is nil"},
		{"no queue", &sqsmsg.SQSDeadLetter{API: &captureSender{}}, nil, "QueueURL is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.dl.DeadLetter(context.Background(), poisonMsg(), errors.New("cause"))
			if err == nil {
				t.Fatal("DeadLetter = nil, want an error")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.wantIs)
			}
			want := "idem: dead-letter " + poisonMsg().MessageId + ": "
			if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tt.wantHas) {
				t.Errorf("error = %q, want prefix %q and %q", err, want, tt.wantHas)
			}
		})
	}
}

// TestSQSDeadLetterFIFOQueue sends through the real SDK to a FIFO queue on the local
// endpoint and reads the message back.
func TestSQSDeadLetterFIFOQueue(t *testing.T) {
	ctx := context.Background()
	api := awstest.SQS(t)
	// A visibility timeout of 0 (see the receive below).
	url := awstest.FIFOQueue(ctx, t, api, "dlq", map[string]string{"VisibilityTimeout": "0"})

	dl := &sqsmsg.SQSDeadLetter{API: api, QueueURL: url, Source: "consumer"}
	msg := poisonMsg()
	cause := idem.Permanent(fmt.Errorf("validate %s: %w", "p-1", errors.New("amount_cents is not a number")))
	// The same poison message dead-lettered twice (its record was redelivered) must
	// appear once.
	for range 2 {
		if err := dl.DeadLetter(ctx, msg, cause); err != nil {
			t.Fatalf("DeadLetter: %v", err)
		}
	}
	if n := queueDepth(t, api, url); n != 1 {
		t.Errorf("queue holds %d messages after dead-lettering one twice, want 1", n)
	}

	// The queue's visibility timeout is 0: a receive whose answer was lost on the way
	// back (the SDK then retries it) would otherwise leave the message in flight for
	// 30 s, and the retry would find the queue empty (seen once in CI under make
	// test's load). With 0 the message stays receivable; the depth check above is what
	// counts the copies.
	var recv *sqs.ReceiveMessageOutput
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		recv, err = api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    &url,
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		if len(recv.Messages) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(recv.Messages) != 1 {
		t.Fatalf("received %d messages, want 1", len(recv.Messages))
	}
	got := recv.Messages[0]
	if aws.ToString(got.Body) != msg.Body {
		t.Errorf("body = %q, want the original %q", aws.ToString(got.Body), msg.Body)
	}
	if g := got.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]; g != "acct-9" {
		t.Errorf("MessageGroupId = %q, want acct-9", g)
	}
	if d := got.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)]; d != "dlq-"+msg.MessageId {
		t.Errorf("MessageDeduplicationId = %q", d)
	}
	a := got.MessageAttributes
	if r := attrString(a, sqsmsg.DLQReasonAttribute); r != cause.Error() {
		t.Errorf("reason = %q, want %q", r, cause.Error())
	}
	if attrString(a, sqsmsg.DLQSourceMessageIDAttribute) != msg.MessageId || attrString(a, sqsmsg.DLQSourceQueueAttribute) != msg.EventSourceARN ||
		attrString(a, sqsmsg.DLQSourceAttribute) != "consumer" {
		t.Errorf("dlq attributes = %+v", a)
	}
	if _, err := time.Parse(time.RFC3339, attrString(a, sqsmsg.DLQFailedAtAttribute)); err != nil {
		t.Errorf("dlq-failed-at: %v", err)
	}
	if attrString(a, idem.KeyAttribute) != "key-9" || attrString(a, "amount") != "12.5" || string(a["blob"].BinaryValue) != "\x00\x01\x02\xff" {
		t.Errorf("original attributes not kept: %+v", a)
	}
	// The message read back is keyed as the original was.
	if key, err := idem.MessageKey(events.SQSMessage{MessageAttributes: lambdaAttrs(a)}, ""); err != nil || key != "key-9" {
		t.Errorf("MessageKey of the dead-lettered message = %q, %v", key, err)
	}

	// A different message is not deduplicated against the first.
	other := poisonMsg()
	other.MessageId = "7c2a3d2f-2222-4333-9444-055556666777"
	if err := dl.DeadLetter(ctx, other, cause); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	if n := queueDepth(t, api, url); n != 2 {
		// The first (visible again: received above with a visibility timeout of 0) and
		// the new one.
		t.Errorf("visible messages = %d after a second poison message, want 2", n)
	}
}

func queueDepth(t *testing.T, api *sqs.Client, url string) int {
	t.Helper()
	out, err := api.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl:       &url,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	var n int
	if _, err := fmt.Sscan(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)], &n); err != nil {
		t.Fatalf("ApproximateNumberOfMessages: %v", err)
	}
	return n
}

func lambdaAttrs(a map[string]types.MessageAttributeValue) map[string]events.SQSMessageAttribute {
	out := map[string]events.SQSMessageAttribute{}
	for k, v := range a {
		out[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue}
	}
	return out
}

// TestDeadLetterSignature (issue 28, finding 2): a dead letter the consumer or the reaper
// sends carries their signature of its body, group and attributes, which verifies as
// received from the queue (on moto, through the real SDK); the ingress's signature of the
// original travels with it, never dropped. A message anyone else put there with the same
// attributes, a destination changed, a body changed, or no keys, does not verify.
func TestDeadLetterSignature(t *testing.T) {
	ctx := context.Background()
	api := awstest.SQS(t)
	url := awstest.FIFOQueue(ctx, t, api, "signed", nil)
	keys := testKeys(t)
	dl := &sqsmsg.SQSDeadLetter{API: api, QueueURL: url, Source: "consumer", Keys: keys}
	msg := poisonMsg()
	msg.MessageAttributes[sqsmsg.IngressSignatureAttribute] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String("the-ingress-signature")}
	if err := dl.DeadLetter(ctx, msg, errors.New("invalid message")); err != nil {
		t.Fatal(err)
	}
	if err := dl.DeadLetterOutbound(ctx, idem.Message{QueueURL: "https://sqs.us-east-1.amazonaws.com/000000000000/receipts.fifo",
		Body: `{"receipt":1}`, GroupID: "acct-1", Attributes: map[string]string{idem.KeyAttribute: "payments#p-1#0"}}, errors.New("too large")); err != nil {
		t.Fatal(err)
	}
	got := receiveAllMessages(t, api, url)
	if len(got) != 2 {
		t.Fatalf("%d dead letters, want 2", len(got))
	}
	for _, m := range got {
		// Each keeps its FIFO group: the consumer's message its own, the outbound one
		// the group it was sent in.
		want := map[bool]string{false: "acct-9", true: "acct-1"}[m.MessageAttributes[sqsmsg.DLQOutboundQueueAttribute].StringValue != nil]
		if g := m.Attributes["MessageGroupId"]; g != want {
			t.Errorf("dead letter in group %q, want %q", g, want)
		}
		if err := keys.VerifyDeadLetter(m); err != nil {
			t.Errorf("a dead letter as sent (%s) does not verify: %v", attrString(m.MessageAttributes, sqsmsg.DLQReasonAttribute), err)
		}
		if m.MessageAttributes[sqsmsg.DLQOutboundQueueAttribute].StringValue == nil &&
			attrString(m.MessageAttributes, sqsmsg.IngressSignatureAttribute) != "the-ingress-signature" {
			t.Errorf("the ingress's signature was not kept: %v", m.MessageAttributes)
		}
		var none *sqsmsg.Keys
		changed := []types.Message{withAttr(m, sqsmsg.DLQOutboundQueueAttribute, "https://sqs.us-east-1.amazonaws.com/000000000000/elsewhere.fifo"),
			withAttr(m, sqsmsg.DLQReasonAttribute, "another reason"), withBody(m, `{"receipt":2}`)}
		for i, c := range changed {
			if err := keys.VerifyDeadLetter(c); !errors.Is(err, sqsmsg.ErrUnsignedDeadLetter) {
				t.Errorf("change %d verifies: %v", i, err)
			}
		}
		if err := none.VerifyDeadLetter(m); !errors.Is(err, sqsmsg.ErrUnsignedDeadLetter) {
			t.Errorf("nil keys verify: %v", err)
		}
	}
	// Without keys, nothing is signed.
	plain := &sqsmsg.SQSDeadLetter{API: api, QueueURL: url, Source: "consumer"}
	msg.MessageId = "other"
	if err := plain.DeadLetter(ctx, msg, errors.New("invalid")); err != nil {
		t.Fatal(err)
	}
	for _, m := range receiveAllMessages(t, api, url) {
		if err := keys.VerifyDeadLetter(m); !errors.Is(err, sqsmsg.ErrUnsignedDeadLetter) {
			t.Errorf("an unsigned dead letter verifies: %v", err)
		}
	}
}

func withAttr(m types.Message, name, value string) types.Message {
	c := m
	c.MessageAttributes = maps.Clone(m.MessageAttributes)
	c.MessageAttributes[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(value)}
	return c
}

func withBody(m types.Message, body string) types.Message {
	c := m
	c.Body = aws.String(body)
	return c
}

// receiveAllMessages receives every message of the queue at url, with all their
// attributes, and deletes them (awstest.Drain).
func receiveAllMessages(t *testing.T, api *sqs.Client, url string) []types.Message {
	t.Helper()
	all, err := awstest.Drain(context.Background(), api, url)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// deadLetterInput dead-letters msg with d (API replaced by a capturing fake) and returns
// the SendMessage request it made.
func deadLetterInput(t *testing.T, d sqsmsg.SQSDeadLetter, msg events.SQSMessage, cause error) *sqs.SendMessageInput {
	t.Helper()
	api := &captureSender{}
	d.API = api
	if d.QueueURL == "" {
		d.QueueURL = "https://sqs.us-east-1.amazonaws.com/000000000000/dlq"
	}
	if err := d.DeadLetter(context.Background(), msg, cause); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	if api.in == nil {
		t.Fatal("DeadLetter sent nothing")
	}
	return api.in
}

// plainMsg is a standard-queue message with only its key as a message attribute.
func plainMsg() events.SQSMessage {
	return events.SQSMessage{
		MessageId:         "m-1",
		Body:              `{"order":"o-1"}`,
		EventSourceARN:    "arn:aws:sqs:us-east-1:000000000000:orders",
		MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String", "key-1")},
	}
}

// The ingress's signature goes with the key and is never dropped, even when the
// original has more attributes, sorting before it, than SQS's 10 leave room for.
func TestDeadLetterKeepsIngressSignatureBeyondTheAttributeLimit(t *testing.T) {
	msg := plainMsg()
	sig := strings.Repeat("ab", 32)
	msg.MessageAttributes[sqsmsg.IngressSignatureAttribute] = strAttr("String", sig)
	for i := range 10 {
		msg.MessageAttributes[fmt.Sprintf("a%02d", i)] = strAttr("String", "v")
	}
	in := deadLetterInput(t, sqsmsg.SQSDeadLetter{}, msg, errors.New("bad"))
	if len(in.MessageAttributes) != 10 {
		t.Errorf("%d attributes, want SQS's limit of 10: %v", len(in.MessageAttributes), attrNames(in.MessageAttributes))
	}
	if got := attrString(in.MessageAttributes, sqsmsg.IngressSignatureAttribute); got != sig {
		t.Errorf("%s = %q, want the original %q; attributes %v", sqsmsg.IngressSignatureAttribute, got, sig, attrNames(in.MessageAttributes))
	}
	if got := attrString(in.MessageAttributes, idem.KeyAttribute); got != "key-1" {
		t.Errorf("%s = %q, want key-1", idem.KeyAttribute, got)
	}
}

// A Binary attribute without a value is one SQS would refuse: it is left out.
func TestDeadLetterLeavesOutAnEmptyBinaryAttribute(t *testing.T) {
	msg := plainMsg()
	msg.MessageAttributes["empty-nil"] = events.SQSMessageAttribute{DataType: "Binary"}
	msg.MessageAttributes["empty"] = events.SQSMessageAttribute{DataType: "Binary.raw", BinaryValue: []byte{}}
	msg.MessageAttributes["full"] = events.SQSMessageAttribute{DataType: "Binary", BinaryValue: []byte{1}}
	in := deadLetterInput(t, sqsmsg.SQSDeadLetter{}, msg, errors.New("bad"))
	for _, name := range []string{"empty-nil", "empty"} {
		if v, ok := in.MessageAttributes[name]; ok {
			t.Errorf("attribute %s copied as %+v; SQS refuses an attribute without a value", name, v)
		}
	}
	if v := in.MessageAttributes["full"]; len(v.BinaryValue) != 1 {
		t.Errorf("attribute full = %+v, want its one byte", v)
	}
}

// The reason is cut to MaxDLQReasonBytes at a rune boundary: what is kept is a prefix of
// the error text, not the text with a rune that did not fit left out of its middle.
func TestDeadLetterReasonAtMaxBytesIsAPrefixOfTheError(t *testing.T) {
	text := strings.Repeat("a", sqsmsg.MaxDLQReasonBytes-2) + "€" + "b"
	in := deadLetterInput(t, sqsmsg.SQSDeadLetter{}, plainMsg(), errors.New(text))
	got := attrString(in.MessageAttributes, sqsmsg.DLQReasonAttribute)
	if !strings.HasPrefix(text, got) || len(got) > sqsmsg.MaxDLQReasonBytes {
		t.Fatalf("reason of %d bytes ending %q: want a prefix of the error of at most %d bytes", len(got), got[max(len(got)-8, 0):], sqsmsg.MaxDLQReasonBytes)
	}
	if want := sqsmsg.MaxDLQReasonBytes - 2; len(got) != want {
		t.Errorf("reason of %d bytes, want the %d before the rune that crosses the limit", len(got), want)
	}
}

// Every character SQS accepts in an attribute value (#x9 | #xA | #xD | #x20 to #xD7FF |
// #xE000 to #xFFFD | #x10000 to #x10FFFF) is kept in the reason, the ends of each
// range included; the characters just outside become U+FFFD.
func TestDeadLetterReasonKeepsEveryCharacterSQSAccepts(t *testing.T) {
	allowed := "\t\n\r \uD7FF\uE000\uFFFD\U00010000\U0001F600\U0010FFFF"
	in := deadLetterInput(t, sqsmsg.SQSDeadLetter{}, plainMsg(), errors.New(allowed))
	if got := attrString(in.MessageAttributes, sqsmsg.DLQReasonAttribute); got != allowed {
		t.Errorf("reason = %+q, want %+q unchanged", got, allowed)
	}
	refused := "\x1f\uFFFE\uFFFF"
	in = deadLetterInput(t, sqsmsg.SQSDeadLetter{}, plainMsg(), errors.New(refused))
	if got, want := attrString(in.MessageAttributes, sqsmsg.DLQReasonAttribute), strings.Repeat("\uFFFD", 3); got != want {
		t.Errorf("reason = %+q, want %+q", got, want)
	}
}

// On a FIFO dead-letter queue the deduplication id is "dlq-" and the source message id
// when that is all ASCII letters, digits and punctuation: '!' and '~', the ends of
// that range, included.
func TestDeadLetterDeduplicationIDKeepsIDsWithPunctuationAtTheRangeEnds(t *testing.T) {
	for _, id := range []string{"!m-1", "m-1~", "!~"} {
		msg := plainMsg()
		msg.MessageId = id
		in := deadLetterInput(t, sqsmsg.SQSDeadLetter{QueueURL: "https://sqs.us-east-1.amazonaws.com/000000000000/dlq.fifo"}, msg, errors.New("bad"))
		if got, want := aws.ToString(in.MessageDeduplicationId), "dlq-"+id; got != want {
			t.Errorf("message %q: MessageDeduplicationId = %q, want %q", id, got, want)
		}
	}
	msg := plainMsg()
	msg.MessageId = "m 1"
	in := deadLetterInput(t, sqsmsg.SQSDeadLetter{QueueURL: "https://sqs.us-east-1.amazonaws.com/000000000000/dlq.fifo"}, msg, errors.New("bad"))
	if got := aws.ToString(in.MessageDeduplicationId); got == "dlq-m 1" || !strings.HasPrefix(got, "dlq-") || len(got) > 128 {
		t.Errorf("message %q: MessageDeduplicationId = %q, want dlq- and a hash (a space is not allowed)", msg.MessageId, got)
	}
}

// When only the reason can give way, it is cut by what the message is over the limit,
// no more: the other dlq-* attributes all stay, and the message is at the limit but for
// the mark and a rune boundary.
func TestDeadLetterReasonCutByTheExcessKeepsTheOtherAttributes(t *testing.T) {
	text := strings.Repeat("x", sqsmsg.MaxDLQReasonBytes)
	d := sqsmsg.SQSDeadLetter{Source: "consumer"}
	full := deadLetterInput(t, d, plainMsg(), errors.New(text))
	const excess = 100
	d.MaxMessageBytes = sqsSize(full) - excess
	in := deadLetterInput(t, d, plainMsg(), errors.New(text))
	for name := range full.MessageAttributes {
		if _, ok := in.MessageAttributes[name]; !ok {
			t.Errorf("attribute %s dropped, though cutting the reason by %d bytes was enough", name, excess)
		}
	}
	got := attrString(in.MessageAttributes, sqsmsg.DLQReasonAttribute)
	if !strings.HasSuffix(got, "…") || !strings.HasPrefix(text, strings.TrimSuffix(got, "…")) {
		t.Errorf("reason %q: want a prefix of the error ending in …", got)
	}
	if n := sqsSize(in); n > d.MaxMessageBytes || n < d.MaxMessageBytes-len("…") {
		t.Errorf("message of %d bytes, want at most the limit of %d and no more than the mark below it", n, d.MaxMessageBytes)
	}
}

// A reason no longer than MinDLQReasonBytes is not cut: the dlq-* attributes give way
// instead.
func TestDeadLetterReasonOfAtMostTheMinimumIsNotCut(t *testing.T) {
	for _, n := range []int{sqsmsg.MinDLQReasonBytes, sqsmsg.MinDLQReasonBytes / 2} {
		text := strings.Repeat("r", n)
		d := sqsmsg.SQSDeadLetter{Source: "consumer"}
		full := deadLetterInput(t, d, plainMsg(), errors.New(text))
		d.MaxMessageBytes = sqsSize(full) - 1
		in := deadLetterInput(t, d, plainMsg(), errors.New(text))
		if got := attrString(in.MessageAttributes, sqsmsg.DLQReasonAttribute); got != text {
			t.Errorf("reason of %d bytes became %q, want it whole", n, got)
		}
		if _, ok := in.MessageAttributes[sqsmsg.DLQSourceAttribute]; ok {
			t.Errorf("reason of %d bytes: %s kept, but the message is over the limit with it", n, sqsmsg.DLQSourceAttribute)
		}
		if sz := sqsSize(in); sz > d.MaxMessageBytes {
			t.Errorf("reason of %d bytes: message of %d bytes, limit %d", n, sz, d.MaxMessageBytes)
		}
	}
}

// When the attributes a dead letter must keep leave no room for a byte of the body, the
// error gives the body's size and those attributes' size as SQS counts them (name, data
// type and value): the key, the reason, the source message id and the mark of a cut body.
func TestDeadLetterTooLargeErrorGivesBodyAndKeySizes(t *testing.T) {
	msg := plainMsg()
	msg.Body = strings.Repeat("b", 2000)
	d := sqsmsg.SQSDeadLetter{API: &captureSender{}, QueueURL: "https://sqs.us-east-1.amazonaws.com/000000000000/dlq", MaxMessageBytes: 100}
	err := d.DeadLetter(context.Background(), msg, errors.New("bad"))
	if err == nil {
		t.Fatal("DeadLetter = nil, want an error: the key and the reason leave no room for the body")
	}
	m := regexp.MustCompile(`body \((\d+) bytes\) beside the attributes the dead letter must keep \((\d+) bytes: (\S+),`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("error %q does not give the sizes", err)
	}
	body, _ := strconv.Atoi(m[1])
	kept, _ := strconv.Atoi(m[2])
	mark := "2000 bytes, sha256 " + strings.Repeat("0", 64)
	wantKept := len(idem.KeyAttribute) + len("String") + len("key-1") + len(sqsmsg.DLQReasonAttribute) + len("String") + len("bad") +
		len(sqsmsg.DLQSourceMessageIDAttribute) + len("String") + len(msg.MessageId) + len(sqsmsg.DLQBodyCutAttribute) + len("String") + len(mark)
	if body != len(msg.Body) || m[3] != idem.KeyAttribute || kept != wantKept {
		t.Errorf("error %q: want body %d bytes and kept attributes %d bytes", err, len(msg.Body), wantKept)
	}
}

// sqsSize is the size of a SendMessage request as SQS counts it against the queue's
// maximum message size: the body plus each attribute's name, data type and value.
// Written here apart from the package's own count, so the tests check it.
func sqsSize(in *sqs.SendMessageInput) int {
	n := len(aws.ToString(in.MessageBody))
	for name, v := range in.MessageAttributes {
		n += sqsAttrSize(name, v)
	}
	return n
}

func sqsAttrSize(name string, v types.MessageAttributeValue) int {
	return len(name) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
}

// sizeLimitedSQS refuses, as SQS does, a message larger than limit counting its
// attributes, and passes the others on. moto 5.2.1 checks a queue's
// MaximumMessageSize against the body alone, so the tests against moto put this in
// front of the real client to hold the dead-letterer to AWS's rule.
type sizeLimitedSQS struct {
	next  sqsmsg.SQSSender
	limit int
	sent  []*sqs.SendMessageInput
}

func (s *sizeLimitedSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if n := sqsSize(in); n > s.limit {
		return nil, fmt.Errorf("InvalidParameterValue: message of %d bytes with its attributes, the queue allows %d", n, s.limit)
	}
	s.sent = append(s.sent, in)
	return s.next.SendMessage(ctx, in, optFns...)
}

// bigMsg is a message with a body of bodyBytes and nine original attributes besides
// the key, of which the first four in name order are copied (SQS allows 10
// attributes): amount, blob, kind and trace-0, of 300 bytes.
func bigMsg(bodyBytes int) events.SQSMessage {
	msg := poisonMsg()
	msg.Body = strings.Repeat("b", bodyBytes)
	for i := range 6 {
		msg.MessageAttributes[fmt.Sprintf("trace-%d", i)] = strAttr("String", strings.Repeat(strconv.Itoa(i), 300))
	}
	return msg
}

// longCause gives a reason longer than MaxDLQReasonBytes, of 1-, 2- and 3-byte runes,
// so the cuts fall inside runes.
var longCause = idem.Permanent(errors.New("validate p-1: " + strings.Repeat("aé€", 200)))

// dropOrder is the order in which SQSDeadLetter gives up content to fit the limit, for
// bigMsg: the copied originals last in name order first, then the reason is cut
// ("reason-cut"), then the optional dlq-* attributes, then the body is cut ("body-cut"),
// the reason and the source message id kept.
func dropOrder(msg events.SQSMessage) []string {
	var originals []string
	for name := range msg.MessageAttributes {
		if name != idem.KeyAttribute {
			originals = append(originals, name)
		}
	}
	slices.Sort(originals)
	originals = originals[:10-5-1] // 10 attributes: 5 dlq-*, the key, 4 others
	slices.Reverse(originals)
	return append(originals, "reason-cut", sqsmsg.DLQSourceAttribute, sqsmsg.DLQFailedAtAttribute,
		sqsmsg.DLQSourceQueueAttribute, "body-cut")
}

// TestSQSDeadLetterSizeLimitSweep dead-letters one message under every limit from its
// full size down to where the attributes a dead letter keeps leave no room for its
// body, and checks each result: within the limit, the key untouched, the body whole or
// cut to the longest prefix that fits (with its mark), what is given up is a prefix of
// dropOrder, no more is given up than needed, and a clear error below.
func TestSQSDeadLetterSizeLimitSweep(t *testing.T) {
	msg := bigMsg(300)
	full := &captureSender{}
	base := sqsmsg.SQSDeadLetter{API: full, QueueURL: "http://q/dlq.fifo", Source: "consumer-fn", Clock: func() time.Time { return fixedNow }}
	if err := base.DeadLetter(context.Background(), msg, longCause); err != nil {
		t.Fatalf("DeadLetter with the default limit: %v", err)
	}
	fullAttrs := full.in.MessageAttributes
	fullSize := sqsSize(full.in)
	fullReason := attrString(fullAttrs, sqsmsg.DLQReasonAttribute)
	if len(fullAttrs) != 10 || len(fullReason) < sqsmsg.MaxDLQReasonBytes-utf8.UTFMax {
		t.Fatalf("the default limit trimmed a %d-byte message: %d attributes, reason of %d bytes", fullSize, len(fullAttrs), len(fullReason))
	}
	order := dropOrder(msg)
	lastDropped := map[string]int{} // item of order -> how many limits ended on it

	floor := 0 // the first limit that leaves no room for the body
	for limit := fullSize; floor == 0 || limit >= floor-2; limit-- {
		api := &captureSender{}
		dl := base
		dl.API, dl.MaxMessageBytes = api, limit
		err := dl.DeadLetter(context.Background(), msg, longCause)
		if err != nil && floor == 0 {
			floor = limit
		}
		if floor != 0 {
			if err == nil || !strings.Contains(err.Error(), "no room for the body") || !strings.Contains(err.Error(), fmt.Sprintf("limit of %d bytes", limit)) {
				t.Fatalf("limit %d below %d: error %v, want one saying the kept attributes leave no room for the body", limit, floor, err)
			}
			if api.in != nil {
				t.Fatalf("limit %d: sent a message although it cannot fit", limit)
			}
			continue
		}
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		in := api.in
		a := in.MessageAttributes
		size := sqsSize(in)
		if size > limit {
			t.Fatalf("limit %d: message is %d bytes", limit, size)
		}
		body := aws.ToString(in.MessageBody)
		_, bodyCut := a[sqsmsg.DLQBodyCutAttribute]
		if attrString(a, idem.KeyAttribute) != "key-9" || (body != msg.Body) != bodyCut || !strings.HasPrefix(msg.Body, body) || body == "" {
			t.Fatalf("limit %d: key changed, or body of %d bytes (cut %v) not the message's or a prefix of it", limit, len(body), bodyCut)
		}
		if bodyCut && limit-size >= utf8.UTFMax {
			t.Fatalf("limit %d: body cut to %d bytes leaves %d bytes unused", limit, len(body), limit-size)
		}
		reason, hasReason := a[sqsmsg.DLQReasonAttribute]
		gone := func(item string) bool {
			switch item {
			case "reason-cut":
				return !hasReason || aws.ToString(reason.StringValue) != fullReason
			case "body-cut":
				return bodyCut
			}
			_, ok := a[item]
			return !ok
		}
		n := 0 // items given up: must be order[:n]
		for n < len(order) && gone(order[n]) {
			n++
		}
		for _, item := range order[n:] {
			if gone(item) {
				t.Fatalf("limit %d: %s given up before %s: %v", limit, item, order[n], attrNames(a))
			}
			if item != "reason-cut" && item != "body-cut" && !attrEqual(a[item], fullAttrs[item]) {
				t.Fatalf("limit %d: kept attribute %s changed: %+v", limit, item, a[item])
			}
		}
		if hasReason {
			r := aws.ToString(reason.StringValue)
			if r != fullReason {
				cut, ok := strings.CutSuffix(r, "…")
				if !ok || !strings.HasPrefix(fullReason, cut) || !utf8.ValidString(r) {
					t.Fatalf("limit %d: reason %q is not a rune-boundary cut of the full reason ending in …", limit, r)
				}
				if len(r) > sqsmsg.MinDLQReasonBytes && n > slices.Index(order, sqsmsg.DLQSourceAttribute) {
					t.Fatalf("limit %d: dlq-* attributes dropped while the reason is %d bytes, above the minimum", limit, len(r))
				}
				if len(r) <= sqsmsg.MinDLQReasonBytes-utf8.UTFMax {
					t.Fatalf("limit %d: reason cut to %d bytes, below the minimum %d", limit, len(r), sqsmsg.MinDLQReasonBytes)
				}
				// A cut above the minimum is the longest that fits, but for the rest of
				// the rune at the cut.
				if len(r) > sqsmsg.MinDLQReasonBytes && limit-size >= utf8.UTFMax {
					t.Fatalf("limit %d: reason cut to %d bytes leaves %d bytes unused", limit, len(r), limit-size)
				}
			}
		}
		if n == 0 {
			continue
		}
		last := order[n-1]
		lastDropped[last]++
		// The last attribute dropped could not have stayed.
		if last != "reason-cut" && last != "body-cut" && size+sqsAttrSize(last, fullAttrs[last]) <= limit {
			t.Fatalf("limit %d: %s dropped although it fits (%d + %d bytes)", limit, last, size, sqsAttrSize(last, fullAttrs[last]))
		}
	}
	for _, item := range order {
		if lastDropped[item] == 0 {
			t.Errorf("no limit between %d and %d gave up %s last: the sweep does not reach that step", fullSize, floor, item)
		}
	}
}

// attrNames lists the names of a, sorted.
func attrNames(a map[string]types.MessageAttributeValue) []string {
	out := make([]string, 0, len(a))
	for name := range a {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func attrEqual(a, b types.MessageAttributeValue) bool {
	return aws.ToString(a.DataType) == aws.ToString(b.DataType) && aws.ToString(a.StringValue) == aws.ToString(b.StringValue) &&
		string(a.BinaryValue) == string(b.BinaryValue)
}

// TestSQSDeadLetterSizeLimitSteps spells out the first steps of the sweep above.
func TestSQSDeadLetterSizeLimitSteps(t *testing.T) {
	msg := bigMsg(300)
	send := func(t *testing.T, limit int) *sqs.SendMessageInput {
		t.Helper()
		api := &captureSender{}
		dl := sqsmsg.SQSDeadLetter{API: api, QueueURL: "http://q/dlq", Source: "fn", Clock: func() time.Time { return fixedNow }, MaxMessageBytes: limit}
		if err := dl.DeadLetter(context.Background(), msg, longCause); err != nil {
			t.Fatalf("DeadLetter(limit %d): %v", limit, err)
		}
		return api.in
	}
	full := send(t, 0)
	size := sqsSize(full)
	names := func(in *sqs.SendMessageInput) []string { return attrNames(in.MessageAttributes) }
	// Kept originals in name order: amount, blob, kind, trace-0.
	if got := names(send(t, size)); !slices.Equal(got, names(full)) {
		t.Errorf("at its exact size: attributes %v, want all of %v", got, names(full))
	}
	if got := names(send(t, size-1)); slices.Contains(got, "trace-0") || !slices.Contains(got, "kind") {
		t.Errorf("one byte over: attributes %v, want trace-0 (last in name order) dropped, kind kept", got)
	}
	noOriginals := size
	for _, name := range []string{"amount", "blob", "kind", "trace-0"} {
		noOriginals -= sqsAttrSize(name, full.MessageAttributes[name])
	}
	in := send(t, noOriginals)
	if got, want := names(in), []string{sqsmsg.DLQFailedAtAttribute, sqsmsg.DLQReasonAttribute, sqsmsg.DLQSourceAttribute,
		sqsmsg.DLQSourceMessageIDAttribute, sqsmsg.DLQSourceQueueAttribute, idem.KeyAttribute}; !slices.Equal(got, want) {
		t.Errorf("without room for originals: attributes %v, want %v", got, want)
	}
	if attrString(in.MessageAttributes, sqsmsg.DLQReasonAttribute) != attrString(full.MessageAttributes, sqsmsg.DLQReasonAttribute) {
		t.Error("reason cut while dropping originals was enough")
	}
	r := attrString(send(t, noOriginals-100).MessageAttributes, sqsmsg.DLQReasonAttribute)
	if !strings.HasSuffix(r, "…") || len(r) > len(attrString(full.MessageAttributes, sqsmsg.DLQReasonAttribute))-100 {
		t.Errorf("100 bytes short: reason of %d bytes %q, want it cut by 100 bytes and ending in …", len(r), r)
	}
}

func TestSQSDeadLetterMaxMessageBytesInvalid(t *testing.T) {
	api := &captureSender{}
	dl := &sqsmsg.SQSDeadLetter{API: api, QueueURL: "http://q/dlq", MaxMessageBytes: -1}
	err := dl.DeadLetter(context.Background(), poisonMsg(), errors.New("x"))
	if err == nil || !strings.Contains(err.Error(), "MaxMessageBytes is negative") || api.in != nil {
		t.Errorf("negative MaxMessageBytes: error %v, sent %v", err, api.in != nil)
	}
}

// receiveOne reads (and deletes) the one message of the queue at url, with its
// attributes.
func receiveOne(t *testing.T, api *sqs.Client, url string) types.Message {
	t.Helper()
	msgs, err := awstest.Drain(context.Background(), api, url)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

func maxMessageSize(t *testing.T, api *sqs.Client, url string) int {
	t.Helper()
	out, err := api.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: &url, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMaximumMessageSize},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameMaximumMessageSize)])
	if err != nil {
		t.Fatalf("MaximumMessageSize: %v", err)
	}
	return n
}

// TestSQSDeadLetterNearMaxSizeQueue dead-letters, through the SDK to a queue of the
// default size, a message 512 bytes under SQS's maximum with nine original attributes:
// the copied originals and the dlq-* attributes would take it over the limit. It
// arrives with its body whole, its key and its reason.
func TestSQSDeadLetterNearMaxSizeQueue(t *testing.T) {
	ctx := context.Background()
	api := awstest.SQS(t)
	url := awstest.Queue(ctx, t, api, "dlq-max", nil)
	limit := maxMessageSize(t, api, url)
	if limit != sqsmsg.MaxSQSMessageBytes {
		t.Fatalf("queue MaximumMessageSize = %d, want the default %d", limit, sqsmsg.MaxSQSMessageBytes)
	}
	msg := bigMsg(limit - 512)
	cause := idem.Permanent(errors.New("validate p-1: amount_cents is not a number"))
	untrimmed := &captureSender{}
	unlimited := &sqsmsg.SQSDeadLetter{API: untrimmed, QueueURL: url, Source: "consumer", MaxMessageBytes: 1 << 30}
	if err := unlimited.DeadLetter(ctx, msg, cause); err != nil {
		t.Fatalf("DeadLetter to a fake: %v", err)
	}
	if n := sqsSize(untrimmed.in); n <= limit {
		t.Fatalf("with all its attributes the dead-letter copy is %d bytes, within %d: the test tests nothing", n, limit)
	}

	sender := &sizeLimitedSQS{next: api, limit: limit}
	dl := &sqsmsg.SQSDeadLetter{API: sender, QueueURL: url, Source: "consumer"}
	if err := dl.DeadLetter(ctx, msg, cause); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	got := receiveOne(t, api, url)
	if body := aws.ToString(got.Body); body != msg.Body {
		t.Fatalf("body of %d bytes came back as %d bytes, or changed", len(msg.Body), len(body))
	}
	a := got.MessageAttributes
	if r := attrString(a, sqsmsg.DLQReasonAttribute); r != cause.Error() {
		t.Errorf("dlq-reason = %q, want %q", r, cause.Error())
	}
	for _, name := range []string{sqsmsg.DLQSourceMessageIDAttribute, sqsmsg.DLQSourceQueueAttribute, sqsmsg.DLQFailedAtAttribute, sqsmsg.DLQSourceAttribute} {
		if _, ok := a[name]; !ok {
			t.Errorf("%s dropped although 512 bytes were free for the key and the dlq-* attributes", name)
		}
	}
	if key, err := idem.MessageKey(events.SQSMessage{MessageAttributes: lambdaAttrs(a)}, ""); err != nil || key != "key-9" {
		t.Errorf("MessageKey of the dead-lettered message = %q, %v", key, err)
	}
	if n := sqsSize(&sqs.SendMessageInput{MessageBody: got.Body, MessageAttributes: a}); n > limit {
		t.Errorf("received message is %d bytes, over %d", n, limit)
	}
	if _, ok := a["trace-0"]; ok || attrString(a, "amount") != "12.5" {
		t.Errorf("attributes %v: want trace-0 (last original in name order, 313 bytes) dropped and amount kept", attrNames(a))
	}
}

// TestSQSDeadLetterSmallQueue dead-letters to a queue whose MaximumMessageSize is
// 1,024 bytes, the least SQS allows, a 700-byte message with a reason of 1 KiB: the
// reason is cut, the body arrives whole.
func TestSQSDeadLetterSmallQueue(t *testing.T) {
	ctx := context.Background()
	api := awstest.SQS(t)
	url := awstest.Queue(ctx, t, api, "dlq-small", map[string]string{"MaximumMessageSize": "1024"})
	limit := maxMessageSize(t, api, url)
	if limit != 1024 {
		t.Fatalf("queue MaximumMessageSize = %d, want 1024", limit)
	}
	// moto enforces the queue's limit, on the body (not on the attributes).
	if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(strings.Repeat("x", limit+1))}); err == nil {
		t.Fatal("a body over the queue's MaximumMessageSize was accepted: the endpoint does not enforce it")
	}

	msg := bigMsg(700)
	sender := &sizeLimitedSQS{next: api, limit: limit}
	dl := &sqsmsg.SQSDeadLetter{API: sender, QueueURL: url, Source: "consumer", MaxMessageBytes: limit}
	if err := dl.DeadLetter(ctx, msg, longCause); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	got := receiveOne(t, api, url)
	if aws.ToString(got.Body) != msg.Body {
		t.Errorf("body = %q, want the original", aws.ToString(got.Body))
	}
	a := got.MessageAttributes
	r := attrString(a, sqsmsg.DLQReasonAttribute)
	if cut, ok := strings.CutSuffix(r, "…"); !ok || !strings.HasPrefix(longCause.Error(), cut) || len(r) <= sqsmsg.MinDLQReasonBytes-utf8.UTFMax {
		t.Errorf("dlq-reason = %q (%d bytes), want the cause cut to about %d bytes and ending in …", r, len(r), sqsmsg.MinDLQReasonBytes)
	}
	if attrString(a, sqsmsg.DLQSourceMessageIDAttribute) != msg.MessageId || attrString(a, idem.KeyAttribute) != "key-9" {
		t.Errorf("dlq-source-message-id or key missing: %v", attrNames(a))
	}
	if n := sqsSize(&sqs.SendMessageInput{MessageBody: got.Body, MessageAttributes: a}); n > limit {
		t.Errorf("received message is %d bytes, over %d", n, limit)
	}

	// A body that fills the queue's limit leaves no room for the key and the reason: the
	// body is cut to what fits, with its length and SHA-256, and the dead letter keeps
	// its key and its reason.
	whole := bigMsg(limit)
	if err := dl.DeadLetter(ctx, whole, longCause); err != nil {
		t.Fatalf("DeadLetter of a %d-byte body to a %d-byte queue: %v", limit, limit, err)
	}
	got = receiveOne(t, api, url)
	a = got.MessageAttributes
	if body := aws.ToString(got.Body); body == "" || !strings.HasPrefix(whole.Body, body) || attrString(a, sqsmsg.DLQBodyCutAttribute) == "" ||
		attrString(a, idem.KeyAttribute) != "key-9" || attrString(a, sqsmsg.DLQReasonAttribute) == "" {
		t.Errorf("dead letter of a body at the limit: body of %d bytes, attributes %v; want its first bytes, the cut's mark, key and reason", len(body), attrNames(a))
	}
	if n := sqsSize(&sqs.SendMessageInput{MessageBody: got.Body, MessageAttributes: a}); n > limit {
		t.Errorf("received message is %d bytes, over %d", n, limit)
	}
}
