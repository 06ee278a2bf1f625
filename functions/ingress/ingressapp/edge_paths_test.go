package ingressapp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
)

// garbledConsumerKey is a DynamoDB client whose reads of the ingress's records give a
// consumer key that is not UTF-8 (no POST stores one).
type garbledConsumerKey struct {
	ingressapp.DynamoDBAPI
	table string
}

func (g *garbledConsumerKey) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := g.DynamoDBAPI.GetItem(ctx, in, o...)
	if err == nil && aws.ToString(in.TableName) == g.table && out.Item != nil {
		if _, ok := out.Item["consumer_key"]; ok {
			out.Item["consumer_key"] = &types.AttributeValueMemberS{Value: "\xff"}
		}
	}
	return out, err
}

// TestStatusOfARecordWithAnUnreadableConsumerKey: a status whose stored consumer key does
// not make a record key falls back on the ingress's own record key, and is answered.
func TestStatusOfARecordWithAnUnreadableConsumerKey(t *testing.T) {
	g := &garbledConsumerKey{}
	f := newFixture(t, options{wrapDDB: func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI { g.DynamoDBAPI = api; return g }})
	g.table = f.env["INGRESS_TABLE"]
	m := f.traffic(t, 1)[0]
	key := f.key("garbled")
	wantCode(t, "POST", f.retry(t, key, m.Body), http.StatusAccepted)
	wantCode(t, "GET", f.get(t, key), http.StatusOK)
}

// TestRequestWithoutTheKeyField: with KEY_SOURCE=field, a body that lacks the field is
// refused with 400, and the answer says which field is missing.
func TestRequestWithoutTheKeyField(t *testing.T) {
	f := newFixture(t, options{env: map[string]string{"KEY_SOURCE": "field", "KEY_FIELD": "no_such_field"}})
	m := f.traffic(t, 1)[0]
	wantProblem(t, "POST", f.post(t, f.key("unkeyed"), m.Body), http.StatusBadRequest, "no JSON field")
}

// refusedPut is a DynamoDB client whose writes of the ingress's records fail without
// being applied, and, when releaseFails, whose release of the lost write fails too.
type refusedPut struct {
	ingressapp.DynamoDBAPI
	table        *string
	releaseFails bool
}

func (r *refusedPut) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if aws.ToString(in.TableName) == *r.table {
		return nil, errors.New("injected: the put failed")
	}
	return r.DynamoDBAPI.PutItem(ctx, in, o...)
}

func (r *refusedPut) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if r.releaseFails && aws.ToString(in.TableName) == *r.table {
		return nil, errors.New("injected: the release failed")
	}
	return r.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

// TestCreateFailedLogsTheReleaseOnlyWhenItFailed: a POST whose record could not be
// written is answered 503, after releasing what the write may have taken. The log line
// holds the release's own failure, and not a release that found nothing to release (the
// write was not applied).
func TestCreateFailedLogsTheReleaseOnlyWhenItFailed(t *testing.T) {
	for _, releaseFails := range []bool{false, true} {
		var table string
		f := newFixture(t, options{wrapDDB: func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI {
			return &refusedPut{DynamoDBAPI: api, table: &table, releaseFails: releaseFails}
		}})
		table = f.env["INGRESS_TABLE"]
		m := f.traffic(t, 1)[0]
		wantCode(t, "POST", f.post(t, f.key("refused"), m.Body), http.StatusServiceUnavailable)
		logs := f.logs.String()
		if !strings.Contains(logs, "the put failed") || releaseFails != strings.Contains(logs, "the release failed") {
			t.Errorf("release fails %v: the log line:\n%s", releaseFails, logs)
		}
		if strings.Contains(logs, ingressapp.ErrChanged.Error()) {
			t.Errorf("release fails %v: a release that found nothing to release is logged:\n%s", releaseFails, logs)
		}
	}
}
