package sampleevents_test

import (
	"bytes"
	"crypto/md5" //nolint:gosec // the digests SQS defines
	"encoding/hex"
	"encoding/json"
	"flag"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/sampleevents"
)

var update = flag.Bool("update", false, "rewrite events/ from the generator (as `idemctl events` does)")

func str(s string) *string { return &s }

// TestAttributesMD5 compares the digest with known values: one published with the npm
// package aws-md5-of-message-attributes (computed against SQS), one from the
// repository's events/ files before they were generated, and an independent encoding
// of the algorithm of the SQS Developer Guide ("Calculating the MD5 message digest for
// message attributes").
func TestAttributesMD5(t *testing.T) {
	attr := func(dt, v string) events.SQSMessageAttribute {
		return events.SQSMessageAttribute{DataType: dt, StringValue: str(v)}
	}
	for _, tc := range []struct {
		attrs map[string]events.SQSMessageAttribute
		want  string
	}{
		{map[string]events.SQSMessageAttribute{"attribName1": attr("String", "attribValue 1")}, "19e27d4e946b072f3f58da80d94fd778"},
		{map[string]events.SQSMessageAttribute{"customNumberTypeAttrib": attr("Number.float", "4563442423554324324264524243.32543234")}, "9fe1b90bbd9965bdf77bac517c7d2495"},
		{map[string]events.SQSMessageAttribute{"binaryAttribute": {DataType: "Binary", BinaryValue: []byte("Hello binary world!")}}, "31a92b15d92f8db860eda32aceb656c3"},
		{map[string]events.SQSMessageAttribute{idem.KeyAttribute: attr("String", "payment:pay-2001")}, "aaae484aa3bd54a9291afea5c5b49078"},
	} {
		if got := sampleevents.AttributesMD5(tc.attrs); got != tc.want {
			t.Errorf("AttributesMD5(%v) = %s, want %s", tc.attrs, got, tc.want)
		}
	}

	// The algorithm spelled out byte by byte, for two attributes (sorted by name).
	var buf bytes.Buffer
	for _, a := range [][3]string{{"a-first", "String", "one"}, {"b-second", "Number", "2"}} {
		for i, part := range a {
			buf.Write([]byte{0, 0, 0, byte(len(part))})
			buf.WriteString(part)
			if i == 1 {
				buf.WriteByte(1) // string transport type
			}
		}
	}
	sum := md5.Sum(buf.Bytes()) //nolint:gosec // see import
	got := sampleevents.AttributesMD5(map[string]events.SQSMessageAttribute{"b-second": attr("Number", "2"), "a-first": attr("String", "one")})
	if want := hex.EncodeToString(sum[:]); got != want {
		t.Errorf("two attributes: %s, want %s", got, want)
	}
	if got := sampleevents.BodyMD5(`{"payment_id":"pay-2001","account_id":"acct-4004","amount_cents":1000,"currency":"EUR"}`); got != "d015d91818154fe823251f7f6842948f" {
		t.Errorf("BodyMD5: %s", got)
	}
}

// TestGenerate checks the shape of every example's samples: the events decode as
// events.SQSEvent with the digests of their contents, the same seed gives the same
// bytes and another seed other ids, and ids don't repeat between the files.
func TestGenerate(t *testing.T) {
	for _, ex := range wiring.Examples {
		t.Run(ex.Name(), func(t *testing.T) {
			exampletest.Traffic(t, ex)
			files, err := sampleevents.Render(ex, 7)
			if err != nil {
				t.Fatal(err)
			}
			again, err := sampleevents.Render(ex, 7)
			if err != nil {
				t.Fatal(err)
			}
			other, err := sampleevents.Render(ex, 8)
			if err != nil {
				t.Fatal(err)
			}
			for name, b := range files {
				if !bytes.Equal(b, again[name]) {
					t.Errorf("%s: not the same for the same seed", name)
				}
				if strings.HasPrefix(name, "sqs-") && !strings.HasSuffix(name, sampleevents.ExpectedSuffix) && bytes.Equal(b, other[name]) {
					t.Errorf("%s: the same for another seed", name)
				}
			}
			msgIDs, businessIDs := map[string]string{}, map[string]string{}
			for _, name := range []string{sampleevents.FIFOBatch, sampleevents.Duplicates, sampleevents.StandardBatch} {
				var ev events.SQSEvent
				dec := json.NewDecoder(bytes.NewReader(files[name]))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&ev); err != nil {
					t.Fatalf("%s does not decode as events.SQSEvent: %v", name, err)
				}
				exp, err := sampleevents.Decode(files[name+sampleevents.ExpectedSuffix])
				if err != nil {
					t.Fatal(err)
				}
				checkEvent(t, ex, name, ev, exp)
				for _, r := range ev.Records {
					if f, ok := msgIDs[r.MessageId]; ok {
						t.Errorf("%s: message id %s already in %s", name, r.MessageId, f)
					}
					msgIDs[r.MessageId] = name
				}
				for _, m := range exp.Prepare {
					if f, ok := businessIDs[m.ID]; ok && f != name {
						t.Errorf("%s: business id %s already in %s", name, m.ID, f)
					}
					businessIDs[m.ID] = name
				}
			}
			if !json.Valid(files[sampleevents.Scheduled]) {
				t.Error("scheduled.json is not JSON")
			}
		})
	}
}

