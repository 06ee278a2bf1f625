package idem

import (
	"bytes"
	"compress/gzip"
	"errors"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// gzipSize is the size of b compressed by gzip at the default level, as encodeBlob
// compresses.
func gzipSize(t *testing.T, b []byte) int {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Len()
}

// A response is stored compressed only when that pays: when gzip makes it no smaller
// (here exactly as large), it is stored raw, with no encoding.
func TestStoredResponseCompressedOnlyWhenSmaller(t *testing.T) {
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	noise := make([]byte, persistence.CompressAbove+100)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	var tie []byte
	for zeros := 0; zeros < 2000 && tie == nil; zeros++ {
		d := append(append([]byte{}, noise...), make([]byte, zeros)...)
		if gzipSize(t, d) == len(d) {
			tie = d
		}
	}
	if tie == nil {
		t.Fatal("found no response that gzip leaves the same size")
	}
	data, enc, err := persistence.EncodeResponse(tie)
	if err != nil {
		t.Fatal(err)
	}
	if enc != "" || !bytes.Equal(data, tie) {
		t.Errorf("response of %d bytes, %d gzipped: stored %d bytes with encoding %q, want it raw", len(tie), len(tie), len(data), enc)
	}
	// More zeros compress to fewer bytes than the raw size: then gzip pays.
	smaller := append(tie, make([]byte, 64)...)
	if data, enc, err = persistence.EncodeResponse(smaller); err != nil || enc != "gzip" || len(data) >= len(smaller) {
		t.Errorf("response of %d bytes: stored %d bytes with encoding %q (%v), want gzip and fewer bytes", len(smaller), len(data), enc, err)
	}
}

// randomText is n bytes of text that gzip cannot shrink much.
func randomText(seed byte, n int) string {
	r := rand.New(rand.NewChaCha8([32]byte{seed}))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// A response and an outbox that each fit but together exceed MaxStoredResponse are
// refused with ErrResponseTooLarge, the error giving their combined stored size.
func TestMarshalRefusesResponseAndOutboxTogetherTooLarge(t *testing.T) {
	resp := []byte(randomText(1, 280*1024))
	outbox := []persistence.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/000000000000/out", Body: randomText(2, 280*1024)}}
	respData, _, err := persistence.EncodeResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	outData, _, err := persistence.EncodeOutbox(outbox)
	if err != nil {
		t.Fatal(err)
	}
	stored := len(respData) + len(outData)
	if stored <= persistence.MaxStoredResponse {
		t.Fatalf("test data too small: %d bytes stored together", stored)
	}
	_, err = persistence.MarshalRecord(&persistence.Record{Key: "k", Status: persistence.StatusCompleted, Response: resp, Outbox: outbox})
	if !errors.Is(err, persistence.ErrResponseTooLarge) {
		t.Fatalf("marshalRecord = %v, want ErrResponseTooLarge", err)
	}
	m := regexp.MustCompile(`are (-?\d+) bytes stored`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("error %q does not give the stored size", err)
	}
	if n, _ := strconv.Atoi(m[1]); n != stored {
		t.Errorf("error %q: want the combined stored size %d", err, stored)
	}
}

// A number attribute that is not an integer makes the item undecodable, the error
// naming the attribute.
func TestUnmarshalRefusesANonIntegerNumberNamingTheAttribute(t *testing.T) {
	for _, attr := range []string{persistence.AttrAttempt, persistence.AttrLeaseUntil, persistence.AttrExpiresAt} {
		for _, bad := range []string{"1.5", "1e3", "99999999999999999999"} {
			item, err := persistence.MarshalRecord(&persistence.Record{Key: "k", Status: persistence.StatusCompleted, Attempt: 1})
			if err != nil {
				t.Fatal(err)
			}
			item[attr] = &types.AttributeValueMemberN{Value: bad}
			r, err := persistence.UnmarshalRecord(item)
			if err == nil || !strings.Contains(err.Error(), "attribute "+attr) {
				t.Errorf("%s = %s: unmarshalRecord = %+v, %v; want an error naming %s", attr, bad, r, err, attr)
			}
		}
	}
}

// An item that is not a record of the table is refused with an error saying what a
// record's key looks like: the partition key with the prefix for a table without a
// sort key, the static partition key and the sort key with the prefix otherwise.
func TestUnmarshalForeignItemErrorDescribesTheKey(t *testing.T) {
	single, err := persistence.Layout{Table: "t1", PartitionKey: "id", KeyPrefix: "rec#"}.Schema()
	if err != nil {
		t.Fatal(err)
	}
	composite, err := persistence.Layout{Table: "t2", PartitionKey: "p", SortKey: "s", StaticPartitionKey: "idem", KeyPrefix: "rec#"}.Schema()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		s    *persistence.Schema
		item map[string]types.AttributeValue
		want string
	}{
		{single, map[string]types.AttributeValue{"id": persistence.AvS("other#1")}, `its key is not id = "rec#" + record key`},
		{composite, map[string]types.AttributeValue{"p": persistence.AvS("other"), "s": persistence.AvS("rec#1")}, `its key is not p = "idem", s = "rec#" + record key`},
	}
	for _, tt := range tests {
		_, err := tt.s.Unmarshal(tt.item)
		if err == nil || !strings.Contains(err.Error(), "table "+tt.s.Table) || !strings.HasSuffix(err.Error(), tt.want) {
			t.Errorf("table %s: unmarshal = %v, want an error ending %q", tt.s.Table, err, tt.want)
		}
	}
}
