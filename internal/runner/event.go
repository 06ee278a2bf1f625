package runner

import (
	"crypto/md5" //nolint:gosec // SQS defines md5OfBody with MD5; not used for security
	"encoding/hex"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/internal/sampleevents"
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
			digest = sampleevents.AttributesMD5(rec.MessageAttributes)
		}
		rec.Md5OfMessageAttributes = digest
	}
	return rec
}
