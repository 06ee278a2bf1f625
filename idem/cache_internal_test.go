package idem

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

func TestCacheIsBoundedLRU(t *testing.T) {
	c := newCache(3)
	now := time.Now()
	for i := range 3 {
		c.put(cached{key: fmt.Sprint(i), response: []byte{byte(i)}})
	}
	if _, ok := c.get("0", now); !ok { // 0 becomes most recent
		t.Fatal("0 missing")
	}
	c.put(cached{key: "3"}) // evicts the least recent: 1
	if _, ok := c.get("1", now); ok {
		t.Fatal("1 survived eviction")
	}
	for _, k := range []string{"0", "2", "3"} {
		if _, ok := c.get(k, now); !ok {
			t.Fatalf("%s evicted", k)
		}
	}
	if c.len() != 3 {
		t.Fatalf("len %d", c.len())
	}
	c.put(cached{key: "old", expiresAt: now.Add(-time.Second)})
	if _, ok := c.get("old", now); ok {
		t.Fatal("expired entry served")
	}
	var nilCache *cache
	nilCache.put(cached{key: "x"})
	if _, ok := nilCache.get("x", now); ok || newCache(0) != nil || nilCache.len() != 0 {
		t.Fatal("disabled cache holds entries")
	}
}

func TestCodecRoundTrip(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123).UTC()
	big := make([]byte, 5000) // zeros: compresses
	in := &persistence.Record{Key: "s#k", Status: persistence.StatusFailed, LeaseToken: "t", LeaseUntil: now, Inflight: "", ExpiresAt: now.Truncate(time.Second),
		PayloadHash: "h", Response: big, Error: "e", Retryable: true, Attempt: 3, Steps: []string{"a", "b"}, Owner: "o", CreatedAt: now, UpdatedAt: now}
	item, err := persistence.MarshalRecord(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := item[persistence.AttrResponseEnc]; !ok {
		t.Fatal("large response not compressed")
	}
	if _, ok := item[persistence.AttrInflight]; ok {
		t.Fatal("inflight written for a record that is not in progress")
	}
	out, err := persistence.UnmarshalRecord(item)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", *out) != fmt.Sprintf("%+v", *in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *out, *in)
	}
	item[persistence.AttrAttempt] = persistence.AvS("three")
	if _, err := persistence.UnmarshalRecord(item); err == nil {
		t.Fatal("wrong attribute type accepted")
	}
}

// TestCompressionThreshold: a stored blob is compressed from compressAbove + 1 bytes on,
// and only when that makes it smaller.
func TestCompressionThreshold(t *testing.T) {
	for _, c := range []struct {
		size int
		enc  string
	}{{persistence.CompressAbove, ""}, {persistence.CompressAbove + 1, "gzip"}} {
		data, enc, err := persistence.EncodeResponse(make([]byte, c.size)) // zeros: compress well
		if err != nil || enc != c.enc {
			t.Errorf("%d bytes: encoding %q, %v; want %q", c.size, enc, err, c.enc)
		}
		back, err := persistence.DecodeResponse(data, enc)
		if err != nil || len(back) != c.size {
			t.Errorf("%d bytes: decoded %d, %v", c.size, len(back), err)
		}
	}
}

// TestCacheExpiredEntryLeavesNoGhost: an entry found expired leaves the cache whole, so
// it neither holds a place nor, evicted later, takes a fresh entry of its key with it.
func TestCacheExpiredEntryLeavesNoGhost(t *testing.T) {
	c := newCache(2)
	now := time.Now()
	c.put(cached{key: "k", expiresAt: now.Add(-time.Second)})
	if _, ok := c.get("k", now); ok {
		t.Fatal("expired entry served")
	}
	if c.len() != 0 {
		t.Fatalf("%d entries after the only one expired", c.len())
	}
	c.put(cached{key: "a"})
	c.put(cached{key: "k", response: []byte("fresh")})
	if c.len() != 2 {
		t.Errorf("%d entries in the LRU order after two puts, want 2: an entry outside it is never evicted", c.len())
	}
	for _, key := range []string{"a", "k"} {
		if _, ok := c.get(key, now); !ok {
			t.Errorf("%s missing from a cache of 2 holding 2", key)
		}
	}
}

