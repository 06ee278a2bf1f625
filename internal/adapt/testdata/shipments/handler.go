package shipments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/guarded"
	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// The steps, and the paths the handler POSTs to under each service's base URL.
const (
	StepBook      = "book"
	StepRelease   = "release"
	BookingsPath  = "/bookings"
	ReleasesPath  = "/releases"
	trackingEvent = "booked"
)

// Config configures the handler. Every field is required.
type Config struct {
	OrdersTable      string
	NoticesQueueURL  string // FIFO
	TrackingQueueURL string // standard
	CarrierURL       string
	WarehouseURL     string
}

// Notice is the body of the "shipment booked" notice (the FIFO queue).
type Notice struct {
	ShipmentID string `json:"shipment_id"`
	OrderID    string `json:"order_id"`
	Parcels    int64  `json:"parcels"`
}

// Tracking is the body of the tracking event (the standard queue).
type Tracking struct {
	ShipmentID string `json:"shipment_id"`
	Event      string `json:"event"`
}

// GetItemAPI is the read the handler makes of its table.
type GetItemAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

type handler struct {
	cfg Config
	db  GetItemAPI
	web *http.Client
}

// NewHandler validates cfg and returns the shipment handler.
func NewHandler(cfg Config, db GetItemAPI, web *http.Client) (idem.Handler, error) {
	var errs []error
	if cfg.OrdersTable == "" {
		errs = append(errs, errors.New("Config.OrdersTable is empty"))
	}
	if err := example.CheckFIFOQueueURL(cfg.NoticesQueueURL); err != nil {
		errs = append(errs, fmt.Errorf("Config.NoticesQueueURL %q %w", cfg.NoticesQueueURL, err))
	}
	if cfg.TrackingQueueURL == "" || cfg.CarrierURL == "" || cfg.WarehouseURL == "" {
		errs = append(errs, errors.New("Config.TrackingQueueURL, CarrierURL and WarehouseURL are required"))
	}
	if db == nil || web == nil {
		errs = append(errs, errors.New("a DynamoDB and an HTTP client are required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("shipments: %w", err)
	}
	return &handler{cfg: cfg, db: db, web: web}, nil
}

// Handle applies one shipment: the guard's read, the order's read and refusal, the two
// calls in their steps, then the writes and the two outbound messages.
func (h *handler) Handle(ctx context.Context, req *idem.Request) (idem.Result, error) {
	if req == nil || req.Attempt == nil {
		return idem.Result{}, fmt.Errorf("shipments: handler must run under the idem middleware: %w", idem.ErrNoLease)
	}
	s, err := Decode(req.Payload)
	if err != nil {
		return idem.Result{}, idem.Permanent(err)
	}
	resp, err := json.Marshal(Notice(s))
	if err != nil {
		return idem.Result{}, fmt.Errorf("shipments: encode response: %w", err)
	}
	entry := map[string]types.AttributeValue{attrOrder: &types.AttributeValueMemberS{Value: EntryPrefix + idem.CallerScope(req.Key) + s.ShipmentID}}
	applied, err := req.Attempt.Applied(ctx, h.cfg.OrdersTable, entry)
	if err != nil {
		return idem.Result{}, fmt.Errorf("shipments: read the journal entry of %s: %w", s.ShipmentID, err)
	}
	if applied {
		return idem.Result{Response: resp, Guarded: true}, nil
	}
	packed, err := h.packed(ctx, s.OrderID)
	if err != nil {
		return idem.Result{}, err
	}
	if !packed && !req.Attempt.Done(StepBook) {
		return idem.Result{}, idem.Refuse(fmt.Sprintf("order %s is not packed", s.OrderID))
	}
	for _, call := range []struct{ step, url string }{
		{StepBook, h.cfg.CarrierURL + BookingsPath},
		{StepRelease, h.cfg.WarehouseURL + ReleasesPath},
	} {
		if err := req.Attempt.Step(ctx, call.step, func(ctx context.Context) error {
			return h.post(ctx, call.url, req.Key, resp)
		}); err != nil {
			return idem.Result{}, err
		}
	}
	tracking, err := json.Marshal(Tracking{ShipmentID: s.ShipmentID, Event: trackingEvent})
	if err != nil {
		return idem.Result{}, fmt.Errorf("shipments: encode tracking: %w", err)
	}
	entry[attrEntryOrder] = &types.AttributeValueMemberS{Value: s.OrderID}
	return idem.Result{
		Response: resp,
		Writes:   []types.TransactWriteItem{guarded.Entry(h.cfg.OrdersTable, attrOrder, req.Key, entry), h.count(s)},
		Guards:   []int{0},
		Messages: []idem.Message{
			{QueueURL: h.cfg.NoticesQueueURL, Body: string(resp), GroupID: idem.DeduplicationID(s.OrderID), DeduplicationID: idem.DeduplicationID(req.Key)},
			{QueueURL: h.cfg.TrackingQueueURL, Body: string(tracking)},
		},
	}, nil
}

func (h *handler) packed(ctx context.Context, order string) (bool, error) {
	out, err := h.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(h.cfg.OrdersTable),
		Key:            map[string]types.AttributeValue{attrOrder: &types.AttributeValueMemberS{Value: order}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return false, fmt.Errorf("shipments: read order %s: %w", order, err)
	}
	v, ok := out.Item[attrPacked].(*types.AttributeValueMemberBOOL)
	return ok && v.Value, nil
}

// post POSTs body to url with the idempotency key: 2xx is done, 5xx and 429 are retried,
// anything else is permanent.
func (h *handler) post(ctx context.Context, url, key string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return idem.Permanent(fmt.Errorf("shipments: request to %s: %w", url, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := h.web.Do(req)
	if err != nil {
		return fmt.Errorf("shipments: POST %s: %w", url, err)
	}
	defer resp.Body.Close() //nolint:errcheck // read only
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("shipments: POST %s answered %s", url, resp.Status)
	default:
		return idem.Permanent(fmt.Errorf("shipments: POST %s refused: %s %s", url, resp.Status, bytes.TrimSpace(answer)))
	}
}

func (h *handler) count(s Shipment) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(h.cfg.OrdersTable),
		Key:                      map[string]types.AttributeValue{attrOrder: &types.AttributeValueMemberS{Value: s.OrderID}},
		UpdateExpression:         aws.String("ADD #parcels :n, #count :one"),
		ConditionExpression:      aws.String("attribute_exists(#order)"),
		ExpressionAttributeNames: map[string]string{"#parcels": attrParcels, "#count": attrCount, "#order": attrOrder},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":n":   &types.AttributeValueMemberN{Value: strconv.FormatInt(s.Parcels, 10)},
			":one": &types.AttributeValueMemberN{Value: "1"},
		},
	}}
}
