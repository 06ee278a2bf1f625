package payouts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/guarded"
	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// StepTransfer names the step that calls the gateway (idem.Attempt.StepAnswer): its
// answer is the gateway's transfer id.
const StepTransfer = "transfer"

// TransfersPath is where the handler POSTs a transfer, under the gateway's base URL.
const TransfersPath = "/transfers"

// LookupParam is the query parameter of the gateway's lookup: a GET of TransfersPath
// with ?idempotency_key=KEY answers the transfer applied under KEY (200, as the POST
// did) or 404, from the gateway's records, which outlive its key window.
const LookupParam = "idempotency_key"

// DefaultKeyWindow is how long the gateway keeps an idempotency key unless told
// otherwise (Config.KeyWindow): Stripe's 24 hours.
const DefaultKeyWindow = 24 * time.Hour

// GatewayMaxFlight is what this handler assumes of the network (idem.Service.MaxFlight):
// a transfer request reaches the gateway at most 17 minutes after it is made (it is sent
// within the invocation that made it, at most Lambda's 15-minute timeout, and the network
// holds a segment at most two minutes after: TCP's maximum segment lifetime; an
// environment frozen with a request half sent could send the rest when it thaws, which
// this assumes does not happen), and a lookup's answer comes back within the invocation
// that waits for it, 15 minutes. A retry posts without looking up only within the
// gateway's key window less this; a key window shorter than this (Config.KeyWindow)
// parks a payout whose transfer the lookup does not find, instead of posting it again.
const GatewayMaxFlight = 32 * time.Minute

// Config configures the handler. Every field is required.
type Config struct {
	// PayeesTable is the DynamoDB table of payees (partition key payee_id, S).
	PayeesTable string
	// NoticesQueueURL is the outbound FIFO queue that gets one notice per payout.
	NoticesQueueURL string
	// GatewayURL is the payment gateway's base URL (http or https).
	GatewayURL string
	// KeyWindow is how long the gateway keeps an idempotency key (default
	// DefaultKeyWindow): past it, a transfer that is not recorded is looked up, not
	// posted again (idem.Service).
	KeyWindow time.Duration
	// NoLookup leaves the gateway's lookup out: past the key window, such a transfer
	// parks its message for reconciliation (idem.ErrPastKeyWindow) instead.
	NoLookup bool
}

// Clients are what the handler reads and calls through: the consumer's own
// (example.Deps).
type Clients struct {
	// DynamoDB reads the payee's row; persistence.DynamoDBAPI satisfies it.
	DynamoDB GetItemAPI
	// HTTP calls the gateway.
	HTTP *http.Client
}

// GetItemAPI is the read the handler makes of its table.
type GetItemAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Notice is the body of the message sent to the notices queue once a payout committed.
type Notice struct {
	PayoutID       string `json:"payout_id"`
	PayeeID        string `json:"payee_id"`
	AmountCents    int64  `json:"amount_cents"`
	IdempotencyKey string `json:"idempotency_key"` // the key the gateway knows the transfer by
	TransferID     string `json:"transfer_id"`     // the id the gateway gave the transfer (the step's answer)
}

// Response is the handler's response, stored with the idempotency record and replayed
// to duplicates.
type Response struct {
	PayoutID    string `json:"payout_id"`
	PayeeID     string `json:"payee_id"`
	AmountCents int64  `json:"amount_cents"`
}

// Transfer is the body the handler POSTs to the gateway.
type Transfer struct {
	PayoutID    string `json:"payout_id"`
	PayeeID     string `json:"payee_id"`
	AmountCents int64  `json:"amount_cents"`
}

