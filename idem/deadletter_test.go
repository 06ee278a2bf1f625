package idem_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	out, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String(awstest.Name(t, "dlq") + ".fifo"),
		// A visibility timeout of 0 (see the receive below).
		Attributes: map[string]string{"FifoQueue": "true", "VisibilityTimeout": "0"},
	})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() { _, _ = api.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &url}) })

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
	q, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(awstest.Name(t, "signed") + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(q.QueueUrl)
	t.Cleanup(func() { _, _ = api.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &url}) })
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
