package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
	"github.com/idemgo/sqs-lambda-consumer/internal/stacksecret"
)

// recordFlags are the flags that locate an idempotency record.
type recordFlags struct {
	scope, table, caller *string
	hash                 *bool
}

func addRecordFlags(flags *flag.FlagSet) *recordFlags {
	return &recordFlags{
		scope: flags.String("scope", "", "idempotency scope (default $IDEMPOTENCY_SCOPE, which `idemctl up` exports from the template's ScopeName)"),
		table: flags.String("table", "", "idempotency table (default $IDEMPOTENCY_TABLE)"),
		hash:  flags.Bool("hash-keys", false, "the consumer stores every key hashed (idem.Config.HashKeys)"),
		caller: flags.String("http-caller", "", "KEY is the Idempotency-Key this IAM caller (`ARN`, as the ingress logs it) sent to the ingress: "+
			"the record is the one of its key in the caller's namespace, under $INGRESS_KEY_SCOPE (default caller)"),
	}
}

// recordRef is a located record: its store and partition key.
type recordRef struct {
	store *persistence.DynamoStore
	table string
	scope string
	key   string // as the producer set it
	pk    string // the record's partition key
	// logHash is the key's hash as the functions log it (key_hash), "" without the
	// stack's secret.
	logHash string
}

func (rf *recordFlags) open(ctx context.Context, env lookupEnv, key string) (*recordRef, error) {
	table := setting(*rf.table, env, "IDEMPOTENCY_TABLE")
	if table == "" {
		return nil, errNotSet("IDEMPOTENCY_TABLE", "table")
	}
	scope := setting(*rf.scope, env, "IDEMPOTENCY_SCOPE")
	if scope == "" {
		return nil, errNotSet("IDEMPOTENCY_SCOPE", "scope")
	}
	if *rf.caller != "" {
		ikey, err := httpCallerKey(*rf.caller, key, env)
		if err != nil {
			return nil, err
		}
		key = ikey
	}
	pk, err := idem.RecordKey(scope, key, *rf.hash)
	if err != nil {
		return nil, err
	}
	cfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return nil, err
	}
	keys, err := stacksecret.Keys(ctx, env, cfg)
	if err != nil {
		return nil, err
	}
	// The record's place in the table: the consumer's layout variables (IDEMPOTENCY_SORT_KEY,
	// IDEMPOTENCY_ATTRIBUTE_NAMES, ...), with the table from --table or the environment.
	er := envconf.New(func(name string) (string, bool) {
		if name == "IDEMPOTENCY_TABLE" {
			return table, true
		}
		return env(name)
	})
	layout := er.Layout()
	if err := er.Err(); err != nil {
		return nil, err
	}
	store, err := persistence.NewDynamoStoreLayout(dynamodb.NewFromConfig(cfg), layout)
	if err != nil {
		return nil, err
	}
	return &recordRef{store: store, table: table, scope: scope, key: key, pk: pk, logHash: keys.LogHash(key)}, nil
}

// httpCallerKey is the key the ingress sends the Idempotency-Key key of the IAM caller
// arn under (ingressapp.Namespace, idem.CallerKey), in the key scope INGRESS_KEY_SCOPE.
func httpCallerKey(arn, key string, env lookupEnv) (string, error) {
	scope := setting("", env, "INGRESS_KEY_SCOPE")
	if scope == "" {
		scope = ingressapp.ScopeCaller
	}
	account := ""
	if parts := strings.SplitN(arn, ":", 6); len(parts) == 6 {
		account = parts[4]
	}
	ns, ok := ingressapp.Namespace(scope, &ingressapp.IAMCaller{UserARN: arn, AccountID: account})
	if !ok {
		return "", fmt.Errorf("--http-caller %q: not an IAM ARN the key scope %q can place", arn, scope)
	}
	return idem.CallerKey(ns, key), nil
}

// get reads the record, expired or not: Store.Get with the zero time counts no record as
// expired, so inspect can show one that DynamoDB's TTL has not deleted yet.
func (r *recordRef) get(ctx context.Context) (*persistence.Record, error) {
	rec, err := r.store.Get(ctx, r.pk, time.Time{})
	if errors.Is(err, idem.ErrNotFound) {
		return nil, fmt.Errorf("no record for key %q (scope %s) in table %s", r.key, r.scope, r.table)
	}
	if err != nil {
		return nil, tableError(r.table, err)
	}
	return rec, nil
}