// NewHandler validates cfg and returns the payout handler (see the package
// documentation). Run it under the idem middleware in the lease mode, with a
// Config.Sender: it runs a step, and leaves its writes to the completion transaction and
// its notice to the outbox.
func NewHandler(cfg Config, c Clients) (idem.Handler, error) {
	var errs []error
	if cfg.PayeesTable == "" {
		errs = append(errs, errors.New("Config.PayeesTable is empty"))
	}
	if err := example.CheckFIFOQueueURL(cfg.NoticesQueueURL); err != nil {
		errs = append(errs, fmt.Errorf("Config.NoticesQueueURL %q %w", cfg.NoticesQueueURL, err))
	}
	if err := checkURL(cfg.GatewayURL); err != nil {
		errs = append(errs, fmt.Errorf("Config.GatewayURL %q %w", cfg.GatewayURL, err))
	}
	if cfg.KeyWindow < 0 {
		errs = append(errs, fmt.Errorf("Config.KeyWindow %s is negative", cfg.KeyWindow))
	}
	if c.DynamoDB == nil || c.HTTP == nil {
		errs = append(errs, errors.New("a DynamoDB and an HTTP client are required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("payouts: %w", err)
	}
	if cfg.KeyWindow == 0 {
		cfg.KeyWindow = DefaultKeyWindow
	}
	return &handler{cfg: cfg, db: c.DynamoDB, web: c.HTTP}, nil
}

type handler struct {
	cfg Config
	db  GetItemAPI
	web *http.Client
}

// Handle applies one payout: decode, the journal entry read, the payee read (and the
// refusal), the transfer in a step, then the writes and the notice for the middleware
// to commit together.
func (h *handler) Handle(ctx context.Context, req *idem.Request) (idem.Result, error) {
	if req == nil || req.Attempt == nil {
		return idem.Result{}, fmt.Errorf("payouts: handler must run under the idem middleware: %w", idem.ErrNoLease)
	}
	p, err := Decode(req.Payload)
	if err != nil {
		return idem.Result{}, idem.Permanent(err)
	}
	resp, err := json.Marshal(Response(p))
	if err != nil {
		return idem.Result{}, fmt.Errorf("payouts: encode response: %w", err)
	}
	// Paid by an execution the record no longer remembers: the journal entry says so.
	// Nothing is called or written again.
	applied, err := req.Attempt.Applied(ctx, h.cfg.PayeesTable, entryKey(req.Key, p))
	if err != nil {
		return idem.Result{}, fmt.Errorf("payouts: read the journal entry of payout %s: %w", p.PayoutID, err)
	}
	if applied {
		return idem.Result{Response: resp, Guarded: true}, nil
	}
	// The business rule, from what the table holds, before calling anything. (Once an
	// earlier attempt has made the transfer, the money has moved: it is recorded
	// whatever the payee's row says now.)
	enabled, err := h.enabled(ctx, p.PayeeID)
	if err != nil {
		return idem.Result{}, err
	}
	if !enabled && !req.Attempt.Done(StepTransfer) {
		return idem.Result{}, idem.Refuse(fmt.Sprintf("payee %s is not enabled", p.PayeeID))
	}
	// The gateway's transfer id is the step's answer, recorded with it: an attempt that
	// takes over after the step gets it from the record, without calling again.
	// Past the gateway's key window a transfer that is not recorded is looked up, never
	// posted blindly, and posted again only when no earlier request can still be on its
	// way.
	svc := idem.Service{KeyWindow: h.cfg.KeyWindow, MaxFlight: GatewayMaxFlight}
	if !h.cfg.NoLookup {
		svc.Lookup = func(ctx context.Context) ([]byte, bool, error) { return h.lookup(ctx, req.Key, p) }
	}
	transfer, err := req.Attempt.StepWith(ctx, StepTransfer, svc, func(ctx context.Context) ([]byte, error) {
		return h.transfer(ctx, req.Key, p)
	})
	if err != nil {
		return idem.Result{}, err
	}
	notice, err := json.Marshal(Notice{PayoutID: p.PayoutID, PayeeID: p.PayeeID, AmountCents: p.AmountCents, IdempotencyKey: req.Key, TransferID: string(transfer)})
	if err != nil {
		return idem.Result{}, fmt.Errorf("payouts: encode notice: %w", err)
	}
	return idem.Result{
		Response: resp,
		Writes:   []types.TransactWriteItem{h.entry(req.Key, p, string(transfer)), h.credit(p)},
		Guards:   []int{0},
		Messages: []idem.Message{{
			QueueURL: h.cfg.NoticesQueueURL, Body: string(notice),
			GroupID: idem.DeduplicationID(p.PayeeID), DeduplicationID: idem.DeduplicationID(req.Key),
		}},
		Explain: func(index int, _ map[string]types.AttributeValue) string {
			if index != 1 {
				return ""
			}
			return fmt.Sprintf("payee %s has no row (deleted after it was read)", p.PayeeID)
		},
	}, nil
}

// enabled reads whether payouts to payee are allowed: its row, strongly consistent.
// No row is not enabled.
func (h *handler) enabled(ctx context.Context, payee string) (bool, error) {
	out, err := h.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(h.cfg.PayeesTable),
		Key:                      map[string]types.AttributeValue{attrPayee: &types.AttributeValueMemberS{Value: payee}},
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#enabled"),
		ExpressionAttributeNames: map[string]string{"#enabled": attrEnabled},
	})
	if err != nil {
		return false, fmt.Errorf("payouts: read payee %s: %w", payee, err)
	}
	v, ok := out.Item[attrEnabled].(*types.AttributeValueMemberBOOL)
	return ok && v.Value, nil
}

