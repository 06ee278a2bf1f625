package idem_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/canonjson"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

func TestRecordKey(t *testing.T) {
	long := strings.Repeat("x", idem.MaxRawKeyBytes+1)
	tests := []struct {
		name, scope, key string
		hash             bool
		want             string // prefix of the result
		wantErr          error
	}{
		{"plain", "payments", "pay-1", false, "payments#pay-1", nil},
		{"exactly at the bound is kept", "s", strings.Repeat("y", idem.MaxRawKeyBytes), false, "s#yyyy", nil},
		{"over the bound is hashed", "s", long, false, "s#sha256:", nil},
		{"hash configured", "s", "pay-1", true, "s#sha256:", nil},
		{"empty", "s", "", false, "", idem.ErrInvalidKey},
		{"invalid utf-8", "s", "a\xc3", false, "", idem.ErrInvalidKey},
		{"unicode is fine", "s", "zahlung-ü-€", false, "s#zahlung-ü-€", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := idem.RecordKey(tc.scope, tc.key, tc.hash)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if !strings.HasPrefix(got, tc.want) || len(got) >= 2048 {
				t.Fatalf("got %q, want prefix %q under 2048 bytes", got, tc.want)
			}
		})
	}
	a, _ := idem.RecordKey("s", "pay-1", true)
	b, _ := idem.RecordKey("s", "pay-2", true)
	if a == b || len(a) != len("s#sha256:")+64 {
		t.Fatalf("hashed keys %q %q", a, b)
	}
}

// TestRecordKeyIsOneToOne: a raw key that looks like the hashed form of another key gets
// a record of its own (issue 26, hole 3): "sha256:<hex of a long key>" sent as a key
// must not name the long key's record.
func TestRecordKeyIsOneToOne(t *testing.T) {
	long := strings.Repeat("L", idem.MaxRawKeyBytes+1)
	hashed, err := idem.RecordKey("s", long, false)
	if err != nil {
		t.Fatal(err)
	}
	lookalike := strings.TrimPrefix(hashed, "s#")
	keys := []string{long, lookalike, "sha256:", "sha256:x", "sha256-" + lookalike[len("sha256:"):], "plain"}
	seen := map[string]string{}
	for _, hash := range []bool{false, true} {
		clear(seen)
		for _, k := range keys {
			rk, err := idem.RecordKey("s", k, hash)
			if err != nil {
				t.Fatalf("RecordKey(%.20q): %v", k, err)
			}
			if other, ok := seen[rk]; ok {
				t.Fatalf("hash=%v: keys %.80q and %.80q share the record key %q", hash, other, k, rk)
			}
			seen[rk] = k
		}
	}
	if rk, _ := idem.RecordKey("s", "sha256:abc", false); rk == "s#sha256:abc" {
		t.Fatalf("a raw key in the hashed form is kept as it is: %q", rk)
	}
}

// TestDeduplicationIDIsOneToOne: two inputs never share an SQS deduplication id (issue
// 26, hole 3). A key over 128 characters is sent as "sha256-<hex>", itself a valid
// id: sent as a key of its own, it must get another id, or SQS drops one request's
// message as the other's duplicate for 5 minutes.
func TestDeduplicationIDIsOneToOne(t *testing.T) {
	long := strings.Repeat("d", 129)
	hashed := outbox.DeduplicationID(long)
	if !strings.HasPrefix(hashed, "sha256-") || len(hashed) != len("sha256-")+64 {
		t.Fatalf("DeduplicationID(129 chars) = %q, want sha256-<hex>", hashed)
	}
	inputs := []string{long, hashed, "sha256-", "sha256-x", "sha256:" + hashed[len("sha256-"):], "pay-1", strings.Repeat("d", 128), "zahlung-ü"}
	seen := map[string]string{}
	for _, in := range inputs {
		id := outbox.DeduplicationID(in)
		if other, ok := seen[id]; ok {
			t.Fatalf("inputs %.60q and %.60q share the deduplication id %q", other, in, id)
		}
		seen[id] = in
		if len(id) == 0 || len(id) > 128 || strings.ContainsFunc(id, func(r rune) bool { return r < '!' || r > '~' }) {
			t.Fatalf("DeduplicationID(%.40q) = %q: not an id SQS accepts", in, id)
		}
	}
	for _, kept := range []string{"pay-1", strings.Repeat("d", 128), "a:b#c"} {
		if got := outbox.DeduplicationID(kept); got != kept {
			t.Errorf("DeduplicationID(%q) = %q, want it kept as it is", kept, got)
		}
	}
}

