package persistence

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute names of the record (see the record schema in docs/records.md).
const (
	attrPK          = "pk"
	attrStatus      = "status"
	attrLeaseToken  = "lease_token"
	AttrLeaseUntil  = "lease_until"
	AttrInflight    = "inflight"
	AttrExpiresAt   = "expires_at"
	attrPayloadHash = "payload_hash"
	attrResponse    = "response"
	AttrResponseEnc = "response_enc"
	attrError       = "error"
	attrRetryable   = "retryable"
	// attrErrorCategory and attrErrorPublic are what a FAILED record's sender may be told
	// (Record.Category, Record.Public).
	attrErrorCategory = "error_category"
	attrErrorPublic   = "error_public"
	// attrRefusedBy is the delivery a business rule refused (Record.RefusedBy).
	attrRefusedBy = "refused_by"
	// attrRefusedHash is the fingerprint of the payload a record completed for another
	// refused (Record.RefusedHash).
	attrRefusedHash = "refused_hash"
	AttrAttempt     = "attempt"
	attrSteps       = "steps"
	attrStepAnswers = "step_answers"
	attrOwner       = "owner"
	attrOutbox      = "outbox"
	attrOutboxEnc   = "outbox_enc"
	attrSent        = "sent"
	attrOutboxDead  = "outbox_dead"
	attrOutboxGroup = "outbox_group"
	// attrGuardHash is the payload fingerprint the middleware adds to guard Puts.
	AttrGuardHash = "idem_payload_hash"
	attrCreatedAt = "created_at"
	attrUpdatedAt = "updated_at"
)

// Response storage bounds. DynamoDB items are limited to 400 KB including attribute
// names; a response is refused well before that so the rest of the record always fits.
const (
	// MaxStoredResponse is the largest response, after compression, a record holds.
	MaxStoredResponse = 350 * 1024
	// compressAbove is the size from which a response is gzip-compressed.
	CompressAbove = 1024
	// maxResponseBytes bounds the decompressed size read back, against gzip bombs.
	MaxResponseBytes = 16 << 20
)

// MaxStepAnswers bounds the step answers one record holds: the bytes of every answer and
// of its step's name, added up. It keeps the record well inside DynamoDB's item limit of
// 400 KB (1 KB = 1024 bytes), with the response and outbox (MaxStoredResponse) and the
// rest of the record: stored in base64, 16 KiB of answers take about 22 KiB.
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html#limits-items
const MaxStepAnswers = 16 * 1024

// CheckAnswer reports ErrAnswerTooLarge when recording answer for step would take the
// record's answers past MaxStepAnswers.
func CheckAnswer(answers map[string][]byte, step string, answer []byte) error {
	n := len(step) + len(answer)
	for name, a := range answers {
		if name != step {
			n += len(name) + len(a)
		}
	}
	if n > MaxStepAnswers {
		return fmt.Errorf("%w: step %s answered %d bytes, the record's answers would take %d, limit %d", ErrAnswerTooLarge, step, len(answer), n, MaxStepAnswers)
	}
	return nil
}

// encodeAnswer is one element of the step_answers string set: "<len(step)>:<step><answer
// in base64>". A set, so that recording a step adds to it (ADD) without reading it.
func encodeAnswer(step string, answer []byte) string {
	return strconv.Itoa(len(step)) + ":" + step + base64.StdEncoding.EncodeToString(answer)
}

// decodeAnswers reads the step_answers set as encodeAnswer writes its elements.
func decodeAnswers(set []string) (map[string][]byte, error) {
	answers := make(map[string][]byte, len(set))
	for _, el := range set {
		n, rest, ok := strings.Cut(el, ":")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || size <= 0 || size > len(rest) {
			return nil, fmt.Errorf("idem: step answer %.40q is not <length>:<step><base64>", el)
		}
		a, err := base64.StdEncoding.DecodeString(rest[size:])
		if err != nil {
			return nil, fmt.Errorf("idem: step answer of %s: %w", rest[:size], err)
		}
		answers[rest[:size]] = a
	}
	return answers, nil
}

// answersSet is the step_answers attribute of answers.
func answersSet(answers map[string][]byte) *types.AttributeValueMemberSS {
	set := make([]string, 0, len(answers))
	for step, a := range answers {
		set = append(set, encodeAnswer(step, a))
	}
	slices.Sort(set)
	return &types.AttributeValueMemberSS{Value: set}
}

// encodeResponse returns the stored form of a response: gzip when that pays, refused
// with ErrResponseTooLarge when it would not fit in the item.
func EncodeResponse(resp []byte) (data []byte, enc string, err error) {
	return encodeBlob(resp, "response")
}

