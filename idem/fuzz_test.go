package idem_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/canonjson"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// The fuzz targets below run their seeds (f.Add and testdata/fuzz/<Name>/) as ordinary
// tests in `go test`; `make fuzz` explores beyond them. They make no AWS calls.

// validScope mirrors the rules idem.New applies to Config.Scope: RecordKey itself does
// not check the scope, so its length bound only holds for a scope a Client accepts.
func validScope(scope string) bool {
	return scope != "" && !strings.Contains(scope, "#") && len(scope) <= 256 && utf8.ValidString(scope)
}

func FuzzRecordKey(f *testing.F) {
	f.Add("payments", "payment:pay-1", false)
	f.Add("payments", "payment:pay-1", true)
	f.Add("payments", "", false)
	f.Add("payments", "k\xff", false)
	f.Add("payments", strings.Repeat("k", idem.MaxRawKeyBytes), false)
	f.Add("payments", strings.Repeat("é", idem.MaxRawKeyBytes), false)
	f.Add("s", "a#b#c", false)
	f.Fuzz(func(t *testing.T, scope, key string, hash bool) {
		pk, err := idem.RecordKey(scope, key, hash)
		again, err2 := idem.RecordKey(scope, key, hash)
		if pk != again || (err == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %q, %v then %q, %v", pk, err, again, err2)
		}
		if key == "" || !utf8.ValidString(key) {
			if !errors.Is(err, idem.ErrInvalidKey) || !idem.IsPermanent(err) {
				t.Fatalf("key %q: err %v, want a permanent ErrInvalidKey", key, err)
			}
			if pk != "" {
				t.Fatalf("key %q: record key %q returned with the error", key, pk)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid key %q: %v", key, err)
		}
		stored := key
		if hash || len(key) > idem.MaxRawKeyBytes {
			sum := sha256.Sum256([]byte(key))
			stored = "sha256:" + hex.EncodeToString(sum[:])
		}
		if want := scope + "#" + stored; pk != want {
			t.Fatalf("RecordKey(%q, %q, %v) = %q, want %q", scope, key, hash, pk, want)
		}
		if validScope(scope) && len(pk) >= 2048 {
			t.Fatalf("record key of %d bytes reaches DynamoDB's 2048-byte limit", len(pk))
		}
		if !utf8.ValidString(pk) && utf8.ValidString(scope) {
			t.Fatalf("record key %q is not valid UTF-8", pk)
		}
	})
}

// shuffled writes v as JSON with every object's keys in reverse order and extra white
// space: the same value as its canonical form, encoded differently.
func shuffled(buf *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Sort(sort.Reverse(sort.StringSlice(keys)))
		buf.WriteString("{ ")
		for i, k := range keys {
			if i > 0 {
				buf.WriteString(" ,\n\t")
			}
			name, err := json.Marshal(k)
			if err != nil {
				return err
			}
			buf.Write(name)
			buf.WriteString(" : ")
			if err := shuffled(buf, v[k]); err != nil {
				return err
			}
		}
		buf.WriteString(" }")
	case []any:
		buf.WriteString("[ ")
		for i, e := range v {
			if i > 0 {
				buf.WriteString(" , ")
			}
			if err := shuffled(buf, e); err != nil {
				return err
			}
		}
		buf.WriteString(" ]")
	default:
		b, err := json.Marshal(v) // json.Number is written as is
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	return nil
}

func FuzzCanonicalJSON(f *testing.F) {
	f.Add([]byte(`{"payment_id":"pay-1","account_id":"acct-1","amount_cents":1250,"currency":"EUR"}`))
	f.Add([]byte(` { "b" : [1, 2.50, {"y":null,"x":true}], "a" : "\u00e9<>&" } `))
	f.Add([]byte(`{"a":1,"a":2}`))
	f.Add([]byte(`12345678901234567890.000e-3`))
	f.Add([]byte(`"\ud800"`))
	f.Add([]byte(`{"a":1} x`))
	f.Add([]byte(``))
	f.Add([]byte(`{"a":"\udc00x","b":"\ud83d\ude00"}`))
	f.Add([]byte(`"\\ud800"`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		canon, err := canonjson.CanonicalJSON(doc)
		if errors.Is(err, idem.ErrJSONTooLarge) { // past the bounds: refused, not hashed
			if _, herr := idem.HashPayload(doc); !errors.Is(herr, idem.ErrJSONTooLarge) {
				t.Fatalf("HashPayload(%q): %v, want ErrJSONTooLarge as CanonicalJSON", doc, herr)
			}
			return
		}
		if valid := json.Valid(doc) && unambiguous(doc); (err == nil) != valid {
			t.Fatalf("CanonicalJSON(%q): err %v, but json.Valid and unambiguous is %v", doc, err, valid)
		}
		h, herr := idem.HashPayload(doc)
		if herr != nil {
			t.Fatalf("HashPayload(%q) without fields: %v", doc, herr)
		}
		if err != nil {
			// Not JSON: hashed as raw bytes.
			sum := sha256.Sum256(doc)
			if want := hex.EncodeToString(sum[:]); h != want {
				t.Fatalf("HashPayload(%q) = %s, want the raw SHA-256 %s", doc, h, want)
			}
			return
		}
		if !json.Valid(canon) {
			t.Fatalf("CanonicalJSON(%q) = %q, not valid JSON", doc, canon)
		}
		twice, err := canonjson.CanonicalJSON(canon)
		if err != nil || !bytes.Equal(twice, canon) {
			t.Fatalf("not idempotent: canon(%q) = %q, canon of that = %q (%v)", doc, canon, twice, err)
		}
		if hc, _ := idem.HashPayload(canon); hc != h {
			t.Fatalf("HashPayload(%q) = %s, HashPayload(canonical %q) = %s", doc, h, canon, hc)
		}
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("CanonicalJSON accepted %q, encoding/json does not: %v", doc, err)
		}
		var buf bytes.Buffer
		if err := shuffled(&buf, v); err != nil {
			t.Fatalf("re-encode %q: %v", doc, err)
		}
		if hs, _ := idem.HashPayload(buf.Bytes()); hs != h {
			t.Fatalf("same value, other encoding: HashPayload(%q) = %s, HashPayload(%q) = %s", doc, h, buf.Bytes(), hs)
		}
	})
}

