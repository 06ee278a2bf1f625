package sqsmsg

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQS's limits, in one place. Every sender of this package checks against them: the
// outbox (Message.validate, the batches of Deliver), the dead letters (SQSDeadLetter),
// tracing (traceRoom, InjectTrace), and idemctl redrive.
const (
	// MaxMessageAttributes is how many message attributes SQS allows on one message.
	// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html
	MaxMessageAttributes = 10

	// MaxSQSMessageBytes is the largest message SQS accepts, and the default and greatest
	// MaximumMessageSize of a queue: 1 MiB since AWS raised it from 256 KiB in 2025
	// (https://aws.amazon.com/blogs/compute/more-room-to-build-serverless-services-now-support-payloads-up-to-1-mb).
	// A queue's MaximumMessageSize can be set anywhere from MinSQSMessageBytes to this
	// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html).
	// SQS counts the body and every part of every message attribute, its name, its data
	// type and its value, against the limit (attributeCost)
	// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html,
	// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_MessageAttributeValue.html).
	MaxSQSMessageBytes = 1 << 20
	// MinSQSMessageBytes is the lowest MaximumMessageSize a queue can have (same page).
	MinSQSMessageBytes = 1024

	// MaxOutboundMessageBytes bounds one outbound message (Result.Messages), body and
	// attributes counted as SQS counts them: 256 KiB, the greatest MaximumMessageSize
	// before 2025 and still the size of many queues, so that every queue created with
	// the old default takes what the outbox stores, and its dead letter (the message and
	// the dlq-* attributes) fits a dead-letter queue of the default size with room to
	// spare. A queue whose own MaximumMessageSize is lower refuses a larger message for
	// good: it is dead-lettered (OutboundDeadLetterer).
	MaxOutboundMessageBytes = 256 * 1024

	// maxBatchEntries is SendMessageBatch's limit of entries; maxBatchBytes bounds the
	// sum of a request's messages' sizes, which SQS limits to MaxSQSMessageBytes; the
	// outbox keeps to MaxOutboundMessageBytes.
	// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
	MaxBatchEntries = 10
	MaxBatchBytes   = MaxOutboundMessageBytes

	// MaxDeduplicationIDChars is the longest MessageDeduplicationId and MessageGroupId
	// SQS accepts, in ASCII letters, digits and punctuation.
	// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
	MaxDeduplicationIDChars = 128

	// stringType is the data type of every attribute this package writes.
	stringType = "String"
)

// attributeCost is what one message attribute adds to a message's size as SQS counts it
// against the queue's MaximumMessageSize: the bytes of its name, of its data type and of
// its value (valueBytes).
func attributeCost(name, dataType string, valueBytes int) int {
	return len(name) + len(dataType) + valueBytes
}

// stringAttributeCost is attributeCost of a String attribute.
func StringAttributeCost(name, value string) int {
	return attributeCost(name, stringType, len(value))
}

// stringAttribute is a String message attribute of value v.
func StringAttribute(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(stringType), StringValue: aws.String(v)}
}
