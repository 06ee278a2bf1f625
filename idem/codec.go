package idem

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute names of the record (see the README's record schema).
const (
	attrPK          = "pk"
	attrStatus      = "status"
	attrLeaseToken  = "lease_token"
	attrLeaseUntil  = "lease_until"
	attrInflight    = "inflight"
	attrExpiresAt   = "expires_at"
	attrPayloadHash = "payload_hash"
	attrResponse    = "response"
	attrResponseEnc = "response_enc"
	attrError       = "error"
	attrRetryable   = "retryable"
	attrAttempt     = "attempt"
	attrSteps       = "steps"
	attrOwner       = "owner"
	attrOutbox      = "outbox"
	attrOutboxEnc   = "outbox_enc"
	attrSent        = "sent"
	attrOutboxDead  = "outbox_dead"
	attrOutboxGroup = "outbox_group"
	// attrGuardHash is the payload fingerprint the middleware adds to guard Puts.
	attrGuardHash = "idem_payload_hash"
	attrCreatedAt = "created_at"
	attrUpdatedAt = "updated_at"
)

// Response storage bounds. DynamoDB items are limited to 400 KB including attribute
// names; a response is refused well before that so the rest of the record always fits.
const (
	// MaxStoredResponse is the largest response, after compression, a record holds.
	MaxStoredResponse = 350 * 1024
	// compressAbove is the size from which a response is gzip-compressed.
	compressAbove = 1024
	// maxResponseBytes bounds the decompressed size read back, against gzip bombs.
	maxResponseBytes = 16 << 20
)

// encodeResponse returns the stored form of a response: gzip when that pays, refused
// with ErrResponseTooLarge when it would not fit in the item.
func encodeResponse(resp []byte) (data []byte, enc string, err error) {
	return encodeBlob(resp, "response")
}

// encodeBlob compresses a stored attribute (a response, an outbox) when that pays and
// refuses it with ErrResponseTooLarge when it would not fit in the item.
func encodeBlob(resp []byte, what string) (data []byte, enc string, err error) {
	data = resp
	if len(resp) > compressAbove {
		var buf bytes.Buffer
		zw := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(zw)
		zw.Reset(&buf)
		if _, err := zw.Write(resp); err != nil {
			return nil, "", fmt.Errorf("idem: compress %s: %w", what, err)
		}
		if err := zw.Close(); err != nil {
			return nil, "", fmt.Errorf("idem: compress %s: %w", what, err)
		}
		if buf.Len() < len(resp) {
			data, enc = buf.Bytes(), "gzip"
		}
	}
	if len(data) > MaxStoredResponse {
		return nil, "", fmt.Errorf("%w: %s of %d bytes stored (%d raw), limit %d", ErrResponseTooLarge, what, len(data), len(resp), MaxStoredResponse)
	}
	return data, enc, nil
}

// gzipWriters keeps gzip writers between records: a new one allocates about 800 KB,
// more than the work of compressing a response or an outbox.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

func decodeResponse(data []byte, enc string) ([]byte, error) {
	switch enc {
	case "":
		return data, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("idem: decompress response: %w", err)
		}
		out, err := io.ReadAll(io.LimitReader(zr, maxResponseBytes+1))
		if err != nil {
			return nil, fmt.Errorf("idem: decompress response: %w", err)
		}
		if len(out) > maxResponseBytes {
			return nil, fmt.Errorf("idem: decompress response: larger than %d bytes", maxResponseBytes)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("idem: unknown response encoding %q", enc)
	}
}

func avS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func avN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func avBool(b bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: b} }