// FuzzFingerprint: two bodies that decode differently never share a fingerprint. A
// shared fingerprint answers the second body as a retry of the first. Two bodies have one
// fingerprint only when both are JSON that CanonicalJSON takes (a refused one is hashed
// as its bytes), that decodes losslessly (unambiguous) to one value.
func FuzzFingerprint(f *testing.F) {
	// Go's decoder reads each of these pairs as one value (a lone surrogate and invalid
	// UTF-8 as U+FFFD, duplicate members as the last); other decoders do not.
	f.Add([]byte(`{"note":"\ud800"}`), []byte(`{"note":"\ufffd"}`))
	f.Add([]byte(`{"note":"\udbff"}`), []byte(`{"note":"\ufffd"}`))
	f.Add([]byte(`{"note":"\udc00"}`), []byte(`{"note":"\ud800"}`))
	f.Add([]byte("{\"note\":\"\xff\"}"), []byte(`{"note":"\ufffd"}`))
	f.Add([]byte(`{"a":1,"a":2}`), []byte(`{"a":2}`))
	f.Add([]byte(` {"b":[1, 2.50],"a":"\u00e9"} `), []byte(`{"a":"é","b":[1,2.50]}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ha, erra := idem.HashPayload(a)
		hb, errb := idem.HashPayload(b)
		if errors.Is(erra, idem.ErrJSONTooLarge) || errors.Is(errb, idem.ErrJSONTooLarge) {
			return // past the bounds: refused, no fingerprint
		}
		if erra != nil || errb != nil {
			t.Fatalf("HashPayload without fields: %v, %v", erra, errb)
		}
		if ha != hb || bytes.Equal(a, b) {
			return
		}
		if !json.Valid(a) || !json.Valid(b) || !unambiguous(a) || !unambiguous(b) {
			t.Fatalf("%q and %q share the fingerprint %s, and one of them is not unambiguous JSON", a, b, ha)
		}
		var va, vb any
		for doc, v := range map[string]*any{string(a): &va, string(b): &vb} {
			dec := json.NewDecoder(strings.NewReader(doc))
			dec.UseNumber()
			if err := dec.Decode(v); err != nil {
				t.Fatal(err)
			}
		}
		if !reflect.DeepEqual(va, vb) {
			t.Fatalf("%q and %q decode to %v and %v, and share the fingerprint %s", a, b, va, vb, ha)
		}
	})
}

// unambiguous is the test's own account of a JSON document that every decoder reads as
// one value: valid UTF-8, every U+FFFD in the decoded value written in the document (no
// escape or byte decoded to it in its place), and no object with two members of one name.
func unambiguous(doc []byte) bool {
	if !utf8.Valid(doc) {
		return false
	}
	written := 0 // U+FFFD as a character or as the escape \ufffd
	for i := 0; i < len(doc); i++ {
		switch {
		case doc[i] == '\\' && i+1 < len(doc):
			if i+5 < len(doc) && doc[i+1] == 'u' && strings.EqualFold(string(doc[i+2:i+6]), "fffd") {
				written++
			}
			i++ // the escaped character
		case bytes.HasPrefix(doc[i:], []byte("\uFFFD")):
			written++
		}
	}
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return true // not JSON: nothing decoded
	}
	return replacements(v) == written && !duplicateMembers(doc)
}

// replacements counts the U+FFFD in v's strings, keys included.
func replacements(v any) int {
	switch v := v.(type) {
	case string:
		return strings.Count(v, "\uFFFD")
	case []any:
		n := 0
		for _, e := range v {
			n += replacements(e)
		}
		return n
	case map[string]any:
		n := 0
		for k, e := range v {
			n += strings.Count(k, "\uFFFD") + replacements(e)
		}
		return n
	}
	return 0
}

// duplicateMembers reports whether an object of doc has two members whose names are equal
// under case folding (two of one name among them).
func duplicateMembers(doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	type frame struct {
		names []string // nil for an array
		name  bool     // the next token of an object is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.names != nil && top.name {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			name, _ := tok.(string)
			// Go's decoder matches a member to a field regardless of case.
			if slices.ContainsFunc(top.names, func(n string) bool { return strings.EqualFold(n, name) }) {
				return true
			}
			top.names, top.name = append(top.names, name), false
			continue
		}
		if top != nil && top.names != nil {
			top.name = true // this token is the member's value (or opens it)
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{names: []string{}, name: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'), json.Delim('}'):
			stack = stack[:len(stack)-1]
		}
	}
}

func FuzzMessageKey(f *testing.F) {
	body := `{"payment_id":"pay-1","account_id":"acct-1","amount_cents":1250,"currency":"EUR"}`
	// dataType, value, hasAttr, nilValue, dedup id, body, JSON field
	f.Add("String", "payment:pay-1", true, false, "payment:pay-1", body, "payment_id")
	f.Add("String.uuid", "k", true, false, "", "", "")
	f.Add("Number", "12", true, false, "dedup", body, "payment_id")
	f.Add("Binary", "", true, true, "", body, "payment_id")
	f.Add("String", "", true, false, "dedup", body, "payment_id")
	f.Add("", "", false, false, "", body, "payment_id")
	f.Add("", "", false, false, "", `{"payment_id":12345678901234567890}`, "payment_id")
	f.Add("", "", false, false, "", `{"payment_id":1e3}`, "payment_id")
	f.Add("", "", false, false, "", `{"payment_id":"x"} {}`, "payment_id")
	f.Add("", "", false, false, "", `null`, "payment_id")
	f.Fuzz(func(t *testing.T, dataType, value string, hasAttr, nilValue bool, dedupID, body, field string) {
		msg := events.SQSMessage{MessageId: "m-1", Body: body, Attributes: map[string]string{}}
		if dedupID != "" {
			msg.Attributes["MessageDeduplicationId"] = dedupID
		}
		if hasAttr {
			a := events.SQSMessageAttribute{DataType: dataType}
			if !nilValue {
				a.StringValue = &value
			} else {
				a.BinaryValue = []byte(value)
			}
			msg.MessageAttributes = map[string]events.SQSMessageAttribute{idem.KeyAttribute: a}
		}
		key, err := idem.MessageKey(msg, field)
		if err != nil {
			if !idem.IsPermanent(err) {
				t.Fatalf("MessageKey: error %v is not permanent", err)
			}
			if key != "" {
				t.Fatalf("MessageKey returned key %q with error %v", key, err)
			}
			return
		}
		if key == "" {
			t.Fatal("MessageKey returned an empty key and no error")
		}
		// The source order is part of the contract: a usable attribute wins, then the
		// dedup id; the body is read only when both are absent.
		switch {
		case hasAttr:
			if key != value {
				t.Fatalf("key %q, want the attribute %q", key, value)
			}
		case dedupID != "":
			if key != dedupID {
				t.Fatalf("key %q, want the dedup id %q", key, dedupID)
			}
		}
		again, err := idem.MessageKey(msg, field)
		if err != nil || again != key {
			t.Fatalf("not deterministic: %q then %q, %v", key, again, err)
		}
	})
}

// dlqSender is a fake SQS that keeps what SQSDeadLetter sends.
type dlqSender struct {
	mu   sync.Mutex
	sent []*sqs.SendMessageInput
}

func (s *dlqSender) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, in)
	return &sqs.SendMessageOutput{MessageId: aws.String(fmt.Sprint("dlq-", len(s.sent)))}, nil
}

// fuzzRecord is a valid FIFO record of the batch around the fuzzed one.
func fuzzRecord(id, group string) events.SQSMessage {
	return events.SQSMessage{
		MessageId: id,
		Body:      `{"payment_id":"` + id + `","amount_cents":100}`,
		Attributes: map[string]string{
			"MessageGroupId": group, "MessageDeduplicationId": "payment:" + id, "ApproximateReceiveCount": "1",
		},
		EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:in.fifo",
	}
}

// dedupIDChars reports whether s is what SQS accepts as a MessageDeduplicationId.
func dedupIDChars(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '!' || s[i] > '~' {
			return false
		}
	}
	return true
}

func FuzzBatchRecord(f *testing.F) {
	f.Add([]byte(`{"messageId":"m-1","body":"{\"payment_id\":\"p-1\"}","attributes":{"MessageGroupId":"g","MessageDeduplicationId":"payment:p-1"},"messageAttributes":{"idempotency-key":{"stringValue":"payment:p-1","dataType":"String"}}}`))
	f.Add([]byte(`{"messageId":"m-2","body":"not json","attributes":{"MessageGroupId":"g"}}`))
	f.Add([]byte(`{"messageId":"","body":"{}","attributes":{"MessageGroupId":"g","MessageDeduplicationId":"d"}}`))
	f.Add([]byte(`{"messageId":"m-3","body":"{}","messageAttributes":{"idempotency-key":{"binaryValue":"/w==","dataType":"Binary"}}}`))
	f.Add([]byte(`{"messageId":"before","body":"{\"payment_id\":\"before\",\"amount_cents\":1}","attributes":{"MessageGroupId":"g","MessageDeduplicationId":"payment:before"}}`))
	f.Add([]byte(`{"messageId":"m-4","body":"retry","attributes":{"MessageGroupId":"g","MessageDeduplicationId":"k"}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var msg events.SQSMessage
		if json.Unmarshal(raw, &msg) != nil {
			return
		}
		client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "fuzz", CacheSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		// The business handler: JSON objects succeed, a body "retry" fails retryably,
		// anything else is refused for good.
		business := idem.HandlerFunc(func(_ context.Context, req *idem.Request) (idem.Result, error) {
			switch {
			case string(req.Payload) == "retry":
				return idem.Result{}, errors.New("fuzz: transient")
			case !json.Valid(req.Payload) || !bytes.HasPrefix(bytes.TrimSpace(req.Payload), []byte("{")):
				return idem.Result{}, idem.Permanent(errors.New("fuzz: not a JSON object"))
			}
			return idem.Result{Response: []byte(`"ok"`)}, nil
		})
		handle, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: business, KeyField: "payment_id"})
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer // slog's handler serializes the writes of concurrent records
		sender := &dlqSender{}
		p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{
			Handle:     handle,
			DeadLetter: &sqsmsg.SQSDeadLetter{API: sender, QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/dlq.fifo"},
			Logger:     slog.New(slog.NewJSONHandler(&logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		group := msg.Attributes["MessageGroupId"]
		recs := []events.SQSMessage{
			fuzzRecord("fuzz-before", group), msg, fuzzRecord("fuzz-after", group), fuzzRecord("fuzz-other", "fuzz-other-group"),
		}
		resp, err := p.Process(context.Background(), events.SQSEvent{Records: recs})

		if (err != nil) != (msg.MessageId == "") {
			t.Fatalf("Process error %v for a record with messageId %q", err, msg.MessageId)
		}
		ids := map[string]bool{}
		for _, r := range recs {
			ids[r.MessageId] = true
		}
		seen := map[string]bool{}
		for _, fail := range resp.BatchItemFailures {
			id := fail.ItemIdentifier
			if !ids[id] || id == "" || seen[id] {
				t.Fatalf("failure %q: not a (single) id of the batch %v", id, resp.BatchItemFailures)
			}
			seen[id] = true
		}
		// The valid records must succeed unless the fuzzed record shares their message
		// id or their key, or runs beside them (no group): then one of the two may be
		// refused, in progress or as a payload mismatch, which is correct.
		key, _ := idem.MessageKey(msg, "payment_id")
		if group != "" && msg.MessageId != "fuzz-before" && seen["fuzz-before"] {
			t.Fatalf("the valid record before the fuzzed one failed: %v", resp.BatchItemFailures)
		}
		if group != "fuzz-other-group" && msg.MessageId != "fuzz-other" && key != "payment:fuzz-other" && seen["fuzz-other"] {
			t.Fatalf("a valid record of another group failed: %v", resp.BatchItemFailures)
		}
		lines := 0
		for line := range strings.Lines(logs.String()) {
			var l struct{ Msg, Level, Error string }
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if strings.Contains(l.Error, "panicked") {
				t.Fatalf("a panic was recovered: %s", l.Error)
			}
			if l.Msg == "sqs record" {
				lines++
			}
		}
		if lines != len(recs) {
			t.Fatalf("%d record log lines for %d records:\n%s", lines, len(recs), logs.String())
		}
		clash := strings.HasPrefix(key, "payment:fuzz-")
		for _, in := range sender.sent {
			// Only the fuzzed record can fail for good, unless it shares a key with a
			// valid one: then either of the two may be the payload mismatch.
			body := aws.ToString(in.MessageBody)
			if body != msg.Body && (!clash || !slices.ContainsFunc(recs, func(r events.SQSMessage) bool { return r.Body == body })) {
				t.Fatalf("dead-lettered body %q, want the fuzzed record's %q", body, msg.Body)
			}
			if len(in.MessageAttributes) > 10 {
				t.Fatalf("%d message attributes, SQS allows 10", len(in.MessageAttributes))
			}
			if aws.ToString(in.MessageGroupId) == "" || !dedupIDChars(aws.ToString(in.MessageDeduplicationId)) {
				t.Fatalf("FIFO DLQ send: group %q, dedup id %q", aws.ToString(in.MessageGroupId), aws.ToString(in.MessageDeduplicationId))
			}
			for _, name := range []string{sqsmsg.DLQReasonAttribute, sqsmsg.DLQSourceMessageIDAttribute, sqsmsg.DLQFailedAtAttribute} {
				v := aws.ToString(in.MessageAttributes[name].StringValue)
				if v == "" || len(v) > sqsmsg.MaxDLQReasonBytes || !utf8.ValidString(v) || slices.ContainsFunc([]rune(v), func(r rune) bool { return r < 0x20 && r != '\t' && r != '\n' && r != '\r' }) {
					t.Fatalf("attribute %s = %q: empty, too long or not SQS text", name, v)
				}
			}
		}
	})
}
