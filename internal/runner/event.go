package runner

import (
	"crypto/md5" //nolint:gosec // SQS defines md5OfBody with MD5; not used for security
	"encoding/binary"
	"encoding/hex"
	"sort"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// toRecord builds the event record Lambda's SQS event source mapping builds for a
// received message: system attributes, message attributes, digests, source ARN, region.
func toRecord(m sqstypes.Message, queueARN, region string) events.SQSMessage {
	rec := events.SQSMessage{
		MessageId:         aws.ToString(m.MessageId),
		ReceiptHandle:     aws.ToString(m.ReceiptHandle),
		Body:              aws.ToString(m.Body),
		Md5OfBody:         aws.ToString(m.MD5OfBody),
		Attributes:        map[string]string{},
		MessageAttributes: map[string]events.SQSMessageAttribute{},
		EventSource:       "aws:sqs",
		EventSourceARN:    queueARN,
		AWSRegion:         region,
	}
	for k, v := range m.Attributes {
		rec.Attributes[k] = v
	}
	if rec.Md5OfBody == "" {
		sum := md5.Sum([]byte(rec.Body)) //nolint:gosec // see import
		rec.Md5OfBody = hex.EncodeToString(sum[:])
	}
	for name, v := range m.MessageAttributes {
		rec.MessageAttributes[name] = events.SQSMessageAttribute{
			StringValue:      v.StringValue,
			BinaryValue:      v.BinaryValue,
			StringListValues: []string{},
			BinaryListValues: [][]byte{},
			DataType:         aws.ToString(v.DataType),
		}
	}
	if len(m.MessageAttributes) > 0 {
		digest := aws.ToString(m.MD5OfMessageAttributes)
		if digest == "" {
			digest = attributesMD5(m.MessageAttributes)
		}
		rec.Md5OfMessageAttributes = digest
	}
	return rec
}

// attributesMD5 is SQS's digest of message attributes: names sorted, each encoded as
// length-prefixed name, data type, a transport byte and the length-prefixed value.
func attributesMD5(attrs map[string]sqstypes.MessageAttributeValue) string {
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	h := md5.New() //nolint:gosec // see import
	put := func(b []byte) {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(b)))
		h.Write(l[:])
		h.Write(b)
	}
	for _, n := range names {
		v := attrs[n]
		put([]byte(n))
		put([]byte(aws.ToString(v.DataType)))
		if v.BinaryValue != nil {
			h.Write([]byte{2})
			put(v.BinaryValue)
		} else {
			h.Write([]byte{1})
			put([]byte(aws.ToString(v.StringValue)))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