// runInspect prints the idempotency record of a key.
func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("inspect", stderr)
	rf := addRecordFlags(flags)
	asJSON := flags.Bool("json", false, "print the record as JSON")
	ingressTable := flags.String("ingress-table", "", "the ingress's table, whose record of the key is shown too (default $INGRESS_TABLE; unset: not shown)")
	pos, code, ok := parseArgs(flags, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(flags, stderr, "want one KEY (the idempotency key as the producer set it, e.g. payment:pay-1-00000)")
	}
	ref, err := rf.open(ctx, env, pos[0])
	if err != nil {
		return fail(stderr, "inspect", err)
	}
	rec, err := ref.get(ctx)
	if err != nil {
		return fail(stderr, "inspect", err)
	}
	view := newRecordView(ref, rec, time.Now())
	table := setting(*ingressTable, env, "INGRESS_TABLE")
	if table != "" {
		view.Ingress, view.ingressErr = readIngress(ctx, env, ref, table)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(view); err != nil {
			return fail(stderr, "inspect", err)
		}
		return exitOK
	}
	view.print(stdout)
	if table != "" {
		fmt.Fprintf(stdout, "\nthe ingress's record (%s)\n", table)
		if view.ingressErr != "" {
			fmt.Fprintf(stdout, "  %s\n", view.ingressErr)
		} else {
			printIngressView(stdout, view.Ingress)
		}
	}
	return exitOK
}

// recordView is a record as inspect shows it; it is also the --json form.
type recordView struct {
	Key           string     `json:"key"`
	Record        string     `json:"record"`
	KeyHash       string     `json:"key_hash,omitempty"` // as the functions log it
	Status        string     `json:"status"`
	Attempt       int        `json:"attempt"`
	Owner         string     `json:"owner,omitempty"`
	LeaseToken    string     `json:"lease_token,omitempty"` // shortened
	LeaseUntil    *time.Time `json:"lease_until,omitempty"`
	LeaseExpired  bool       `json:"lease_expired"`
	Inflight      string     `json:"inflight_shard,omitempty"`
	Steps         []string   `json:"steps"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`
	Expired       bool       `json:"expired"`
	Error         string     `json:"error,omitempty"`
	Category      string     `json:"error_category,omitempty"` // what the ingress tells HTTP callers
	Public        string     `json:"error_public,omitempty"`
	RefusedBy     string     `json:"refused_by,omitempty"` // the delivery a business rule refused: <receive count>/<message id>
	Retryable     *bool      `json:"retryable,omitempty"`
	ResponseBytes int        `json:"response_bytes"`
	// OutboxPending lists the queues of outbound messages committed but not yet sent;
	// OutboxSent counts those sent.
	OutboxPending []string `json:"outbox_pending,omitempty"`
	OutboxSent    int      `json:"outbox_sent"`
	// OutboxDead lists the outbound messages their queue refused for good, which went
	// to the dead-letter queue instead (dlq-outbound-queue; idemctl redrive sends them
	// back once the cause is fixed).
	OutboxDead  []persistence.DeadMessage `json:"outbox_dead_lettered,omitempty"`
	PayloadHash string                    `json:"payload_hash,omitempty"`
	// RefusedHash: completed for another payload, the fingerprint of the one refused.
	RefusedHash string     `json:"refused_hash,omitempty"`
	CreatedAt   *time.Time `json:"created_at,omitempty"`
	UpdatedAt   *time.Time `json:"updated_at,omitempty"`
	// Ingress is the ingress's record of the key (with INGRESS_TABLE): whether its HTTP
	// request's message was sent. nil when there is none or it was not read.
	Ingress *ingressapp.RecordView `json:"ingress,omitempty"`

	now        time.Time
	ingressErr string // why Ingress is nil when it was read
}