// TestCheckScope: a scope of up to 256 bytes of UTF-8 without '#' is accepted, by
// CheckScope and by New; one byte more, a '#', invalid UTF-8 or none is refused. (The
// bound's edge: a mutant that refused exactly 256 bytes survived every other test.)
func TestCheckScope(t *testing.T) {
	at := strings.Repeat("s", 256)
	for _, ok := range []string{"s", at, strings.Repeat("é", 128), "orders-v2.eu"} {
		if err := idem.CheckScope(ok); err != nil {
			t.Errorf("CheckScope(%d bytes %.12q): %v, want nil", len(ok), ok, err)
		}
		if _, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: ok}); err != nil {
			t.Errorf("New with the scope %.12q (%d bytes): %v", ok, len(ok), err)
		}
	}
	for _, bad := range []string{"", at + "s", strings.Repeat("é", 128) + "s", "a#b", "a\xc3"} {
		if err := idem.CheckScope(bad); err == nil {
			t.Errorf("CheckScope(%d bytes %.12q) = nil, want an error", len(bad), bad)
		}
		if _, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: bad}); err == nil {
			t.Errorf("New with the scope %.12q (%d bytes) succeeded", bad, len(bad))
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	s := memstore.NewMemoryStore()
	for name, cfg := range map[string]idem.Config{
		"no store":       {Scope: "s"},
		"no scope":       {Store: s},
		"scope with #":   {Store: s, Scope: "a#b"},
		"negative TTL":   {Store: s, Scope: "s", TTL: -1},
		"too many shard": {Store: s, Scope: "s", Shards: 5000},
		"1001 shards":    {Store: s, Scope: "s", Shards: 1001},
		"negative shard": {Store: s, Scope: "s", Shards: -1},
		"negative cache": {Store: s, Scope: "s", CacheSize: -1},
		"negative grace": {Store: s, Scope: "s", LeaseGrace: -1},
		"negative max":   {Store: s, Scope: "s", MaxLease: -1},
		"negative lease": {Store: s, Scope: "s", DefaultLease: -1},
		"no such mode":   {Store: s, Scope: "s", Mode: idem.Mode(7)},
	} {
		if _, err := idem.New(cfg); err == nil || !strings.HasPrefix(err.Error(), "idem: ") {
			t.Errorf("%s: err = %v, want an idem: error", name, err)
		}
	}
	// The bounds themselves are accepted.
	if _, err := idem.New(idem.Config{Store: s, Scope: "s", Shards: 1000}); err != nil {
		t.Errorf("1000 shards: %v", err)
	}
}

// TestDefaultShards: a Config without Shards spreads its leases over the in-flight
// index's 4 default shards, where the reaper's default of 4 lists them.
func TestDefaultShards(t *testing.T) {
	ctx := context.Background()
	mem := memstore.NewMemoryStore()
	c, err := idem.New(idem.Config{Store: mem, Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	shards := map[string]int{}
	for i := range 40 {
		_, err := c.Do(ctx, &idem.Request{Key: fmt.Sprint("key-", i), Payload: []byte(`{}`)}, func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			rec, err := mem.Get(ctx, r.Attempt.RecordKey(), time.Now())
			if err != nil {
				return idem.Result{}, err
			}
			shards[rec.Inflight]++
			return idem.Result{Response: []byte("ok")}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(shards) != 4 || shards["0"] == 0 || shards["1"] == 0 || shards["2"] == 0 || shards["3"] == 0 {
		t.Errorf("leases by shard %v, want all of shards 0 to 3", shards)
	}
}

// TestPayloadFieldsAreCopied: New keeps its own copy of Config.PayloadFields, so a
// caller that reuses its slice does not change which fields a key's payload is.
func TestPayloadFieldsAreCopied(t *testing.T) {
	ctx := context.Background()
	fields := []string{"amount"}
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "s", PayloadFields: fields})
	if err != nil {
		t.Fatal(err)
	}
	fields[0] = "note"
	ok := func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte("ok")}, nil
	}
	if _, err := c.Do(ctx, &idem.Request{Key: "k", Payload: []byte(`{"amount":1,"note":"a"}`)}, ok); err != nil {
		t.Fatal(err)
	}
	res, err := c.Do(ctx, &idem.Request{Key: "k", Payload: []byte(`{"amount":1,"note":"b"}`)}, ok)
	if err != nil || !res.Replayed {
		t.Errorf("the same amount with another note: %+v, %v; want a replay (only amount is the payload)", res, err)
	}
}