// encodeBlob compresses a stored attribute (a response, an outbox) when that pays and
// refuses it with ErrResponseTooLarge when it would not fit in the item.
func encodeBlob(resp []byte, what string) (data []byte, enc string, err error) {
	data = resp
	if len(resp) > CompressAbove {
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

func DecodeResponse(data []byte, enc string) ([]byte, error) {
	switch enc {
	case "":
		return data, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("idem: decompress response: %w", err)
		}
		out, err := io.ReadAll(io.LimitReader(zr, MaxResponseBytes+1))
		if err != nil {
			return nil, fmt.Errorf("idem: decompress response: %w", err)
		}
		if len(out) > MaxResponseBytes {
			return nil, fmt.Errorf("idem: decompress response: larger than %d bytes", MaxResponseBytes)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("idem: unknown response encoding %q", enc)
	}
}

func AvS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func avN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func avBool(b bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: b} }

// marshalRecord encodes a record for PutItem in the default layout (MemoryStore checks
// its sizes with it).
func MarshalRecord(r *Record) (map[string]types.AttributeValue, error) {
	return defaultSchema.marshal(r)
}

// unmarshalRecord decodes an item of the default layout.
func UnmarshalRecord(item map[string]types.AttributeValue) (*Record, error) {
	return defaultSchema.Unmarshal(item)
}

// marshal encodes a record for PutItem. Empty optional attributes are left out:
// DynamoDB rejects empty sets, and inflight must be absent unless the record is in the
// index (IN_PROGRESS, or with an outbox pending).
func (s *Schema) marshal(r *Record) (map[string]types.AttributeValue, error) {
	item := s.key(r.Key)
	set := func(canonical string, v types.AttributeValue) { item[s.n(canonical)] = v }
	set(attrStatus, AvS(string(r.Status)))
	set(attrLeaseToken, AvS(r.LeaseToken))
	set(AttrLeaseUntil, avN(EpochMillis(r.LeaseUntil)))
	set(AttrAttempt, avN(int64(r.Attempt)))
	set(attrCreatedAt, avN(EpochMillis(r.CreatedAt)))
	set(attrUpdatedAt, avN(EpochMillis(r.UpdatedAt)))
	if r.Inflight != "" && s.hasIndex() {
		set(AttrInflight, AvS(r.Inflight))
	}
	if !r.ExpiresAt.IsZero() {
		set(AttrExpiresAt, avN(r.ExpiresAt.Unix()))
	}
	if r.PayloadHash != "" {
		set(attrPayloadHash, AvS(r.PayloadHash))
	}
	if r.Owner != "" {
		set(attrOwner, AvS(r.Owner))
	}
	var respLen int
	if len(r.Response) > 0 {
		data, enc, err := EncodeResponse(r.Response)
		if err != nil {
			return nil, err
		}
		respLen = len(data)
		set(attrResponse, &types.AttributeValueMemberB{Value: data})
		if enc != "" {
			set(AttrResponseEnc, AvS(enc))
		}
	}
	if r.Error != "" {
		set(attrError, AvS(r.Error))
		set(attrRetryable, avBool(r.Retryable))
		if r.Category != "" {
			set(attrErrorCategory, AvS(string(r.Category)))
		}
		if r.Public != "" {
			set(attrErrorPublic, AvS(r.Public))
		}
		if by := r.RefusedBy.String(); by != "" {
			set(attrRefusedBy, AvS(by))
		}
		if r.RefusedHash != "" {
			set(attrRefusedHash, AvS(r.RefusedHash))
		}
	}
	if len(r.Steps) > 0 {
		set(attrSteps, &types.AttributeValueMemberSS{Value: r.Steps})
	}
	if len(r.Answers) > 0 {
		set(attrStepAnswers, answersSet(r.Answers))
	}
	if len(r.Outbox) > 0 {
		data, enc, err := EncodeOutbox(r.Outbox)
		if err != nil {
			return nil, err
		}
		if respLen+len(data) > MaxStoredResponse {
			return nil, fmt.Errorf("%w: response and outbox are %d bytes stored, limit %d", ErrResponseTooLarge, respLen+len(data), MaxStoredResponse)
		}
		set(attrOutbox, &types.AttributeValueMemberB{Value: data})
		if enc != "" {
			set(attrOutboxEnc, AvS(enc))
		}
		if r.OutboxGroup != "" {
			set(attrOutboxGroup, AvS(r.OutboxGroup))
		}
	}
	return item, nil
}

// unmarshal decodes an item; attributes of the wrong type are an error, missing optional
// ones are zero.
func (s *Schema) Unmarshal(item map[string]types.AttributeValue) (*Record, error) {
	r := &Record{}
	attrs := Attrs{Item: item}
	str := func(canonical string) string { return attrs.S(s.n(canonical)) }
	num := func(canonical string) int64 { return attrs.N(s.n(canonical)) }
	key, ok := s.recordKey(item)
	if !ok {
		return nil, fmt.Errorf("idem: item is not a record of table %s: its key is not %s", s.Table, s.describeKey())
	}
	r.Key = key
	r.Status = Status(str(attrStatus))
	r.LeaseToken = str(attrLeaseToken)
	r.LeaseUntil = FromMillis(num(AttrLeaseUntil))
	r.Inflight = str(AttrInflight)
	if v := num(AttrExpiresAt); v != 0 {
		r.ExpiresAt = time.Unix(v, 0).UTC()
	}
	r.PayloadHash = str(attrPayloadHash)
	r.Error = str(attrError)
	r.Category = Category(str(attrErrorCategory))
	r.Public = str(attrErrorPublic)
	refusedBy := str(attrRefusedBy)
	r.RefusedHash = str(attrRefusedHash)
	r.Attempt = int(num(AttrAttempt))
	r.Owner = str(attrOwner)
	r.CreatedAt = FromMillis(num(attrCreatedAt))
	r.UpdatedAt = FromMillis(num(attrUpdatedAt))
	r.Sent = int(num(attrSent))
	r.OutboxGroup = str(attrOutboxGroup)
	enc := str(AttrResponseEnc)
	outboxEnc := str(attrOutboxEnc)
	dead := str(attrOutboxDead)
	if err := attrs.Err(); err != nil {
		return nil, fmt.Errorf("idem: %w", err)
	}
	var err error
	if r.RefusedBy, err = parseDelivery(refusedBy); err != nil {
		return nil, fmt.Errorf("idem: attribute %s: %w", s.n(attrRefusedBy), err)
	}
	if dead != "" {
		if err := json.Unmarshal([]byte(dead), &r.Dead); err != nil {
			return nil, fmt.Errorf("idem: attribute %s: %w", s.n(attrOutboxDead), err)
		}
	}
	if v, ok := item[s.n(attrRetryable)].(*types.AttributeValueMemberBOOL); ok {
		r.Retryable = v.Value
	}
	if v, ok := item[s.n(attrSteps)].(*types.AttributeValueMemberSS); ok {
		r.Steps = v.Value
	}
	if v, ok := item[s.n(attrStepAnswers)].(*types.AttributeValueMemberSS); ok {
		if r.Answers, err = decodeAnswers(v.Value); err != nil {
			return nil, fmt.Errorf("idem: attribute %s: %w", s.n(attrStepAnswers), err)
		}
	}
	if v, ok := item[s.n(attrResponse)].(*types.AttributeValueMemberB); ok {
		if r.Response, err = DecodeResponse(v.Value, enc); err != nil {
			return nil, err
		}
	}
	if v, ok := item[s.n(attrOutbox)].(*types.AttributeValueMemberB); ok {
		if r.Outbox, err = DecodeOutbox(v.Value, outboxEnc); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// describeKey says what a record's key looks like in the table.
func (s *Schema) describeKey() string {
	if s.sk == "" {
		return fmt.Sprintf("%s = %q + record key", s.pk, s.prefix)
	}
	return fmt.Sprintf("%s = %q, %s = %q + record key", s.pk, s.static, s.sk, s.prefix)
}

// Attrs reads an item's string and number attributes: a missing one reads as zero; one
// of another type, or a number that is not an int64, is an error, and Err returns the
// first. The records (Schema.Unmarshal) and the ingress's own records read their items
// with it.
type Attrs struct {
	Item map[string]types.AttributeValue
	err  error
}

// S returns the string attribute name.
func (a *Attrs) S(name string) string {
	v, ok := a.Item[name]
	if !ok || a.err != nil {
		return ""
	}
	sv, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		a.err = fmt.Errorf("attribute %s: want S, got %T", name, v)
		return ""
	}
	return sv.Value
}

// N returns the number attribute name.
func (a *Attrs) N(name string) int64 {
	v, ok := a.Item[name]
	if !ok || a.err != nil {
		return 0
	}
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		a.err = fmt.Errorf("attribute %s: want N, got %T", name, v)
		return 0
	}
	i, err := strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		a.err = fmt.Errorf("attribute %s: %w", name, err)
	}
	return i
}

// Err is the first error of S and N.
func (a *Attrs) Err() error { return a.err }