// TestCachePutOfACachedKeyReplacesIt: a second put of a key replaces its entry in place,
// so the cache holds each key once and evicts no fresh entry for an old one.
func TestCachePutOfACachedKeyReplacesIt(t *testing.T) {
	c := newCache(2)
	now := time.Now()
	c.put(cached{key: "a", response: []byte("1")})
	c.put(cached{key: "a", response: []byte("2")})
	c.put(cached{key: "b"})
	if c.len() != 2 {
		t.Errorf("%d entries for 2 keys", c.len())
	}
	if e, ok := c.get("a", now); !ok || string(e.response) != "2" {
		t.Errorf("a: %+v, %v; want the second put's", e, ok)
	}
	if _, ok := c.get("b", now); !ok {
		t.Error("b missing")
	}
	// The put made a the most recent: c evicts the least recent, b.
	c = newCache(2)
	c.put(cached{key: "a"})
	c.put(cached{key: "b"})
	c.put(cached{key: "a"})
	c.put(cached{key: "c"})
	if _, ok := c.get("a", now); !ok {
		t.Error("a, put again after b, was evicted before b")
	}
	if _, ok := c.get("b", now); ok {
		t.Error("b, the least recent, was kept")
	}
}

// TestDecodeRefusesACorruptResponse: a stored response that says gzip and is not is an
// error, not a panic.
func TestDecodeRefusesACorruptResponse(t *testing.T) {
	if _, err := persistence.DecodeResponse([]byte("not gzip"), "gzip"); err == nil {
		t.Error("corrupt gzip decoded")
	}
}

// TestDecodeRefusesACorruptOutbox: a stored outbox that is not the JSON of messages is
// an error, not an outbox with nothing to send.
func TestDecodeRefusesACorruptOutbox(t *testing.T) {
	data, enc, err := persistence.EncodeOutbox([]persistence.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/q", Body: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if msgs, err := persistence.DecodeOutbox(data, enc); err != nil || len(msgs) != 1 || msgs[0].Body != "b" {
		t.Fatalf("a stored outbox: %+v, %v", msgs, err)
	}
	for what, c := range map[string]struct {
		data []byte
		enc  string
	}{"not JSON": {[]byte("not JSON"), ""}, "not gzip": {[]byte("not gzip"), "gzip"}} {
		if msgs, err := persistence.DecodeOutbox(c.data, c.enc); err == nil {
			t.Errorf("an outbox %s: %+v, want an error", what, msgs)
		}
	}
}

// TestDecodeBoundsAndChecksAResponse: a stored response decompresses to at most
// maxResponseBytes (one that would be larger is refused, not cut short), and a
// compressed response whose data is damaged is refused.
func TestDecodeBoundsAndChecksAResponse(t *testing.T) {
	gz := func(n int) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	if out, err := persistence.DecodeResponse(gz(persistence.MaxResponseBytes), "gzip"); err != nil || len(out) != persistence.MaxResponseBytes {
		t.Errorf("exactly the bound: %d bytes, %v", len(out), err)
	}
	if out, err := persistence.DecodeResponse(gz(persistence.MaxResponseBytes+1), "gzip"); err == nil {
		t.Errorf("one byte over the bound: %d bytes decoded, want an error", len(out))
	}
	damaged := gz(1000)
	damaged[len(damaged)-8] ^= 0xff // the CRC-32 of the data
	if out, err := persistence.DecodeResponse(damaged, "gzip"); err == nil {
		t.Errorf("a damaged response decoded (%d bytes)", len(out))
	}
}
