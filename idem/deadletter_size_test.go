package idem_test

import (
	"context"
	"errors"
	"fmt"
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

// createQueue creates a queue with a unique name on the local endpoint, deleted at the
// end of the test.
func createQueue(t *testing.T, api *sqs.Client, name string, attrs map[string]string) string {
	t.Helper()
	out, err := api.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name(t, name)), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() { _, _ = api.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &url}) })
	return url
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
	url := createQueue(t, api, "dlq-max", nil)
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
	url := createQueue(t, api, "dlq-small", map[string]string{"MaximumMessageSize": "1024"})
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