func checkEvent(t *testing.T, ex example.Example, name string, ev events.SQSEvent, exp sampleevents.Expected) {
	t.Helper()
	fifo := name != sampleevents.StandardBatch
	want := map[string]int{sampleevents.FIFOBatch: 8, sampleevents.Duplicates: 6, sampleevents.StandardBatch: 5}[name]
	if len(ev.Records) != want {
		t.Fatalf("%s: %d records, want %d", name, len(ev.Records), want)
	}
	var prevSeq string
	var groups []string
	for i, r := range ev.Records {
		if r.Md5OfBody != sampleevents.BodyMD5(r.Body) {
			t.Errorf("%s record %d: md5OfBody", name, i)
		}
		if r.Md5OfMessageAttributes != sampleevents.AttributesMD5(r.MessageAttributes) {
			t.Errorf("%s record %d: md5OfMessageAttributes", name, i)
		}
		if r.EventSource != "aws:sqs" || r.AWSRegion != sampleevents.Region || !strings.HasPrefix(r.EventSourceARN, "arn:aws:sqs:"+sampleevents.Region+":"+sampleevents.Account+":") ||
			strings.HasSuffix(r.EventSourceARN, ".fifo") != fifo {
			t.Errorf("%s record %d: source %s %s %s", name, i, r.EventSource, r.EventSourceARN, r.AWSRegion)
		}
		for _, a := range []string{"ApproximateReceiveCount", "SentTimestamp", "ApproximateFirstReceiveTimestamp", "SenderId"} {
			if r.Attributes[a] == "" {
				t.Errorf("%s record %d: no %s", name, i, a)
			}
		}
		g, seq, dedup := r.Attributes["MessageGroupId"], r.Attributes["SequenceNumber"], r.Attributes["MessageDeduplicationId"]
		if !fifo {
			if g != "" || seq != "" || dedup != "" {
				t.Errorf("%s record %d: FIFO attributes on a standard queue", name, i)
			}
			continue
		}
		if g == "" || seq == "" || dedup == "" {
			t.Errorf("%s record %d: FIFO attributes missing: %v", name, i, r.Attributes)
		}
		if prevSeq != "" && (len(seq) < len(prevSeq) || len(seq) == len(prevSeq) && seq <= prevSeq) {
			t.Errorf("%s record %d: sequence number %s after %s", name, i, seq, prevSeq)
		}
		prevSeq = seq
		if len(groups) == 0 || groups[len(groups)-1] != g {
			if slices.Contains(groups, g) {
				t.Errorf("%s: group %s comes back after another group", name, g)
			}
			groups = append(groups, g)
		}
		if k := r.MessageAttributes[idem.KeyAttribute]; k.StringValue != nil && *k.StringValue != dedup {
			t.Errorf("%s record %d: deduplication id %s, key %s", name, i, dedup, *k.StringValue)
		}
	}
	if name == sampleevents.FIFOBatch && len(groups) != 3 {
		t.Errorf("%s: %d groups, want 3", name, len(groups))
	}
	decoded := 0
	for _, r := range ev.Records {
		if _, err := ex.Decode([]byte(r.Body)); err == nil {
			decoded++
		}
	}
	if bad := len(ev.Records) - decoded; bad != len(exp.DeadLettered) {
		t.Errorf("%s: %d records don't decode, %d dead letters expected", name, bad, len(exp.DeadLettered))
	}
	if exp.Outbound != len(exp.Applied) || exp.Example != ex.Name() {
		t.Errorf("%s: expected outcome %+v", name, exp)
	}
	checker, err := example.CheckerOf(ex)
	if err != nil {
		if exp.State != nil {
			t.Errorf("%s: a state %v, from an example without a Checker", name, exp.State)
		}
		return
	}
	st, err := checker.Expect(sampleevents.ExampleMessages(exp.Prepare), exp.AppliedMessages())
	if err != nil || len(st) == 0 {
		t.Fatalf("%s: Expect: %v %v", name, st, err)
	}
	for k, v := range st {
		if exp.State[k] != v {
			t.Errorf("%s: state %s = %d, Expect says %d", name, k, exp.State[k], v)
		}
	}
}

// TestCommittedEvents: events/ holds what the generator writes for the wired default
// example (go run ./cmd/idemctl events, or go test -run TestCommittedEvents -update).
func TestCommittedEvents(t *testing.T) {
	// events/ holds the default example's files (idemctl events writes them there), and
	// each example's own directory its own. A directory generated for an example this
	// build does not carry is not compared.
	dirs, err := filepath.Glob(filepath.Join("..", "..", "functions", "consumer", "*", "events"))
	if err != nil {
		t.Fatal(err)
	}
	dirs = append(dirs, filepath.Join("..", "..", "events"))
	if *update {
		files, err := sampleevents.Render(wiring.Default(), sampleevents.DefaultSeed)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sampleevents.Write(filepath.Join("..", "..", "events"), files); err != nil {
			t.Fatal(err)
		}
	}
	compared := 0
	for _, dir := range dirs {
		name, stale, err := sampleevents.Stale(dir, wiring.Examples)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
		}
		if name == "" {
			continue
		}
		compared++
		for _, f := range stale {
			t.Errorf("%s/%s differs from what the generator writes for %s: regenerate it with go run ./cmd/idemctl events --example %s --out %s", dir, f, name, name, dir)
		}
	}
	if compared == 0 {
		if _, err := example.TrafficOf(wiring.Default()); err != nil {
			t.Skipf("no sample events: %v", err)
		}
		t.Error("no events directory of an example of this build")
	}
}