// marshalRecord encodes a record for PutItem. Empty optional attributes are left out:
// DynamoDB rejects empty sets, and inflight must be absent unless IN_PROGRESS.
func marshalRecord(r *Record) (map[string]types.AttributeValue, error) {
	item := map[string]types.AttributeValue{
		attrPK:         avS(r.Key),
		attrStatus:     avS(string(r.Status)),
		attrLeaseToken: avS(r.LeaseToken),
		attrLeaseUntil: avN(epochMillis(r.LeaseUntil)),
		attrAttempt:    avN(int64(r.Attempt)),
		attrCreatedAt:  avN(epochMillis(r.CreatedAt)),
		attrUpdatedAt:  avN(epochMillis(r.UpdatedAt)),
	}
	if r.Inflight != "" {
		item[attrInflight] = avS(r.Inflight)
	}
	if !r.ExpiresAt.IsZero() {
		item[attrExpiresAt] = avN(r.ExpiresAt.Unix())
	}
	if r.PayloadHash != "" {
		item[attrPayloadHash] = avS(r.PayloadHash)
	}
	if r.Owner != "" {
		item[attrOwner] = avS(r.Owner)
	}
	if len(r.Response) > 0 {
		data, enc, err := encodeResponse(r.Response)
		if err != nil {
			return nil, err
		}
		item[attrResponse] = &types.AttributeValueMemberB{Value: data}
		if enc != "" {
			item[attrResponseEnc] = avS(enc)
		}
	}
	if r.Error != "" {
		item[attrError] = avS(r.Error)
		item[attrRetryable] = avBool(r.Retryable)
	}
	if len(r.Steps) > 0 {
		item[attrSteps] = &types.AttributeValueMemberSS{Value: r.Steps}
	}
	if len(r.Outbox) > 0 {
		data, enc, err := encodeOutbox(r.Outbox)
		if err != nil {
			return nil, err
		}
		if resp, ok := item[attrResponse].(*types.AttributeValueMemberB); ok && len(resp.Value)+len(data) > MaxStoredResponse {
			return nil, fmt.Errorf("%w: response and outbox are %d bytes stored, limit %d", ErrResponseTooLarge, len(resp.Value)+len(data), MaxStoredResponse)
		}
		item[attrOutbox] = &types.AttributeValueMemberB{Value: data}
		if enc != "" {
			item[attrOutboxEnc] = avS(enc)
		}
		if r.OutboxGroup != "" {
			item[attrOutboxGroup] = avS(r.OutboxGroup)
		}
	}
	return item, nil
}

// unmarshalRecord decodes an item; attributes of the wrong type are an error, missing
// optional ones are zero.
func unmarshalRecord(item map[string]types.AttributeValue) (*Record, error) {
	r := &Record{}
	var err error
	str := func(name string) string {
		if err != nil {
			return ""
		}
		v, ok := item[name]
		if !ok {
			return ""
		}
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			err = fmt.Errorf("idem: attribute %s: want S, got %T", name, v)
			return ""
		}
		return s.Value
	}
	num := func(name string) int64 {
		if err != nil {
			return 0
		}
		v, ok := item[name]
		if !ok {
			return 0
		}
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			err = fmt.Errorf("idem: attribute %s: want N, got %T", name, v)
			return 0
		}
		i, perr := strconv.ParseInt(n.Value, 10, 64)
		if perr != nil {
			err = fmt.Errorf("idem: attribute %s: %w", name, perr)
		}
		return i
	}
	r.Key = str(attrPK)
	r.Status = Status(str(attrStatus))
	r.LeaseToken = str(attrLeaseToken)
	r.LeaseUntil = fromMillis(num(attrLeaseUntil))
	r.Inflight = str(attrInflight)
	if v := num(attrExpiresAt); v != 0 {
		r.ExpiresAt = time.Unix(v, 0).UTC()
	}
	r.PayloadHash = str(attrPayloadHash)
	r.Error = str(attrError)
	r.Attempt = int(num(attrAttempt))
	r.Owner = str(attrOwner)
	r.CreatedAt = fromMillis(num(attrCreatedAt))
	r.UpdatedAt = fromMillis(num(attrUpdatedAt))
	r.Sent = int(num(attrSent))
	r.OutboxGroup = str(attrOutboxGroup)
	enc := str(attrResponseEnc)
	outboxEnc := str(attrOutboxEnc)
	dead := str(attrOutboxDead)
	if err != nil {
		return nil, err
	}
	if dead != "" {
		if err := json.Unmarshal([]byte(dead), &r.Dead); err != nil {
			return nil, fmt.Errorf("idem: attribute %s: %w", attrOutboxDead, err)
		}
	}
	if v, ok := item[attrRetryable].(*types.AttributeValueMemberBOOL); ok {
		r.Retryable = v.Value
	}
	if v, ok := item[attrSteps].(*types.AttributeValueMemberSS); ok {
		r.Steps = v.Value
	}
	if v, ok := item[attrResponse].(*types.AttributeValueMemberB); ok {
		if r.Response, err = decodeResponse(v.Value, enc); err != nil {
			return nil, err
		}
	}
	if v, ok := item[attrOutbox].(*types.AttributeValueMemberB); ok {
		if r.Outbox, err = decodeOutbox(v.Value, outboxEnc); err != nil {
			return nil, err
		}
	}
	return r, nil
}
