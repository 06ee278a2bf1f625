package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Error codes of the SQS JSON and query protocols.
var (
	codesQueueMissing = []string{"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"}
	codesQueueExists  = []string{"QueueNameExists", "QueueAlreadyExists"}
	codesBadAttribute = []string{"InvalidAttributeName", "InvalidAttributeValue"}
)

// optionalQueueAttributes are dropped, with a note, when the endpoint refuses them:
// they change how AWS stores messages, not how the consumer behaves.
var optionalQueueAttributes = []string{"SqsManagedSseEnabled"}

// jsonQueueAttributes hold JSON documents; they are compared as documents.
var jsonQueueAttributes = []string{"RedrivePolicy", "RedriveAllowPolicy", "Policy"}

var queueNameChars = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

type queueSpec struct {
	name  string
	attrs map[string]string
	tags  map[string]string
}

func (u *upper) queueSpec(res *resource) (*queueSpec, error) {
	p, err := u.r.resolveProps(res)
	if err != nil {
		return nil, err
	}
	spec := &queueSpec{attrs: map[string]string{}}
	fifo, _ := p.boolean("FifoQueue")
	name, explicit := p.str("QueueName")
	if !explicit {
		name = u.stack + "-" + res.id
		if fifo {
			name += ".fifo"
		}
	}
	base, hasSuffix := strings.CutSuffix(name, ".fifo")
	switch {
	case len(name) > 80:
		p.fail("QueueName", "queue name %s is %d characters, SQS allows 80: use a shorter stack name", name, len(name))
	case !queueNameChars.MatchString(base):
		p.fail("QueueName", "queue name %s: SQS allows letters, digits, '-' and '_'", name)
	case fifo != hasSuffix:
		p.fail("QueueName", "queue name %s: a FIFO queue's name, and only its, ends in .fifo", name)
	}
	spec.name = name
	if fifo {
		spec.attrs["FifoQueue"] = "true"
	}
	for _, key := range []string{"ContentBasedDeduplication", "SqsManagedSseEnabled"} {
		b, ok := p.boolean(key)
		switch {
		case !ok:
		case key == "ContentBasedDeduplication" && !fifo:
			if b {
				p.fail(key, "applies to FIFO queues only")
			}
		default:
			spec.attrs[key] = strconv.FormatBool(b)
		}
	}
	for _, key := range []string{"DeduplicationScope", "FifoThroughputLimit"} {
		if s, ok := p.str(key); ok && !fifo {
			p.fail(key, "applies to FIFO queues only")
		} else if ok {
			spec.attrs[key] = s
		}
	}
	for _, key := range []string{"VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds", "ReceiveMessageWaitTimeSeconds", "MaximumMessageSize"} {
		if n, ok := p.integer(key); ok {
			spec.attrs[key] = strconv.FormatInt(n, 10)
		}
	}
	for _, key := range []string{"RedrivePolicy", "RedriveAllowPolicy"} {
		if s, ok := p.json(key); ok {
			spec.attrs[key] = s
		}
	}
	spec.tags = p.tags("Tags")
	u.note(p.ignore("KmsMasterKeyId", "KMS encryption is not emulated"))
	u.note(p.ignore("KmsDataKeyReusePeriodSeconds", "KMS encryption is not emulated"))
	if err := p.done(); err != nil {
		return nil, err
	}
	return spec, nil
}