// TestDoRefusesAnInvalidKeyOrPayload: an empty key, or one that is not UTF-8, is
// refused with ErrInvalidKey; with PayloadFields, a payload that is not a JSON object
// (its fields cannot be read) is refused for good; both before any record is written
// or the handler runs.
func TestDoRefusesAnInvalidKeyOrPayload(t *testing.T) {
	mem := memstore.NewMemoryStore()
	c, err := idem.New(idem.Config{Store: mem, Scope: "s", PayloadFields: []string{"amount"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ key, payload string }{{"", `{"amount":1}`}, {"a\xffb", `{"amount":1}`}, {"k", `not JSON`}, {"k", `[1]`}} {
		ran := false
		_, err := c.Do(context.Background(), &idem.Request{Key: r.key, Payload: []byte(r.payload)}, func(context.Context, *idem.Request) (idem.Result, error) {
			ran = true
			return idem.Result{}, nil
		})
		badKey := r.key != "k"
		if err == nil || errors.Is(err, idem.ErrInvalidKey) != badKey || !badKey && !idem.IsPermanent(err) || ran || mem.Len() != 0 {
			t.Errorf("key %q, payload %s: %v, handler ran %v, %d records; want it refused (ErrInvalidKey for the key) and nothing done", r.key, r.payload, err, ran, mem.Len())
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
		fields         []string
		wantErr        bool
	}{
		{"sorted keys", `{"b":1,"a":2}`, `{"a":2,"b":1}`, nil, false},
		{"nested and spaces", ` { "z" : { "y":[1, 2.50, "x"], "a":null } } `, `{"z":{"a":null,"y":[1,2.50,"x"]}}`, nil, false},
		{"numbers kept exactly", `{"n":12345678901234567890}`, `{"n":12345678901234567890}`, nil, false},
		{"html not escaped", `{"s":"<a&b>"}`, `{"s":"<a&b>"}`, nil, false},
		{"fields", `{"id":"p1","amount":5,"trace":"t-1"}`, `{"amount":5,"id":"p1"}`, []string{"id", "amount"}, false},
		{"fields need an object", `[1,2]`, "", []string{"id"}, true},
		{"invalid", `{"a":`, "", nil, true},
		{"trailing data", `{"a":1} {"b":2}`, "", nil, true},
		{"stray closing brace", `{"a":1}}`, "", nil, true}, // found by FuzzCanonicalJSON
		{"stray closing bracket", `""]`, "", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := canonjson.CanonicalJSON([]byte(tc.in), tc.fields...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && string(got) != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestHashPayload(t *testing.T) {
	h := func(p string, f ...string) string {
		t.Helper()
		s, err := idem.HashPayload([]byte(p), f...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if h(`{"a":1,"b":2}`) != h(`{"b":2, "a":1}`) {
		t.Error("equivalent JSON hashes differ")
	}
	if h(`{"a":1}`) == h(`{"a":2}`) {
		t.Error("different JSON hashes equal")
	}
	if h(`not json`) == h(`not json!`) || len(h(`not json`)) != 64 {
		t.Error("raw payload hashing broken")
	}
	if h(`{"id":1,"ts":"x"}`, "id") != h(`{"ts":"y","id":1}`, "id") {
		t.Error("field-limited hashes differ on an ignored field")
	}
	if _, err := idem.HashPayload([]byte(`nope`), "id"); err == nil {
		t.Error("field-limited hash of non-JSON succeeded")
	}
}

func TestIsPermanent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{idem.Permanent(errors.New("x")), true},
		{errors.Join(errors.New("ctx"), idem.ErrPayloadMismatch), true},
		{idem.ErrInvalidKey, true},
		{fmt.Errorf("complete: %w", &idem.WriteConditionError{Index: 0, Reason: "currency"}), true},
		{&idem.StoredError{Key: "k", Message: "m"}, true},
		{idem.ErrInProgress, false},
		{idem.ErrLeaseLost, false},
		{errors.New("timeout"), false},
		{nil, false},
	} {
		if got := idem.IsPermanent(tc.err); got != tc.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if idem.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
}

// TestAmbiguousBodiesHaveTheirOwnFingerprints (issue 28, finding 5): bodies that decode
// to one value only by losing what tells them apart (a lone surrogate and U+FFFD,
// invalid UTF-8 and U+FFFD, two members of one name and the last) never share a
// fingerprint: the second would be answered as a retry of the first.
func TestAmbiguousBodiesHaveTheirOwnFingerprints(t *testing.T) {
	for _, pair := range [][2]string{
		{`{"note":"\ud800"}`, `{"note":"\ufffd"}`},
		{`{"note":"\udbff"}`, `{"note":"\ufffd"}`},
		{`{"note":"\udc00"}`, `{"note":"\ufffd"}`},
		{`{"note":"\udfff"}`, `{"note":"\ufffd"}`},
		// Every bound of the hex digits, in both cases.
		{`{"note":"\ud809"}`, `{"note":"\ufffd"}`},
		{`{"note":"\uda0a"}`, `{"note":"\ufffd"}`},
		{`{"note":"\uDA0F"}`, `{"note":"\ufffd"}`},
		{`{"note":"\uDbAf"}`, `{"note":"\ufffd"}`},
		{`{"note":"\ud900"}`, `{"note":"\ufffd"}`},
		{`{"note":"\ud800x"}`, `{"note":"\ufffdx"}`},
		{`{"note":"\ud800xudc00"}`, `{"note":"\ufffdxudc00"}`},
		{`{"note":"\ud800\n"}`, `{"note":"\ufffd\n"}`},
		{`{"note":"\ud800\\u0041"}`, `{"note":"\ufffd\\u0041"}`},
		{`{"note":"\ud800\udbff"}`, `{"note":"\ufffd\ufffd"}`},
		{`{"note":"\udbff\ue000"}`, `{"note":"\ufffd\ue000"}`},
		{`{"note":"\ud800\u0041"}`, `{"note":"\ufffdA"}`},
		{"{\"note\":\"\xff\"}", `{"note":"\ufffd"}`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		// After an odd number of characters of its string, and after a member: the
		// escape is found wherever it starts.
		{`{"note":"x\ud800"}`, `{"note":"x\ufffd"}`},
		{`{"n":1,"note":"xyz\udc00"}`, `{"n":1,"note":"xyz\ufffd"}`},
	} {
		a, err := idem.HashPayload([]byte(pair[0]))
		if err != nil {
			t.Fatal(err)
		}
		b, err := idem.HashPayload([]byte(pair[1]))
		if err != nil {
			t.Fatal(err)
		}
		if a == b {
			t.Errorf("%q and %q share the fingerprint %s", pair[0], pair[1], a)
		}
		if _, err := canonjson.CanonicalJSON([]byte(pair[0])); !errors.Is(err, idem.ErrAmbiguousJSON) {
			t.Errorf("CanonicalJSON(%q): %v, want ErrAmbiguousJSON", pair[0], err)
		}
	}
	// An escaped backslash followed by "ud800" is text, not an escape: kept, wherever
	// it starts.
	for _, doc := range []string{`{"note":"\\ud800"}`, `{"note":"a\\ud800"}`, `{"note":"ab\\udc00"}`} {
		if _, err := canonjson.CanonicalJSON([]byte(doc)); err != nil {
			t.Errorf("CanonicalJSON(%s): %v, want it kept", doc, err)
		}
	}
	// The error says where the surrogate is.
	if _, err := canonjson.CanonicalJSON([]byte(`{"n":"\udc00"}`)); err == nil || !strings.Contains(err.Error(), "at byte 6") {
		t.Errorf("a lone low surrogate at byte 6: %v", err)
	}
	if _, err := canonjson.CanonicalJSON([]byte(`{"n":"\ud800"}`)); err == nil || !strings.Contains(err.Error(), "at byte 6") {
		t.Errorf("a lone high surrogate at byte 6: %v", err)
	}
	if _, err := canonjson.CanonicalJSON([]byte(`{"n":"\ud800\u0041"}`)); err == nil || !strings.Contains(err.Error(), "at byte 6") {
		t.Errorf("a high surrogate followed by another escape at byte 6: %v", err)
	}
	// A document cut inside an escape is an error, not a read past its end.
	for _, doc := range []string{`"\`, `{"note":"x\`, `{"note":"\u`, `{"note":"\ud8`, `"\ud800`, `"\ud800\`, `"\ud800\u`, `"\ud800\udc0`} {
		if _, err := canonjson.CanonicalJSON([]byte(doc)); err == nil {
			t.Errorf("CanonicalJSON(%s): no error", doc)
		}
	}
	// A surrogate pair is a character: kept, at the bounds of both halves too.
	if c, err := canonjson.CanonicalJSON([]byte(`"\ud83d\ude00"`)); err != nil || string(c) != `"😀"` {
		t.Errorf("a surrogate pair: %q, %v", c, err)
	}
	for _, pair := range []string{`"\ud800\udc00"`, `"\udbff\udfff"`} {
		if _, err := canonjson.CanonicalJSON([]byte(pair)); err != nil {
			t.Errorf("the surrogate pair %s: %v", pair, err)
		}
	}
}

// TestCanonicalJSONRefusesCutAndNestedAmbiguousDocuments: a document cut before an
// object or an array closes is refused, not closed for it; two members of one name are
// refused at any depth, inside an object or an array; an escape cut at the very end of
// a slice whose capacity ends there is refused without reading past it.
func TestCanonicalJSONRefusesCutAndNestedAmbiguousDocuments(t *testing.T) {
	for _, doc := range []string{`{"a":1`, `[1`, `{"a":[1,2]`, `[{"a":1}`} {
		if got, err := canonjson.CanonicalJSON([]byte(doc)); err == nil {
			t.Errorf("CanonicalJSON(%s) = %s, want an error (the document is cut)", doc, got)
		}
	}
	for _, doc := range []string{`{"a":{"b":1,"b":"c"}}`, `[{"b":1,"b":"c"}]`, `[{"b":1,"b":"c"}`, `{"x":[{"b":1,"b":2}]}`} {
		if got, err := canonjson.CanonicalJSON([]byte(doc)); !errors.Is(err, idem.ErrAmbiguousJSON) {
			t.Errorf("CanonicalJSON(%s) = %s, %v; want ErrAmbiguousJSON", doc, got, err)
		}
	}
	for n := range 4 { // "\u and 0 to 3 digits, at the end of the slice's capacity
		doc := append(make([]byte, 0, 3+n), `"\u`...)
		doc = append(doc, "123"[:n]...)
		if got, err := canonjson.CanonicalJSON(doc); err == nil {
			t.Errorf("CanonicalJSON(%q) = %s, want an error", doc, got)
		}
	}
}

// TestCanonicalJSONBadEscapeIsNotAmbiguous: a \u escape whose digits are not all hex is
// not read as a character: the document is refused by the decoder as invalid, not as
// ambiguous, even when the digits before the bad one would begin a surrogate.
func TestCanonicalJSONBadEscapeIsNotAmbiguous(t *testing.T) {
	for _, doc := range []string{`{"a":"\uDC0g"}`, `["\uDBFz"]`, `"\uD8x0"`} {
		_, err := canonjson.CanonicalJSON([]byte(doc))
		if err == nil || errors.Is(err, idem.ErrAmbiguousJSON) {
			t.Errorf("%s: %v, want the decoder's refusal, not ErrAmbiguousJSON", doc, err)
		}
	}
}

// TestCanonicalJSONErrorsNameTheirCause: a lone surrogate whose four digits end the
// document is found (ErrAmbiguousJSON), though the document is cut after it; a member
// name that is not a string is the decoder's syntax error, with its offset.
func TestCanonicalJSONErrorsNameTheirCause(t *testing.T) {
	if _, err := canonjson.CanonicalJSON([]byte(`"\udc00`)); !errors.Is(err, idem.ErrAmbiguousJSON) {
		t.Errorf("a lone surrogate at the end: %v, want ErrAmbiguousJSON", err)
	}
	var syntax *json.SyntaxError
	if _, err := canonjson.CanonicalJSON([]byte(`{1:2}`)); !errors.As(err, &syntax) {
		t.Errorf("a member name that is a number: %v, want the decoder's *json.SyntaxError", err)
	}
}

// TestMembersDifferingInCaseHaveTheirOwnFingerprints (issue 38, finding 7): Go's decoder
// matches a member to a struct field regardless of case and keeps the last, so these two
// bodies are payments of 1 and of 100 000 cents. CanonicalJSON refuses an object with two
// member names equal under case folding (ErrAmbiguousJSON, Go's own folding: the Kelvin
// sign is a k); each body is fingerprinted as its bytes, and the second, under the first's
// key, is a payload mismatch, not a replay.
func TestMembersDifferingInCaseHaveTheirOwnFingerprints(t *testing.T) {
	a := `{"payment_id":"p-1","amount_cents":100000,"AMOUNT_CENTS":1}`
	b := `{"payment_id":"p-1","AMOUNT_CENTS":1,"amount_cents":100000}`
	for _, doc := range []string{a, b, `{"x":[{"Key":1,"kEY":2}]}`, "{\"k\":1,\"\u212a\":2}"} {
		_, err := canonjson.CanonicalJSON([]byte(doc))
		if !errors.Is(err, idem.ErrAmbiguousJSON) || !strings.Contains(err.Error(), "differ only in case") {
			t.Errorf("CanonicalJSON(%s): %v, want ErrAmbiguousJSON (names that differ only in case)", doc, err)
		}
	}
	ha, erra := idem.HashPayload([]byte(a))
	hb, errb := idem.HashPayload([]byte(b))
	if erra != nil || errb != nil || ha == hb {
		t.Errorf("fingerprints %s, %s (%v, %v): want two", ha, hb, erra, errb)
	}
	c := newClient(t)
	ok := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte("ok")}, nil
	})
	if _, err := c.Do(context.Background(), &idem.Request{Key: "k-1", Payload: []byte(a)}, ok); err != nil {
		t.Fatal(err)
	}
	res, err := c.Do(context.Background(), &idem.Request{Key: "k-1", Payload: []byte(b)}, ok)
	if !errors.Is(err, idem.ErrPayloadMismatch) || res.Replayed {
		t.Errorf("the second body under the first's key: %+v, %v; want ErrPayloadMismatch", res, err)
	}
	// Names that fold to different letters are kept.
	if _, err := canonjson.CanonicalJSON([]byte(`{"a":1,"b":2,"ab":3,"A_":4}`)); err != nil {
		t.Errorf("distinct names: %v", err)
	}
}

// TestCallerScope: the caller's part of a CallerKey, and nothing of any other key, one
// that merely starts like one included.
func TestCallerScope(t *testing.T) {
	k := idem.CallerKey("arn:aws:iam::111122223333:role/alice", "pay~1")
	if got := idem.CallerScope(k); got == "" || !strings.HasPrefix(k, got) || strings.TrimPrefix(k, got) != "pay~1" {
		t.Errorf("CallerScope(%q) = %q, want all but the client's key", k, got)
	}
	for _, key := range []string{"pay-1", "", idem.CallerKeyPrefix, idem.CallerKeyPrefix + "short~x", idem.CallerKeyPrefix + strings.Repeat("a", 33)} {
		if got := idem.CallerScope(key); got != "" {
			t.Errorf("CallerScope(%q) = %q, want \"\"", key, got)
		}
	}
}

// TestCallerKeyIsOneToOne: two (namespace, key) pairs never share a caller key, nor,
// through it, a record key or a deduplication id; the pair is read back from the key
// (the tag has a fixed length); and a caller key of the ingress's longest key stays
// within DynamoDB's and SQS's limits.
func TestCallerKeyIsOneToOne(t *testing.T) {
	namespaces := []string{"shared", "caller:arn:aws:iam::111122223333:user/a", "caller:arn:aws:iam::111122223333:user/a~b",
		"caller:arn:aws:sts::111122223333:assumed-role/R", "account:111122223333", "account:11112222333", "", "~", "caller:x~y"}
	keys := []string{"k", "~k", "k~", "a~b", "order:1234", strings.Repeat("k", 255), "sha256-" + strings.Repeat("0", 64), idem.CallerKeyPrefix + "x"}
	seen, records, dedups := map[string]string{}, map[string]string{}, map[string]string{}
	for _, ns := range namespaces {
		for _, k := range keys {
			pair := fmt.Sprintf("(%q, %.20q)", ns, k)
			ck := idem.CallerKey(ns, k)
			if other, ok := seen[ck]; ok {
				t.Fatalf("%s and %s share the caller key %q", other, pair, ck)
			}
			seen[ck] = pair
			// Read back: prefix, 32 hex digits of the namespace's SHA-256, "~", the key.
			rest, ok := strings.CutPrefix(ck, idem.CallerKeyPrefix)
			sum := sha256.Sum256([]byte(ns))
			if !ok || len(rest) < 33 || rest[:32] != hex.EncodeToString(sum[:])[:32] || rest[32] != '~' || rest[33:] != k {
				t.Fatalf("CallerKey%s = %q: not prefix, tag, ~, key", pair, ck)
			}
			rk, err := idem.RecordKey("payments", ck, false)
			if err != nil || !strings.HasSuffix(rk, ck) || len(rk) > 2048 {
				t.Fatalf("RecordKey of %q = %q, %v: want it kept as it is, within DynamoDB's 2048 bytes", ck, rk, err)
			}
			if other, ok := records[rk]; ok {
				t.Fatalf("%s and %s share the record key %q", other, pair, rk)
			}
			records[rk] = pair
			id := outbox.DeduplicationID(ck)
			if len(id) == 0 || len(id) > 128 {
				t.Fatalf("DeduplicationID(%q) = %q: not an SQS id", ck, id)
			}
			if other, ok := dedups[id]; ok {
				t.Fatalf("%s and %s share the deduplication id %q", other, pair, id)
			}
			dedups[id] = pair
		}
	}
	if n := len(idem.CallerKey("caller:arn:aws:iam::111122223333:user/a", strings.Repeat("k", 255))); n > 255+38 {
		t.Errorf("a caller key of a 255-character key is %d bytes, want at most %d", n, 255+38)
	}
}

// TestForgedKeyIsRefused: a key of the HTTP callers' namespace is taken only from a
// message the ingress signed, whatever the key's source (attribute, deduplication id,
// body field); a producer's message that claims one is refused for good, so it cannot
// take a key an HTTP caller will use. Other keys are untouched.
func TestForgedKeyIsRefused(t *testing.T) {
	keys := testKeys(t)
	ck := idem.CallerKey("caller:arn:aws:iam::111122223333:user/victim", "payment:pay-1")
	body := `{"payment_id":"` + ck + `","amount_cents":1}`
	signed := func(key, body, signedBody string) events.SQSMessage {
		return events.SQSMessage{MessageId: "m", Body: body, MessageAttributes: map[string]events.SQSMessageAttribute{
			idem.KeyAttribute:                {DataType: "String", StringValue: aws.String(key)},
			sqsmsg.IngressSignatureAttribute: {DataType: "String", StringValue: aws.String(keys.SignIngress(key, signedBody))},
		}}
	}
	rule := idem.KeyRule{Source: idem.KeyFromMessage, Field: "payment_id", Keys: keys}
	if k, err := rule.Key(signed(ck, body, body)); err != nil || k != ck {
		t.Fatalf("the ingress's message: key %q, %v", k, err)
	}
	forged := map[string]events.SQSMessage{
		"attribute, unsigned":       keyedMsg("m", ck, body),
		"attribute, another's body": signed(ck, `{"amount_cents":999}`, body),
		"attribute, a bad signature": func() events.SQSMessage {
			m := signed(ck, body, body)
			m.MessageAttributes[sqsmsg.IngressSignatureAttribute] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String(strings.Repeat("0", 64))}
			return m
		}(),
		"deduplication id": {MessageId: "m", Body: body, Attributes: map[string]string{"MessageDeduplicationId": ck}},
		"body field":       {MessageId: "m", Body: body},
	}
	for what, msg := range forged {
		k, err := rule.Key(msg)
		if !errors.Is(err, idem.ErrForgedKey) || !idem.IsPermanent(err) || idem.CategoryOf(err) != persistence.CategoryInvalid {
			t.Errorf("%s: key %q, %v; want a permanent ErrForgedKey", what, k, err)
		}
	}
	if _, err := rule.Key(keyedMsg("m", ck, body)); err == nil || !strings.Contains(err.Error(), "no valid "+sqsmsg.IngressSignatureAttribute) {
		t.Errorf("unsigned: %v; want the missing signature named", err)
	}
	if _, err := (idem.KeyRule{Source: idem.KeyFromMessage}).Key(signed(ck, body, body)); !errors.Is(err, idem.ErrForgedKey) || !strings.Contains(err.Error(), "no stack secret") {
		t.Errorf("without keys, the ingress's message: %v; want ErrForgedKey (nothing verifies it) saying so", err)
	}
	if _, err := (idem.KeyRule{Source: idem.KeyFromField}).Key(events.SQSMessage{MessageId: "m", Body: body}); !idem.IsPermanent(err) || !strings.Contains(err.Error(), "needs a JSON field") {
		t.Errorf("key source field without a field: %v; want the rule's problem, permanent", err)
	}
	field := idem.KeyRule{Source: idem.KeyFromField, Field: "payment_id", Keys: keys}
	if _, err := field.Key(events.SQSMessage{MessageId: "m", Body: body}); !errors.Is(err, idem.ErrForgedKey) {
		t.Errorf("key source field, a body field in the namespace: %v; want ErrForgedKey", err)
	}
	for _, k := range []string{"payment:pay-1", "http-x", "HTTP~x", "x" + idem.CallerKeyPrefix} {
		if got, err := rule.Key(keyedMsg("m", k, body)); err != nil || got != k {
			t.Errorf("a producer's own key %q: %q, %v", k, got, err)
		}
	}
}

// TestCategoryOf: the one mapping from an error to what its sender is told, through
// wrapping and the handler's public reason.
func TestCategoryOf(t *testing.T) {
	refusal := idem.Public(idem.Refuse("currency EUR does not match the account's JPY"), "the currencies differ")
	for _, c := range []struct {
		err    error
		want   persistence.Category
		public string
	}{
		{refusal, persistence.CategoryRefused, "the currencies differ"},
		{fmt.Errorf("idem: complete: %w", &idem.WriteConditionError{Index: 1, Reason: "ConditionalCheckFailed"}), persistence.CategoryRefused, ""},
		{idem.Permanent(errors.New("ledger: amount_cents: must be positive")), persistence.CategoryInvalid, ""},
		{fmt.Errorf("idem: acquire: %w", idem.ErrPayloadMismatch), persistence.CategoryInvalid, ""},
		{fmt.Errorf("idem: complete: %w: item too large", idem.ErrInvalidRequest), persistence.CategoryInvalid, ""},
		{errors.New("AccessDeniedException: User: arn:aws:sts::111122223333:assumed-role/consumer/fn is not authorized"), persistence.CategoryRetrying, ""},
		{fmt.Errorf("wrapped: %w", refusal), persistence.CategoryRefused, "the currencies differ"},
	} {
		if got := idem.CategoryOf(c.err); got != c.want {
			t.Errorf("CategoryOf(%v) = %s, want %s", c.err, got, c.want)
		}
		if got := idem.PublicReason(c.err); got != c.public {
			t.Errorf("PublicReason(%v) = %q, want %q", c.err, got, c.public)
		}
	}
	// No error has no reason to show: a handler may wrap its result unconditionally.
	if err := idem.Public(nil, "the currencies differ"); err != nil {
		t.Errorf("Public(nil, ...) = %v, want nil", err)
	}
}

// testKeys are the keys of a fixed test secret.
func testKeys(t testing.TB) *sqsmsg.Keys {
	t.Helper()
	keys, err := sqsmsg.NewKeys(bytes.Repeat([]byte("s"), sqsmsg.MinSecretBytes))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestNewKeysRefusesShortSecrets: a secret shorter than 256 bits derives nothing.
func TestNewKeysRefusesShortSecrets(t *testing.T) {
	if _, err := sqsmsg.NewKeys(bytes.Repeat([]byte("s"), sqsmsg.MinSecretBytes-1)); !errors.Is(err, sqsmsg.ErrSecret) {
		t.Fatalf("a %d-byte secret: %v, want ErrSecret", sqsmsg.MinSecretBytes-1, err)
	}
}

// TestLogHashIsKeyed: a key's log hash depends on the stack's secret, so hashing guesses
// (idem.HashKey, a plain SHA-256) does not find it; the same secret gives the same hash
// everywhere (the functions, idemctl), and no secret leaves the key out.
func TestLogHashIsKeyed(t *testing.T) {
	keys := testKeys(t)
	other, err := sqsmsg.NewKeys(bytes.Repeat([]byte("t"), sqsmsg.MinSecretBytes))
	if err != nil {
		t.Fatal(err)
	}
	again := testKeys(t)
	const key = "payment:pay-1"
	h := keys.LogHash(key)
	if len(h) != 16 || h == idem.HashKey(key) || h == other.LogHash(key) || h != again.LogHash(key) || h == keys.LogHash("payment:pay-2") {
		t.Fatalf("LogHash(%q) = %q (plain %s, other secret %s, same secret %s)", key, h, idem.HashKey(key), other.LogHash(key), again.LogHash(key))
	}
	var none *sqsmsg.Keys
	if got := none.LogHash(key); got != "" {
		t.Fatalf("nil keys hash %q, want nothing", got)
	}
}

// TestLogHashDerivation pins how the log key is derived from the secret (HMAC-SHA-256 of
// "idem/v1/log-hash") and how a value is hashed under it (its length, then its bytes):
// the functions and idemctl of two versions must give one key the same hash, and the
// log key must be a key of its own, not the ingress's or the dead letters'.
func TestLogHashDerivation(t *testing.T) {
	secret := bytes.Repeat([]byte("s"), sqsmsg.MinSecretBytes)
	mac := func(key []byte, parts ...[]byte) []byte {
		m := hmac.New(sha256.New, key)
		for _, p := range parts {
			m.Write(p)
		}
		return m.Sum(nil)
	}
	const value = "payment:pay-1"
	logKey := mac(secret, []byte("idem/v1/log-hash"))
	want := hex.EncodeToString(mac(logKey, binary.AppendUvarint(nil, uint64(len(value))), []byte(value))[:8])
	if got := testKeys(t).LogHash(value); got != want {
		t.Fatalf("LogHash(%q) = %s, want %s", value, got, want)
	}
}

// TestDeadLetterSignatureDerivation pins the dead letter's signature, as VerifyDeadLetter
// checks it: the HMAC-SHA-256 under the key of "idem/v1/dead-letter-signature" of the
// label "dead-letter", the body's SHA-256 in hex, the group, then each attribute by name
// (name, data type, string value, binary value), each field written with its length
// first. A consumer and an idemctl of two versions must agree on it.
func TestDeadLetterSignatureDerivation(t *testing.T) {
	secret := bytes.Repeat([]byte("s"), sqsmsg.MinSecretBytes)
	k := hmac.New(sha256.New, secret)
	k.Write([]byte("idem/v1/dead-letter-signature"))
	m := hmac.New(sha256.New, k.Sum(nil))
	field := func(b []byte) {
		m.Write(binary.AppendUvarint(nil, uint64(len(b))))
		m.Write(b)
	}
	const body, group = `{"payment_id":"p-1"}`, "acct-1"
	digest := sha256.Sum256([]byte(body))
	field([]byte("dead-letter"))
	field([]byte(hex.EncodeToString(digest[:])))
	field([]byte(group))
	for _, a := range [][2]string{{sqsmsg.DLQReasonAttribute, "invalid amount"}, {idem.KeyAttribute, "k-1"}} { // sorted by name
		field([]byte(a[0]))
		field([]byte("String"))
		field([]byte(a[1]))
		field(nil)
	}
	msg := types.Message{Body: aws.String(body), Attributes: map[string]string{"MessageGroupId": group}, MessageAttributes: map[string]types.MessageAttributeValue{
		sqsmsg.DLQReasonAttribute:    {DataType: aws.String("String"), StringValue: aws.String("invalid amount")},
		idem.KeyAttribute:            {DataType: aws.String("String"), StringValue: aws.String("k-1")},
		sqsmsg.DLQSignatureAttribute: {DataType: aws.String("String"), StringValue: aws.String(hex.EncodeToString(m.Sum(nil)))},
	}}
	if err := testKeys(t).VerifyDeadLetter(msg); err != nil {
		t.Fatalf("the signature made as documented does not verify: %v", err)
	}
}

// TestIngressSignature: the ingress's signature binds the key and the body under the
// stack's secret.
func TestIngressSignature(t *testing.T) {
	keys := testKeys(t)
	other, _ := sqsmsg.NewKeys(bytes.Repeat([]byte("t"), sqsmsg.MinSecretBytes))
	sig := keys.SignIngress("http~k", `{"a":1}`)
	var none *sqsmsg.Keys
	for what, ok := range map[string]bool{
		"the signed key and body": keys.VerifyIngress("http~k", `{"a":1}`, sig),
		"another key":             !keys.VerifyIngress("http~j", `{"a":1}`, sig),
		"another body":            !keys.VerifyIngress("http~k", `{"a":2}`, sig),
		"another secret's":        !other.VerifyIngress("http~k", `{"a":1}`, sig),
		"no signature":            !keys.VerifyIngress("http~k", `{"a":1}`, ""),
		"no keys":                 !none.VerifyIngress("http~k", `{"a":1}`, sig) && none.SignIngress("http~k", "b") == "",
		"no keys, no signature":   !none.VerifyIngress("http~k", `{"a":1}`, ""),
		"a split moved":           !keys.VerifyIngress("http~k{", `"a":1}`, sig),
	} {
		if !ok {
			t.Errorf("%s: verified wrongly", what)
		}
	}
}

// TestIngressDeduplicationID: the ingress's deduplication id of a key is the same on
// every resend, another key's is another, and nobody without the secret can compute it
// (a producer that sent a message under it first would have SQS drop the ingress's).
func TestIngressDeduplicationID(t *testing.T) {
	keys := testKeys(t)
	other, _ := sqsmsg.NewKeys(bytes.Repeat([]byte("t"), sqsmsg.MinSecretBytes))
	id := keys.IngressDeduplicationID("http~k")
	if id != keys.IngressDeduplicationID("http~k") || id == keys.IngressDeduplicationID("http~j") || id == other.IngressDeduplicationID("http~k") ||
		id == outbox.DeduplicationID("http~k") || len(id) > 128 || outbox.DeduplicationID(id) != id {
		t.Fatalf("IngressDeduplicationID = %q", id)
	}
	var none *sqsmsg.Keys
	if got := none.IngressDeduplicationID("http~k"); got != "" {
		t.Errorf("nil keys: %q, want none", got)
	}
}
