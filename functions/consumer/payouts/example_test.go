package payouts_test

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/payouts"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

const noticesURL = "https://sqs.us-east-1.amazonaws.com/123456789012/notices.fifo"

func TestNewHandler(t *testing.T) {
	clients := payouts.Clients{DynamoDB: &dynamodb.Client{}, HTTP: http.DefaultClient}
	valid := payouts.Config{PayeesTable: "payees", NoticesQueueURL: noticesURL, GatewayURL: "https://gateway.example"}
	if h, err := payouts.NewHandler(valid, clients); err != nil || h == nil {
		t.Fatalf("NewHandler = %v, %v", h, err)
	}
	for name, c := range map[string]struct {
		cfg     payouts.Config
		clients payouts.Clients
		want    []string
	}{
		"nothing":        {payouts.Config{}, payouts.Clients{}, []string{"PayeesTable is empty", "NoticesQueueURL", "GatewayURL", "DynamoDB and an HTTP client"}},
		"standard queue": {payouts.Config{PayeesTable: "p", NoticesQueueURL: "https://sqs.example/q", GatewayURL: "http://g"}, clients, []string{"not a FIFO queue"}},
		"trailing slash": {payouts.Config{PayeesTable: "p", NoticesQueueURL: noticesURL, GatewayURL: "http://g/"}, clients, []string{"ends in a slash"}},
		"not a URL":      {payouts.Config{PayeesTable: "p", NoticesQueueURL: noticesURL, GatewayURL: "gateway"}, clients, []string{"not an http(s) URL"}},
		"no HTTP client": {valid, payouts.Clients{DynamoDB: clients.DynamoDB}, []string{"HTTP client"}},
	} {
		_, err := payouts.NewHandler(c.cfg, c.clients)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want %q", name, err, w)
			}
		}
	}
	_, err := payouts.Example{}.NewHandler(example.Deps{Env: func(string) (string, bool) { return "", false }, HTTP: http.DefaultClient})
	for _, v := range []string{payouts.TableVar, payouts.NoticesVar, payouts.GatewayVar} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("NewHandler without variables: %v, want %s named", err, v)
		}
	}
}

// TestTraffic: the same seed gives the same traffic, every message decodes to itself,
// and Expect counts each distinct applied payout once.
func TestTraffic(t *testing.T) {
	ex := payouts.Example{}
	a := ex.Traffic(rand.New(rand.NewPCG(1, 2)), "r", 20, 3)
	b := ex.Traffic(rand.New(rand.NewPCG(1, 2)), "r", 20, 3)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave other traffic")
	}
	groups := map[string]bool{}
	var cents, first int64
	for _, m := range a {
		d, err := ex.Decode([]byte(m.Body))
		if err != nil || d != m {
			t.Fatalf("%s decodes to %+v, %v", m.Body, d, err)
		}
		groups[m.Group] = true
		p, _ := payouts.Decode([]byte(m.Body))
		if m.Group == a[0].Group {
			cents += p.AmountCents
		}
		if m.ID == a[0].ID {
			first = p.AmountCents
		}
	}
	if len(groups) > 3 {
		t.Errorf("%d groups, want at most 3", len(groups))
	}
	st, err := ex.Expect(a, append(a, a[0]))
	if err != nil || st[a[0].Group+" paid_cents"] != cents {
		t.Fatalf("Expect = %v, %v; want %d cents for %s", st, err, cents, a[0].Group)
	}
	st, _ = ex.Expect(a, a[:1])
	if st[a[0].Group+" paid_cents"] != first || st[a[0].Group+" payout_count"] != 1 {
		t.Errorf("Expect of one payout = %v", st)
	}
	if reason := ex.LeaseOnly(); !strings.Contains(reason, "step") {
		t.Errorf("LeaseOnly = %q", reason)
	}
}

func TestDecode(t *testing.T) {
	p, err := payouts.Decode([]byte(`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":1250}`))
	if err != nil || p != (payouts.Payout{PayoutID: "po-1", PayeeID: "pe-1", AmountCents: 1250}) || payouts.Key(p) != "payout:po-1" {
		t.Fatalf("Decode = %+v, %v", p, err)
	}
	for body, want := range map[string]string{
		`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":0}`:                   "amount_cents: must be positive",
		`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":12.5}`:                "amount_cents",
		`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":1000000001}`:          "amount_cents",
		`{"payout_id":"po-1","payee_id":"payout#po-2","amount_cents":1}`:            "payee_id: must not begin with",
		`{"payout_id":"po-1","amount_cents":1}`:                                     "payee_id: missing",
		`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":1,"iban":"DE00"}`:     `"iban": unknown field`,
		`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":1,"payee_id":"pe-2"}`: "payee_id",
		`{"payout_id":"po-1","payee_id":`:                                           "body is not valid JSON",
	} {
		_, err := payouts.Decode([]byte(body))
		if !errors.Is(err, payouts.ErrInvalidPayout) || !errors.Is(err, example.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s) = %v, want an invalid payout naming %q", body, err, want)
		}
	}
}

// FuzzDecode runs its seeds in `go test`; `go test -fuzz FuzzDecode` explores beyond
// them. Decode never panics, and keeps exampletest.CheckDecoded's properties within the
// limits.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":1250}`))
	f.Add([]byte(`{"amount_cents":1,"payee_id":"Zahlungsempf\u00e4nger","payout_id":"p"}`))
	f.Add([]byte(`{"payout_id":"p","payee_id":"payout#x","amount_cents":1}`))
	f.Add([]byte(`{"payout_id":"p","payee_id":"e","amount_cents":1e3}`))
	f.Add([]byte(`{"payout_id":"p","payee_id":"e","amount_cents":1}}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		exampletest.CheckDecoded(t, payouts.Decode, payouts.ErrInvalidPayout, body, func(p payouts.Payout) error {
			if p.AmountCents <= 0 || p.AmountCents > payouts.MaxAmountCents || p.PayoutID == "" || p.PayeeID == "" ||
				len(p.PayoutID) > payouts.MaxIDBytes || len(p.PayeeID) > payouts.MaxIDBytes || strings.HasPrefix(p.PayeeID, payouts.EntryPrefix) {
				return errors.New("outside the limits")
			}
			return nil
		})
	})
}