// queue creates the queue of res, or finds it and converges its attributes.
func (u *upper) queue(ctx context.Context, res *resource) (*Resource, error) {
	spec, err := u.queueSpec(res)
	if err != nil {
		return nil, err
	}
	out := &Resource{LogicalID: res.id, Type: TypeQueue, Name: spec.name, Status: "created"}
	if _, err := u.api.SQS.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(spec.name)}); err == nil {
		out.Status = "exists"
	} else if !hasCode(err, codesQueueMissing...) {
		return nil, fmt.Errorf("queue %s: %w", spec.name, err)
	}
	// CreateQueue returns the existing queue when its attributes are identical, and
	// QueueNameExists when they differ: then the attributes are converged below.
	for {
		created, err := u.api.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{
			QueueName: aws.String(spec.name), Attributes: spec.attrs, Tags: spec.tags,
		})
		if err == nil {
			out.URL = aws.ToString(created.QueueUrl)
			break
		}
		if hasCode(err, codesQueueExists...) {
			got, gerr := u.api.SQS.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(spec.name)})
			if gerr != nil {
				return nil, fmt.Errorf("queue %s: %w", spec.name, gerr)
			}
			out.URL = aws.ToString(got.QueueUrl)
			out.Status = "exists"
			break
		}
		if !u.dropOptional(res, spec.attrs, err) {
			return nil, fmt.Errorf("create queue %s: %w", spec.name, err)
		}
	}
	cur, err := u.api.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(out.URL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("queue %s: read attributes: %w", spec.name, err)
	}
	out.ARN = cur.Attributes["QueueArn"]
	if out.ARN == "" {
		return nil, fmt.Errorf("queue %s: the endpoint returned no QueueArn", spec.name)
	}
	if diff := changedAttributes(spec.attrs, cur.Attributes); len(diff) > 0 {
		for {
			_, err := u.api.SQS.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(out.URL), Attributes: diff})
			if err == nil {
				break
			}
			if !u.dropOptional(res, diff, err) {
				return nil, fmt.Errorf("queue %s: set attributes %s: %w", spec.name, strings.Join(slices.Sorted(maps.Keys(diff)), ", "), err)
			}
		}
		if len(diff) > 0 {
			out.Status = "updated"
			u.note(fmt.Sprintf("%s: set %s to match the template", res.id, strings.Join(slices.Sorted(maps.Keys(diff)), ", ")))
		}
	}
	return out, nil
}

// dropOptional removes an optional attribute the endpoint refused, with a note, and
// reports whether there was one to remove (and the call is worth repeating).
func (u *upper) dropOptional(res *resource, attrs map[string]string, err error) bool {
	if !hasCode(err, codesBadAttribute...) {
		return false
	}
	for _, a := range optionalQueueAttributes {
		if _, ok := attrs[a]; ok {
			delete(attrs, a)
			u.note(fmt.Sprintf("%s: %s: refused by the endpoint, left out locally (%s)", res.id, a, apiCode(err)))
			return true
		}
	}
	return false
}

// unsetWhenUnreported are the attributes an endpoint leaves out of GetQueueAttributes
// when the queue has none: unreported, they are compared as empty.
var unsetWhenUnreported = []string{"RedrivePolicy", "Policy"}

// changedAttributes returns the wanted attributes whose current value differs.
// FifoQueue cannot change (it is in the name); other attributes the endpoint does not
// report are not compared (moto, for one, may not report SqsManagedSseEnabled, and
// never reports RedriveAllowPolicy).
func changedAttributes(want, cur map[string]string) map[string]string {
	diff := map[string]string{}
	for k, w := range want {
		if k == "FifoQueue" {
			continue
		}
		c, ok := cur[k]
		if !ok && !slices.Contains(unsetWhenUnreported, k) {
			continue
		}
		if !sameAttribute(k, w, c) {
			diff[k] = w
		}
	}
	return diff
}

func sameAttribute(name, want, cur string) bool {
	if !slices.Contains(jsonQueueAttributes, name) {
		return strings.EqualFold(want, cur)
	}
	var a, b any
	if json.Unmarshal([]byte(want), &a) != nil || json.Unmarshal([]byte(cur), &b) != nil {
		return want == cur
	}
	return reflect.DeepEqual(normalizeJSON(a), normalizeJSON(b))
}

// normalizeJSON renders every scalar as text: SQS returns maxReceiveCount as a number
// or as a string depending on the endpoint.
func normalizeJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalizeJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeJSON(e)
		}
		return out
	default:
		s, _ := text(x)
		return s
	}
}