// transfer POSTs the payout to the gateway with the idempotency key and returns the id
// the gateway gave the transfer: 2xx is done; 5xx, 429, a timeout or a lost answer are
// retried (the delivery fails and comes back; the same key makes the gateway apply it
// once); any other answer is permanent, and so is a 2xx without an id.
func (h *handler) transfer(ctx context.Context, key string, p Payout) ([]byte, error) {
	body, err := json.Marshal(Transfer(p))
	if err != nil {
		return nil, fmt.Errorf("payouts: encode transfer: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.cfg.GatewayURL+TransfersPath, bytes.NewReader(body))
	if err != nil {
		return nil, idem.Permanent(fmt.Errorf("payouts: transfer request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := h.web.Do(req)
	if err != nil {
		return nil, fmt.Errorf("payouts: transfer %s: %w", p.PayoutID, err)
	}
	defer resp.Body.Close() //nolint:errcheck // read only
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return transferID(p, answer)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return nil, fmt.Errorf("payouts: transfer %s: the gateway answered %s", p.PayoutID, resp.Status)
	default:
		return nil, idem.Permanent(fmt.Errorf("payouts: transfer %s: the gateway refused it: %s %s", p.PayoutID, resp.Status, bytes.TrimSpace(answer)))
	}
}

// lookup asks the gateway for the transfer applied under key: its id and true, or false
// when there is none. Any answer but 200 and 404 is an error, retried.
func (h *handler) lookup(ctx context.Context, key string, p Payout) ([]byte, bool, error) {
	u := h.cfg.GatewayURL + TransfersPath + "?" + url.Values{LookupParam: {key}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, idem.Permanent(fmt.Errorf("payouts: lookup request: %w", err))
	}
	resp, err := h.web.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("payouts: look up transfer %s: %w", p.PayoutID, err)
	}
	defer resp.Body.Close() //nolint:errcheck // read only
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch resp.StatusCode {
	case http.StatusOK:
		id, err := transferID(p, answer)
		return id, err == nil, err
	case http.StatusNotFound:
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("payouts: look up transfer %s: the gateway answered %s", p.PayoutID, resp.Status)
}

// maxTransferID bounds the gateway's transfer id, the step's recorded answer.
const maxTransferID = 128

// transferID reads the id from the gateway's answer to a transfer ({"id": ...}).
func transferID(p Payout, answer []byte) ([]byte, error) {
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(answer, &a); err != nil || a.ID == "" || len(a.ID) > maxTransferID {
		return nil, idem.Permanent(fmt.Errorf("payouts: transfer %s: the gateway applied it but answered no transfer id of at most %d bytes: %.80q", p.PayoutID, maxTransferID, answer))
	}
	return []byte(a.ID), nil
}

// entryKey is the key of the payout's journal entry under the idempotency key key: its
// payout id scoped as the key is (idem.CallerScope), so an HTTP caller's payout ids are
// its own.
func entryKey(key string, p Payout) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPayee: &types.AttributeValueMemberS{Value: EntryPrefix + idem.CallerScope(key) + p.PayoutID}}
}

// entry is the payout's journal entry, with the gateway's transfer id, put only if absent (the guard): a payout
// redelivered after its record expired finds it (Applied above), and a commit that
// races such a redelivery is refused by it.
func (h *handler) entry(key string, p Payout, transfer string) types.TransactWriteItem {
	return guarded.Entry(h.cfg.PayeesTable, attrPayee, key, map[string]types.AttributeValue{
		attrPayee:      entryKey(key, p)[attrPayee],
		attrEntryPayee: &types.AttributeValueMemberS{Value: p.PayeeID},
		attrTransfer:   &types.AttributeValueMemberS{Value: transfer},
		attrAmount:     &types.AttributeValueMemberN{Value: strconv.FormatInt(p.AmountCents, 10)},
	})
}

// credit adds the payout to the payee's totals. The gateway has paid by now: the only
// condition is that the row is still there.
func (h *handler) credit(p Payout) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(h.cfg.PayeesTable),
		Key:                      map[string]types.AttributeValue{attrPayee: &types.AttributeValueMemberS{Value: p.PayeeID}},
		UpdateExpression:         aws.String("ADD #paid :amount, #count :one"),
		ConditionExpression:      aws.String("attribute_exists(#payee)"),
		ExpressionAttributeNames: map[string]string{"#paid": attrPaid, "#count": attrCount, "#payee": attrPayee},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":amount": &types.AttributeValueMemberN{Value: strconv.FormatInt(p.AmountCents, 10)},
			":one":    &types.AttributeValueMemberN{Value: "1"},
		},
	}}
}

// checkURL returns an error, worded to follow the URL, unless u is an http(s) URL with
// a host and no trailing slash.
func checkURL(u string) error {
	parsed, err := url.Parse(u)
	switch {
	case err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "":
		return errors.New("is not an http(s) URL")
	case strings.HasSuffix(u, "/"):
		return errors.New("ends in a slash")
	}
	return nil
}