func newRecordView(ref *recordRef, rec *persistence.Record, now time.Time) *recordView {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	v := &recordView{
		Key: ref.key, Record: rec.Key, KeyHash: ref.logHash, Status: string(rec.Status), Attempt: rec.Attempt, Owner: rec.Owner,
		LeaseToken: shortToken(rec.LeaseToken), LeaseUntil: opt(rec.LeaseUntil),
		LeaseExpired: !rec.LeaseUntil.IsZero() && !now.Before(rec.LeaseUntil),
		Inflight:     rec.Inflight, Steps: append([]string{}, rec.Steps...),
		ExpiresAt: opt(rec.ExpiresAt), Expired: !rec.ExpiresAt.IsZero() && rec.ExpiresAt.Before(now),
		Error: rec.Error, Category: string(rec.Category), Public: rec.Public, RefusedBy: rec.RefusedBy.String(), ResponseBytes: len(rec.Response), PayloadHash: rec.PayloadHash, RefusedHash: rec.RefusedHash,
		CreatedAt: opt(rec.CreatedAt), UpdatedAt: opt(rec.UpdatedAt), now: now,
	}
	if rec.Status == persistence.StatusFailed {
		v.Retryable = &rec.Retryable
	}
	for _, m := range rec.Outbox {
		v.OutboxPending = append(v.OutboxPending, m.QueueURL)
	}
	v.OutboxSent = rec.Sent
	v.OutboxDead = rec.Dead
	return v
}

// shortToken shows enough of a lease token to tell two apart, not enough to write with.
func shortToken(tok string) string {
	if len(tok) <= 8 {
		return tok
	}
	return tok[:8] + "…"
}

func (v *recordView) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", name, fmt.Sprintf(format, args...))
	}
	row("key", "%s", v.Key)
	row("record", "%s", v.Record)
	if v.KeyHash != "" {
		row("key hash", "%s (key_hash in the functions' log lines)", v.KeyHash)
	}
	status := v.Status
	if v.Expired {
		status += " (expired: counts as absent, DynamoDB deletes it later)"
	}
	row("status", "%s", status)
	row("attempt", "%d", v.Attempt)
	row("owner", "%s", orDash(v.Owner))
	row("lease token", "%s", orDash(v.LeaseToken))
	if v.LeaseUntil != nil {
		row("lease until", "%s (%s)", stamp(*v.LeaseUntil), relative(*v.LeaseUntil, v.now))
	} else {
		row("lease until", "-")
	}
	if v.Inflight != "" {
		row("in-flight shard", "%s (listed in the inflight index the reaper reads)", v.Inflight)
	}
	row("steps", "%s", orDash(strings.Join(v.Steps, ", ")))
	if v.ExpiresAt != nil {
		row("expires at", "%s (TTL, %s)", stamp(*v.ExpiresAt), relative(*v.ExpiresAt, v.now))
	} else {
		row("expires at", "- (never)")
	}
	if v.Status == string(persistence.StatusFailed) {
		row("error", "%s", orDash(v.Error))
		if v.Category != "" {
			row("category", "%s (what the ingress tells HTTP callers, with the reason %q)", v.Category, v.Public)
		}
		retry := "no: later deliveries get this error without running"
		if v.Retryable != nil && *v.Retryable {
			retry = "yes: the next delivery takes the key over"
		}
		row("retryable", "%s", retry)
	}
	row("response", "%d bytes", v.ResponseBytes)
	if len(v.OutboxPending) > 0 {
		row("outbound messages", "%d committed, not sent yet (to %s): the next delivery of the key, or the reaper, sends them", len(v.OutboxPending), strings.Join(slices.Compact(slices.Sorted(slices.Values(v.OutboxPending))), ", "))
	} else if v.OutboxSent > 0 || len(v.OutboxDead) > 0 {
		row("outbound messages", "%d sent", v.OutboxSent)
	}
	for _, d := range v.OutboxDead {
		row("  dead-lettered", "message %d, refused by %s: %s (in the dead-letter queue; idemctl redrive sends it back there)", d.Index, d.Queue, d.Reason)
	}
	row("payload hash", "%s", orDash(shortToken(v.PayloadHash)))
	if v.RefusedHash != "" {
		row("refused payload hash", "%s (completed for the payload above, this one refused)", shortToken(v.RefusedHash))
	}
	if v.CreatedAt != nil {
		row("created at", "%s", stamp(*v.CreatedAt))
	}
	if v.UpdatedAt != nil {
		row("updated at", "%s", stamp(*v.UpdatedAt))
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// relative says how far t is from now: "expired 3m12s ago" or "4m48s left".
func relative(t, now time.Time) string {
	d := t.Sub(now)
	r := time.Second
	if d > -time.Second && d < time.Second {
		r = time.Millisecond
	}
	if d <= 0 {
		return "expired " + (-d).Round(r).String() + " ago"
	}
	return d.Round(r).String() + " left"
}
