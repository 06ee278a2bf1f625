package idem

import (
	"fmt"
	"testing"
	"time"
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
	if _, ok := nilCache.get("x", now); ok || newCache(0) != nil {
		t.Fatal("disabled cache holds entries")
	}
}

func TestCodecRoundTrip(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123).UTC()
	big := make([]byte, 5000) // zeros: compresses
	in := &Record{Key: "s#k", Status: StatusFailed, LeaseToken: "t", LeaseUntil: now, Inflight: "", ExpiresAt: now.Truncate(time.Second),
		PayloadHash: "h", Response: big, Error: "e", Retryable: true, Attempt: 3, Steps: []string{"a", "b"}, Owner: "o", CreatedAt: now, UpdatedAt: now}
	item, err := marshalRecord(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := item[attrResponseEnc]; !ok {
		t.Fatal("large response not compressed")
	}
	if _, ok := item[attrInflight]; ok {
		t.Fatal("inflight written for a record that is not in progress")
	}
	out, err := unmarshalRecord(item)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", *out) != fmt.Sprintf("%+v", *in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *out, *in)
	}
	item[attrAttempt] = avS("three")
	if _, err := unmarshalRecord(item); err == nil {
		t.Fatal("wrong attribute type accepted")
	}
}
