package idem_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

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
