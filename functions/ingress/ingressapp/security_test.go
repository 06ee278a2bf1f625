package ingressapp_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// as is an HTTP client of the ingress at url: the function URL reports each of its
// requests as coming from one IAM caller.
type as struct {
	f   *fixture
	url string
}

// caller serves the fixture's ingress to the IAM caller iam, as a function URL reports it.
func (f *fixture) caller(t *testing.T, iam *ingressapp.IAMCaller) as {
	t.Helper()
	return as{f: f, url: f.serve(t, options{caller: iam})}
}

func (c as) do(t *testing.T, method, path, key, body string) reply {
	t.Helper()
	r, err := c.f.doAt(t, c.f.http, c.url, method, path, key, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (c as) post(t *testing.T, key, body string) reply {
	t.Helper()
	return c.do(t, http.MethodPost, ingressapp.RequestsPath, key, body)
}

func (c as) get(t *testing.T, key string) reply {
	t.Helper()
	return c.do(t, http.MethodGet, ingressapp.RequestsPath+"/"+key, "", "")
}

// IAM callers of the stack's account, as a function URL with AuthType AWS_IAM reports
// them (https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html#urls-payloads).
func assumedRole(role, session string) *ingressapp.IAMCaller {
	return &ingressapp.IAMCaller{AccessKey: "ASIA" + strings.ToUpper(role), AccountID: "111122223333", CallerID: "AROA" + strings.ToUpper(role) + ":" + session,
		UserARN: "arn:aws:sts::111122223333:assumed-role/" + role + "/" + session, UserID: "AROA" + strings.ToUpper(role) + ":" + session}
}

// TestCallersKeepTheirKeys (issue 28, finding 1): a second IAM caller of the ingress,
// with the first's keys, can neither read the first's request (404, not its status),
// nor learn that the key is in use (its own body is accepted, not 422), nor take a key
// first (the first caller's request under it is accepted and applied). A new session of
// the first caller's role (a renewed credential) is the same caller. And a producer that
// sends straight to the input queue under the key the consumer would see for the
// caller's request (the tag is a plain hash anyone can compute) is refused: the ingress
// did not sign it.
func TestCallersKeepTheirKeys(t *testing.T) {
	f := newFixture(t, options{})
	ms := f.traffic(t, 4)
	alice, mallory := f.caller(t, assumedRole("payments-client", "alice-1")), f.caller(t, assumedRole("intruder", "m-1"))
	aliceLater := f.caller(t, assumedRole("payments-client", "alice-2")) // the same role, a new session

	read, probe, block := f.key("read"), f.key("probe"), f.key("block")
	wantCode(t, "alice's request", alice.post(t, read, ms[0].Body), http.StatusAccepted)
	wantCode(t, "alice's other request", alice.post(t, probe, ms[1].Body), http.StatusAccepted)
	if r := mallory.get(t, read); r.code != http.StatusNotFound || strings.Contains(string(r.body), `"status":"`) {
		t.Errorf("mallory reads alice's key: %s, want 404", r)
	}
	wantCode(t, "mallory's request under alice's key, with another body (a probe)", mallory.post(t, probe, ms[2].Body), http.StatusAccepted)
	wantCode(t, "mallory takes a key first", mallory.post(t, block, ms[2].Body), http.StatusAccepted)
	wantCode(t, "alice's request under the key mallory took", alice.post(t, block, ms[3].Body), http.StatusAccepted)
	wantCode(t, "alice's retry from a new session of her role", aliceLater.post(t, read, ms[0].Body), http.StatusAccepted)
	wantProblem(t, "alice's own key with another body", aliceLater.post(t, read, ms[3].Body), http.StatusUnprocessableEntity, "another request body")

	// A producer with sqs:SendMessage on the input queue squats the key the consumer
	// sees for alice's next request: the client's key, and its caller-scoped form, each
	// with the deduplication id it gives, in the group alice's body will give.
	squat := f.key("squat")
	ns, _ := ingressapp.Namespace(ingressapp.ScopeCaller, assumedRole("payments-client", "x"))
	for _, k := range []string{squat, idem.CallerKey(ns, squat)} {
		if _, err := f.st.SQS.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(f.queue), MessageBody: aws.String(ms[2].Body), MessageGroupId: aws.String(outbox.DeduplicationID(ms[1].Group)),
			MessageDeduplicationId: aws.String(outbox.DeduplicationID(k)),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{
				idem.KeyAttribute:                {DataType: aws.String("String"), StringValue: aws.String(k)},
				sqsmsg.IngressSignatureAttribute: {DataType: aws.String("String"), StringValue: aws.String(strings.Repeat("0", 64))},
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	f.consume(t)
	wantCode(t, "alice's request under the squatted key", alice.post(t, squat, ms[1].Body), http.StatusAccepted)
	f.consume(t)

	for _, key := range []string{read, probe, block, squat} {
		st := alice.get(t, key).status(t)
		if st.Status != ingressapp.StatusCompleted {
			t.Errorf("alice's request %s: %+v, want completed", key, st)
		}
	}
	for _, key := range []string{probe, block} {
		if st := mallory.get(t, key).status(t); st.Status != ingressapp.StatusCompleted {
			t.Errorf("mallory's own request %s: %+v, want completed", key, st)
		}
	}
	if r := mallory.get(t, read); r.code != http.StatusNotFound {
		t.Errorf("mallory reads alice's completed request: %s, want 404", r)
	}
	forged := 0
	for _, m := range exampletest.ReceiveAll(t, f.st.SQS, f.env["DLQ_URL"]) {
		if strings.Contains(aws.ToString(m.MessageAttributes[sqsmsg.DLQReasonAttribute].StringValue), idem.ErrForgedKey.Error()) {
			forged++
		}
		if err := f.keys(t).VerifyDeadLetter(m); err != nil {
			t.Errorf("the consumer's dead letter does not carry its signature: %v", err)
		}
	}
	if forged != 1 {
		t.Errorf("%d dead letters refused as a forged key, want the squatter's one", forged)
	}
}

// TestSharedKeyScope: with INGRESS_KEY_SCOPE=shared, every caller shares the keys, as a
// team that wants them shared across roles sets it on purpose: the second caller reads
// the first's request and gets 422 with another body. Apart from direct producers'
// keys still (the message is signed, its key in the HTTP callers' namespace).
func TestSharedKeyScope(t *testing.T) {
	f := newFixture(t, options{env: map[string]string{"INGRESS_KEY_SCOPE": ingressapp.ScopeShared}})
	ms := f.traffic(t, 2)
	one, two := f.caller(t, assumedRole("team-a", "s")), f.caller(t, assumedRole("team-b", "s"))
	key := f.key("shared")
	wantCode(t, "the first caller", one.post(t, key, ms[0].Body), http.StatusAccepted)
	wantCode(t, "the second caller reads it", two.get(t, key), http.StatusOK)
	wantProblem(t, "the second caller with another body", two.post(t, key, ms[1].Body), http.StatusUnprocessableEntity, "another request body")
	msgs := f.inputMessages(t)
	if len(msgs) != 1 || keyOf(msgs[0]) != idem.CallerKey("shared", key) {
		t.Fatalf("input queue %v, want one message under the shared namespace's key", msgs)
	}
}

// accessDenied fails every commit of the consumer as AWS answers a role without the
// grant: its message names the account, the role, the function and the table.
type accessDenied struct{ persistence.DynamoDBAPI }

const deniedText = "User: arn:aws:sts::111122223333:assumed-role/prod-ConsumerRole-X/prod-ConsumerFunction-Y is not authorized to perform: " +
	"dynamodb:UpdateItem on resource: arn:aws:dynamodb:eu-west-1:111122223333:table/prod-LedgerTable-Z"

func (accessDenied) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return nil, &smithy.GenericAPIError{Code: "AccessDeniedException", Message: deniedText}
}

// TestStatusShowsNoInternals (issue 28, finding 3): a request whose consumer failed with
// an AWS error naming the account, its roles and tables is reported to its caller by
// category (retrying) and the consumer's request id, to find the error in its logs;
// the error itself stays in the consumer's record.
func TestStatusShowsNoInternals(t *testing.T) {
	f := newFixture(t, options{})
	m := f.traffic(t, 1)[0]
	key := f.key("denied")
	wantCode(t, "POST", f.post(t, key, m.Body), http.StatusAccepted)
	f.consumeWith(t, func(api persistence.DynamoDBAPI) persistence.DynamoDBAPI { return accessDenied{api} })
	r := f.get(t, key)
	st := r.status(t)
	for _, secret := range []string{"111122223333", "arn:aws", "AccessDenied", "prod-"} {
		if bytes.Contains(r.body, []byte(secret)) {
			t.Errorf("the status shows %q: %s", secret, r.body)
		}
	}
	if st.Status != ingressapp.StatusInProgress || st.Category != string(persistence.CategoryRetrying) || st.RequestID == "" {
		t.Errorf("status %+v, want in_progress, retrying, with the consumer's request id", st)
	}
	if rec := f.consumerRecord(t, f.scoped(key)); !strings.Contains(rec.Error, deniedText) || rec.Owner != st.RequestID {
		t.Errorf("the consumer's record: error %q, owner %q; want the raw error, and the request id the status gives", rec.Error, rec.Owner)
	}
}

// TestLogsGiveNoKeyAway (issue 28, finding 6): neither the ingress's nor the consumer's
// log lines carry a key, its plain hash (a guessable key is found by hashing guesses),
// or a message group (the ledger's is the account id) in clear: keys and groups are
// named by their hash keyed with the stack's secret.
func TestLogsGiveNoKeyAway(t *testing.T) {
	f := newFixture(t, options{})
	m := f.traffic(t, 1)[0]
	key := f.key("logged")
	wantCode(t, "POST", f.post(t, key, m.Body), http.StatusAccepted)
	consumer := f.consume(t)
	wantCode(t, "GET", f.get(t, key), http.StatusOK)
	ingress := f.logs.String()
	for who, logs := range map[string]string{"ingress": ingress, "consumer": consumer} {
		for _, leak := range []string{key, idem.HashKey(key), idem.HashKey(f.scoped(key)), `"group":`, outbox.DeduplicationID(m.Group)} {
			if strings.Contains(logs, leak) {
				t.Errorf("the %s's logs carry %q:\n%s", who, leak, logs)
			}
		}
		if !strings.Contains(logs, `"key_hash":"`+f.keys(t).LogHash(f.scoped(key))+`"`) {
			t.Errorf("the %s's logs lack the key's keyed hash, which an operator finds its lines by:\n%s", who, logs)
		}
	}
	if !strings.Contains(consumer, `"group_hash":"`+f.keys(t).LogHash(outbox.DeduplicationID(m.Group))+`"`) {
		t.Errorf("the consumer's logs lack the group's keyed hash:\n%s", consumer)
	}
}

// TestAccountScopeNeedsTheAccount: under the account scope, a request whose IAM caller
// names no account is refused (403), and nothing is sent.
func TestAccountScopeNeedsTheAccount(t *testing.T) {
	f := newFixture(t, options{env: map[string]string{"INGRESS_KEY_SCOPE": ingressapp.ScopeAccount},
		caller: &ingressapp.IAMCaller{UserARN: "arn:aws:iam::111122223333:user/ci", CallerID: "AIDAUSER"}})
	m := f.traffic(t, 1)[0]
	wantCode(t, "POST without an account", f.post(t, f.key("no-account"), m.Body), http.StatusForbidden)
	wantCode(t, "GET without an account", f.get(t, f.key("no-account")), http.StatusForbidden)
	if n := f.sends(); n != 0 {
		t.Errorf("%d sends, want none", n)
	}
}

// TestNamespace: whose requests share keys under each scope. Every session of a role is
// the role (whoever may assume it names the session); users, roles of two accounts, and
// no caller at all are told apart.
func TestNamespace(t *testing.T) {
	user := &ingressapp.IAMCaller{AccountID: "111122223333", UserARN: "arn:aws:iam::111122223333:user/ci", CallerID: "AIDAUSER"}
	other := assumedRole("payments-client", "s1")
	other.AccountID, other.UserARN = "444455556666", "arn:aws:sts::444455556666:assumed-role/payments-client/s1"
	cases := []struct {
		scope string
		a, b  *ingressapp.IAMCaller
		same  bool
	}{
		{ingressapp.ScopeCaller, assumedRole("payments-client", "s1"), assumedRole("payments-client", "s2"), true},
		{ingressapp.ScopeCaller, assumedRole("payments-client", "s1"), assumedRole("payments-clients", "s1"), false},
		{ingressapp.ScopeCaller, assumedRole("payments-client", "s1"), other, false},
		{ingressapp.ScopeCaller, assumedRole("a", "b/c"), assumedRole("a", "b"), true},
		{ingressapp.ScopeCaller, user, assumedRole("ci", "s"), false},
		{ingressapp.ScopeAccount, user, assumedRole("payments-client", "s1"), true},
		{ingressapp.ScopeAccount, user, other, false},
		{ingressapp.ScopeShared, user, other, true},
		{ingressapp.ScopeShared, user, nil, true},
	}
	for _, c := range cases {
		na, oka := ingressapp.Namespace(c.scope, c.a)
		nb, okb := ingressapp.Namespace(c.scope, c.b)
		if !oka || !okb || (na == nb) != c.same {
			t.Errorf("scope %s: %q and %q (%v, %v): same %v, want %v", c.scope, na, nb, oka, okb, na == nb, c.same)
		}
	}
	for _, scope := range []string{ingressapp.ScopeCaller, ingressapp.ScopeAccount} {
		if ns, ok := ingressapp.Namespace(scope, nil); ok {
			t.Errorf("scope %s without a caller: %q", scope, ns)
		}
	}
	if p := ingressapp.Principal(assumedRole("payments-client", "alice")); p != "arn:aws:sts::111122223333:assumed-role/payments-client" {
		t.Errorf("Principal of a role's session = %q, want the role's ARN without the session's name", p)
	}
	// Only an STS session's ARN is cut; a caller without an ARN is its caller id; an ARN
	// of another shape is kept whole.
	for caller, want := range map[ingressapp.IAMCaller]string{
		{CallerID: "AIDAUSER"}: "AIDAUSER",
		{UserARN: "arn:aws:iam::111122223333:assumed-role/r/s", CallerID: "X"}: "arn:aws:iam::111122223333:assumed-role/r/s",
		{UserARN: "arn:aws:sts::111122223333:federated-user/bob"}:              "arn:aws:sts::111122223333:federated-user/bob",
		{UserARN: "not-an-arn"}: "not-an-arn",
	} {
		if p := ingressapp.Principal(&caller); p != want {
			t.Errorf("Principal(%+v) = %q, want %q", caller, p, want)
		}
	}
	if p := ingressapp.Principal(nil); p != "" {
		t.Errorf("Principal(nil) = %q", p)
	}
}
