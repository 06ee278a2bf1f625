package awsconf_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

// recorder is the SDK's own HTTP client, keeping the body of each attempt as net/http
// got it. Its first fail attempts read the body and fail as a reset connection does,
// without sending anything.
type recorder struct {
	inner  aws.HTTPClient
	fail   int
	bodies []io.ReadCloser // the bodies of the attempts sent
	read   [][]byte        // what each failed attempt read
	length []int64         // the ContentLength of each failed attempt
}

func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	if r.fail > 0 {
		r.fail--
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		r.read, r.length = append(r.read, b), append(r.length, req.ContentLength)
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	r.bodies = append(r.bodies, req.Body)
	return r.inner.Do(req)
}

func put(t *testing.T, cfg aws.Config, rec *recorder, fail int) (*dynamodb.Client, string, map[string]types.AttributeValue) {
	t.Helper()
	ctx := context.Background()
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.HTTPClient = rec })
	table := awstest.HashTable(ctx, t, db, "body", "pk")
	item := map[string]types.AttributeValue{
		"pk":   &types.AttributeValueMemberS{Value: "k1"},
		"body": &types.AttributeValueMemberS{Value: "a value long enough to be read in more than one call, or not"},
	}
	rec.bodies, rec.fail = nil, fail
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item,
		ConditionExpression: aws.String("attribute_not_exists(pk)")}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	return db, table, item
}

// TestDetachBody plays net/http's side of the race the package comment describes: the
// last copy of the request body, made after the SDK has closed it. With DetachBody it
// reads nothing and ends without error; without, it fails with io.EOF, which is what
// makes net/http close the connection under the response. The second case fails once
// smithy-go no longer returns io.EOF from a closed body's WriteTo, and DetachBody can
// go.
func TestDetachBody(t *testing.T) {
	for _, detached := range []bool{true, false} {
		t.Run(map[bool]string{true: "with", false: "without"}[detached], func(t *testing.T) {
			cfg := awstest.Config(t)
			if len(cfg.APIOptions) != 1 {
				t.Fatalf("awstest's config has %d API options, want DetachBody alone", len(cfg.APIOptions))
			}
			if !detached {
				cfg.APIOptions = nil
			}
			rec := &recorder{inner: awshttp.NewBuildableClient()}
			put(t, cfg, rec, 0)
			if len(rec.bodies) != 1 {
				t.Fatalf("%d attempts sent, want 1", len(rec.bodies))
			}
			_, writerTo := rec.bodies[0].(io.WriterTo)
			n, err := io.Copy(io.Discard, rec.bodies[0])
			switch {
			case detached && (writerTo || n != 0 || err != nil):
				t.Errorf("detached body: WriteTo %v; the copy after the SDK closed it read %d bytes, error %v; want no WriteTo, 0 and nil", writerTo, n, err)
			case !detached && !errors.Is(err, io.EOF):
				t.Errorf("the SDK's own body: the copy after it was closed returned %d, %v; want the io.EOF of the race (smithy-go fixed? then DetachBody can go)", n, err)
			}
		})
	}
}

// TestDetachBodyOfEveryService: the SQS and Secrets Manager clients the functions build
// from the same configuration send detached bodies too.
func TestDetachBodyOfEveryService(t *testing.T) {
	ctx := context.Background()
	cfg := awstest.Config(t)
	rec := &recorder{inner: awshttp.NewBuildableClient()}
	queue := awstest.Queue(ctx, t, awstest.SQS(t), "body", nil)
	if _, err := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.HTTPClient = rec }).SendMessage(ctx,
		&sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	_, _ = secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.HTTPClient = rec }).GetSecretValue(ctx,
		&secretsmanager.GetSecretValueInput{SecretId: aws.String(awstest.Name(t, "none"))}) // not found: its body was sent all the same
	if len(rec.bodies) != 2 {
		t.Fatalf("%d requests sent, want 2", len(rec.bodies))
	}
	for i, body := range rec.bodies {
		_, writerTo := body.(io.WriterTo)
		if n, err := io.Copy(io.Discard, body); writerTo || n != 0 || err != nil {
			t.Errorf("request %d: WriteTo %v; the copy after the SDK closed it read %d bytes, error %v; want no WriteTo, 0 and nil", i, writerTo, n, err)
		}
	}
}

// TestDetachedBodyIsResent checks that the detached body is rewound for a retry: an
// attempt that read the whole body and failed, then one sent, which stores the item.
func TestDetachedBodyIsResent(t *testing.T) {
	rec := &recorder{inner: awshttp.NewBuildableClient()}
	db, table, item := put(t, awstest.Config(t), rec, 1)
	if len(rec.read) != 1 || len(rec.bodies) != 1 {
		t.Fatalf("%d failed and %d sent attempts, want 1 and 1", len(rec.read), len(rec.bodies))
	}
	if int64(len(rec.read[0])) != rec.length[0] || !json.Valid(rec.read[0]) {
		t.Fatalf("the failed attempt read %d bytes of %d: %q", len(rec.read[0]), rec.length[0], rec.read[0])
	}
	got, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": item["pk"]}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := got.Item["body"].(*types.AttributeValueMemberS); !ok || b.Value != item["body"].(*types.AttributeValueMemberS).Value {
		t.Fatalf("stored item %v, want %v", got.Item, item)
	}
}
