package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"github.com/idemgo/sqs-lambda-consumer/internal/tracing"
)

// files is a repeatable flag.
type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

// recordIDPattern is what telemetry.RecordTraceID gives: the scope and the key's short hash.
var recordIDPattern = regexp.MustCompile(`^[^#]+#h:[0-9a-f]{16}$`)

// runTrace draws one key's life from trace files (--trace-file of run, serve and demo)
// and the records: every delivery and function that touched it, who held its lease and
// when, and what its records say now.
func runTrace(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("trace", stderr)
	rf := addRecordFlags(flags)
	var paths files
	flags.Var(&paths, "trace-file", "a trace `file` written by idemctl run, serve or demo --trace-file (repeatable; default $TRACING_FILE)")
	record := flags.String("record", "", "the record's id as the spans and idemctl demo show it (scope#h:…), instead of KEY")
	ingressTable := flags.String("ingress-table", "", "the ingress's table (default $INGRESS_TABLE; unset: its record is not read)")
	noRecords := flags.Bool("no-records", false, "read the trace files only, not the tables")
	pos, code, ok := parseArgs(flags, args)
	if !ok {
		return code
	}
	if (len(pos) == 1) == (*record != "") || len(pos) > 1 {
		return usageError(flags, stderr, "want one KEY (the idempotency key as the producer set it), or --record ID")
	}
	if *record != "" && !recordIDPattern.MatchString(*record) {
		return usageError(flags, stderr, "--record %q is not a record id (scope#h: and 16 hex digits)", *record)
	}
	if len(paths) == 0 {
		if f := setting("", env, tracing.VarFile); f != "" {
			paths = files{f}
		}
	}
	id, key := *record, ""
	if id == "" {
		key = pos[0]
		scope := setting(*rf.scope, env, "IDEMPOTENCY_SCOPE")
		if scope == "" {
			return fail(stderr, "trace", errNotSet("IDEMPOTENCY_SCOPE", "scope"))
		}
		rk := key
		if *rf.caller != "" { // an HTTP caller's Idempotency-Key: its record is its caller's key's
			var err error
			if rk, err = httpCallerKey(*rf.caller, key, env); err != nil {
				return fail(stderr, "trace", err)
			}
		}
		pk, err := idem.RecordKey(scope, rk, *rf.hash)
		if err != nil {
			return fail(stderr, "trace", err)
		}
		id = telemetry.RecordTraceID(pk)
	}
	var spans []tracing.Span
	if len(paths) > 0 {
		var skipped int
		var err error
		if spans, skipped, err = tracing.ReadFiles(paths...); err != nil {
			return fail(stderr, "trace", err)
		}
		if skipped > 0 {
			fmt.Fprintf(stderr, "trace: %d lines of %s are not spans (a process killed while writing?): skipped\n", skipped, strings.Join(paths, ", "))
		}
	}
	life := newLife(spans, id)
	if key != "" {
		fmt.Fprintf(stdout, "key %s: record %s\n", key, id)
	} else {
		fmt.Fprintf(stdout, "record %s\n", id)
	}
	if len(paths) == 0 {
		fmt.Fprintln(stdout, "no trace file (--trace-file, or $TRACING_FILE): the records only")
	} else {
		fmt.Fprintf(stdout, "%d spans of it in %s\n", len(life.spans), strings.Join(paths, ", "))
	}
	life.print(stdout)
	if key != "" && !*noRecords {
		printRecords(ctx, stdout, rf, env, key, setting(*ingressTable, env, "INGRESS_TABLE"))
	}
	if len(life.spans) == 0 && len(paths) > 0 {
		fmt.Fprintf(stdout, "\nnothing in the trace files touched record %s\n", id)
	}
	return exitOK
}

// life is the spans of one record: those that carry its id, with every span under them.
type life struct {
	id    string
	spans []tracing.Span
	known map[string]tracing.Span // every span of the files, by trace and id
	kids  map[string][]tracing.Span
}

func spanKey(trace, id string) string { return trace + "/" + id }

func newLife(all []tracing.Span, id string) *life {
	l := &life{id: id, known: map[string]tracing.Span{}, kids: map[string][]tracing.Span{}}
	for _, s := range all {
		l.known[spanKey(s.Trace, s.ID)] = s
		if s.Parent != "" {
			l.kids[spanKey(s.Trace, s.Parent)] = append(l.kids[spanKey(s.Trace, s.Parent)], s)
		}
	}
	seen := map[string]bool{}
	var walk func(s tracing.Span)
	walk = func(s tracing.Span) {
		k := spanKey(s.Trace, s.ID)
		if seen[k] {
			return
		}
		seen[k] = true
		l.spans = append(l.spans, s)
		for _, c := range l.kids[k] {
			walk(c)
		}
	}
	for _, s := range all {
		if s.Attr(telemetry.AttrRecord) == id || s.Attr(ingressapp.AttrConsumerRecord) == id {
			walk(s)
		}
	}
	slices.SortStableFunc(l.spans, func(a, b tracing.Span) int { return a.Start.Compare(b.Start) })
	return l
}

func (l *life) selected(s tracing.Span) bool {
	return slices.ContainsFunc(l.spans, func(o tracing.Span) bool { return o.Trace == s.Trace && o.ID == s.ID })
}

// group is a part of the record's life: one span with everything under it, or the spans
// of one record span that never ended (its process died).
type group struct {
	roots  []tracing.Span
	orphan bool // their parent never ended
}

func (l *life) groups() []group {
	var out []group
	byParent := map[string]int{}
	for _, s := range l.spans {
		p, hasParent := l.known[spanKey(s.Trace, s.Parent)]
		switch {
		case hasParent && l.selected(p):
			continue // drawn under its parent
		case s.Parent != "" && !hasParent && s.Name != telemetry.SpanProcess && s.Service != "ingress":
			k := spanKey(s.Trace, s.Parent)
			if i, ok := byParent[k]; ok {
				out[i].roots = append(out[i].roots, s)
				continue
			}
			byParent[k] = len(out)
			out = append(out, group{roots: []tracing.Span{s}, orphan: true})
		default:
			out = append(out, group{roots: []tracing.Span{s}})
		}
	}
	return out
}

func (l *life) print(w io.Writer) {
	for _, g := range l.groups() {
		first := g.roots[0]
		fmt.Fprintf(w, "\n%s\n", l.heading(first, g.orphan))
		for _, r := range g.roots {
			l.draw(w, r, 1)
		}
		if g.orphan {
			end := first.End
			for _, r := range g.roots {
				end = later(end, l.lastEnd(r))
			}
			fmt.Fprintf(w, "  %s  its process left no span after this: it died (killed, or timed out) holding what it held\n", clock(end))
		}
	}
	l.printHolders(w)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (l *life) lastEnd(s tracing.Span) time.Time {
	end := s.End
	for _, c := range l.kids[spanKey(s.Trace, s.ID)] {
		end = later(end, l.lastEnd(c))
	}
	return end
}

func who(s tracing.Span) string {
	if s.PID != 0 {
		return fmt.Sprintf("%s (pid %d)", orDash(s.Service), s.PID)
	}
	return orDash(s.Service)
}

func (l *life) heading(s tracing.Span, orphan bool) string {
	switch {
	case orphan:
		return fmt.Sprintf("%s, trace %s: a delivery whose record span never ended", who(s), s.Trace)
	case s.Name == telemetry.SpanProcess:
		return fmt.Sprintf("%s, trace %s: delivery of message %s (receive %s): %s", who(s), s.Trace, s.Attr("messaging.message.id"),
			orDash(s.Attr(telemetry.AttrReceiveCount)), orDash(s.Attr(telemetry.AttrOutcome)))
	case s.Service == "ingress":
		return fmt.Sprintf("%s, trace %s: %s answered %s (%s)", who(s), s.Trace, s.Name, s.Attr("http.response.status_code"), s.Attr(telemetry.AttrOutcome))
	case s.Name == telemetry.SpanReap:
		return fmt.Sprintf("%s, trace %s: a sweep", who(s), s.Trace)
	}
	return fmt.Sprintf("%s, trace %s", who(s), s.Trace)
}

func (l *life) draw(w io.Writer, s tracing.Span, depth int) {
	line := fmt.Sprintf("  %s %7s %s%s", clock(s.Start), "+"+s.End.Sub(s.Start).Round(time.Millisecond).String(), strings.Repeat("  ", depth-1), s.Name)
	if d := details(s); d != "" {
		line += ": " + d
	}
	if s.Error != "" {
		line += "  [error: " + s.Error + "]"
	}
	fmt.Fprintln(w, line)
	kids := slices.Clone(l.kids[spanKey(s.Trace, s.ID)])
	slices.SortStableFunc(kids, func(a, b tracing.Span) int { return a.Start.Compare(b.Start) })
	for _, c := range kids {
		l.draw(w, c, depth+1)
	}
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// stampOf formats an RFC 3339 attribute as a clock time ("?" when it is not one).
func stampOf(v string) string {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return "?"
	}
	return clock(t)
}

// details says what a span of idem's did, from its attributes.
func details(s tracing.Span) string {
	a := s.Attr
	switch s.Name {
	case telemetry.SpanProcess:
		return fmt.Sprintf("outcome %s (%s)", orDash(a(telemetry.AttrOutcome)), orDash(a("idem.batch_outcome")))
	case telemetry.SpanAcquire:
		switch d := a(telemetry.AttrDecision); d {
		case telemetry.DecisionAcquired:
			return fmt.Sprintf("acquired: attempt %s, holder %s (token %s), lease until %s", a(telemetry.AttrAttempt), a(telemetry.AttrOwner), a(telemetry.AttrLeaseToken), stampOf(a(telemetry.AttrLeaseUntil)))
		case telemetry.DecisionTakenOver:
			return fmt.Sprintf("taken over from %s (%s, lease until %s): attempt %s, holder %s (token %s), lease until %s", orDash(a(telemetry.AttrPreviousOwner)),
				a(telemetry.AttrPreviousStatus), stampOf(a(telemetry.AttrPreviousLease)), a(telemetry.AttrAttempt), a(telemetry.AttrOwner), a(telemetry.AttrLeaseToken), stampOf(a(telemetry.AttrLeaseUntil)))
		case telemetry.DecisionInProgress:
			if a(telemetry.AttrOwner) != "" {
				return fmt.Sprintf("in progress: held by %s until %s", a(telemetry.AttrOwner), stampOf(a(telemetry.AttrLeaseUntil)))
			}
			return "in progress elsewhere"
		default:
			return d
		}
	case telemetry.SpanStep:
		if a(telemetry.AttrStepDone) == "true" {
			return a(telemetry.AttrStep) + " (done by an earlier attempt: skipped)"
		}
		return a(telemetry.AttrStep)
	case telemetry.SpanHandler:
		return "attempt " + a(telemetry.AttrAttempt)
	case telemetry.SpanCommit:
		return fmt.Sprintf("%s writes, %s outbound messages%s", orZero(a("idem.writes")), orZero(a(telemetry.AttrMessages)), map[bool]string{true: ", guarded (already applied)"}[a("idem.guarded") == "true"])
	case telemetry.SpanRelease:
		return "the lease released, failed (retryable " + a(telemetry.AttrRetryable) + ")"
	case telemetry.SpanSend:
		return fmt.Sprintf("%s outbound messages, %s dead-lettered", a(telemetry.AttrMessages), orZero(a(telemetry.AttrDeadLettered)))
	case telemetry.SpanReap:
		if a(telemetry.AttrReaped) == "true" {
			return fmt.Sprintf("failed the lease of %s (attempt %s, token %s, lease until %s), %sms past its end and the grace", a(telemetry.AttrPreviousOwner),
				a(telemetry.AttrAttempt), a(telemetry.AttrLeaseToken), stampOf(a(telemetry.AttrPreviousLease)), a(telemetry.AttrLate))
		}
		return fmt.Sprintf("the lease of %s had moved on (completed, extended or taken over)", a(telemetry.AttrPreviousOwner))
	}
	if s.Service == "ingress" && a(telemetry.AttrOutcome) != "" {
		return "answered " + a("http.response.status_code") + " " + a(telemetry.AttrOutcome)
	}
	return ""
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// holder is one acquisition of the key's lease.
type holder struct {
	attempt        int
	owner, token   string
	pid            int
	from           time.Time // zero: not seen acquiring (its spans are lost)
	until          string    // the lease end, as the span has it
	ends           []string
	parentTrace    string
	parentSpan     string
	processMissing bool
}

func (l *life) printHolders(w io.Writer) {
	hs := map[int]*holder{}
	get := func(n int) *holder {
		if hs[n] == nil {
			hs[n] = &holder{attempt: n}
		}
		return hs[n]
	}
	for _, s := range l.spans {
		n, _ := strconv.Atoi(s.Attr(telemetry.AttrAttempt))
		switch {
		case s.Name == telemetry.SpanAcquire && (s.Attr(telemetry.AttrDecision) == telemetry.DecisionAcquired || s.Attr(telemetry.AttrDecision) == telemetry.DecisionTakenOver):
			h := get(n)
			h.owner, h.token, h.pid, h.from, h.until = s.Attr(telemetry.AttrOwner), s.Attr(telemetry.AttrLeaseToken), s.PID, s.Start, s.Attr(telemetry.AttrLeaseUntil)
			h.parentTrace, h.parentSpan = s.Trace, s.Parent
			_, ok := l.known[spanKey(s.Trace, s.Parent)]
			h.processMissing = !ok
			if prev := s.Attr(telemetry.AttrPreviousOwner); prev != "" && n > 1 {
				p := get(n - 1)
				if p.owner == "" {
					p.owner, p.until = prev, s.Attr(telemetry.AttrPreviousLease)
				}
				p.ends = append(p.ends, "taken over at "+clock(s.Start)+" by "+h.owner)
			}
		case s.Name == telemetry.SpanReap && s.Attr(telemetry.AttrReaped) == "true":
			h := get(n)
			if h.owner == "" {
				h.owner, h.until, h.token = s.Attr(telemetry.AttrPreviousOwner), s.Attr(telemetry.AttrPreviousLease), s.Attr(telemetry.AttrLeaseToken)
			}
			h.ends = append(h.ends, "reaped at "+clock(s.End)+" (failed, retryable)")
		}
	}
	for _, s := range l.spans {
		for _, h := range hs {
			if h.parentSpan == "" || s.Trace != h.parentTrace || s.Parent != h.parentSpan {
				continue
			}
			switch {
			case s.Name == telemetry.SpanCommit && s.Error == "":
				h.ends = append(h.ends, "committed at "+clock(s.End))
			case s.Name == telemetry.SpanCommit:
				h.ends = append(h.ends, "its commit failed at "+clock(s.End))
			case s.Name == telemetry.SpanRelease:
				h.ends = append(h.ends, "released at "+clock(s.End)+" (its handler failed)")
			}
		}
	}
	if len(hs) == 0 {
		return
	}
	fmt.Fprintln(w, "\nlease holders")
	for _, n := range slices.Sorted(func(yield func(int) bool) {
		for n := range hs {
			if !yield(n) {
				return
			}
		}
	}) {
		h := hs[n]
		from := "not seen acquiring (its spans are not in the files)"
		if !h.from.IsZero() {
			from = "from " + clock(h.from)
		}
		pid := ""
		if h.pid != 0 {
			pid = fmt.Sprintf(" (pid %d)", h.pid)
		}
		ends := slices.Clone(h.ends)
		if h.processMissing && !slices.ContainsFunc(ends, func(e string) bool { return strings.HasPrefix(e, "committed") }) {
			ends = append([]string{"its process died holding it"}, ends...)
		}
		fmt.Fprintf(w, "  attempt %d  %s%s  %s, lease until %s", n, orDash(h.owner), pid, from, stampOf(h.until))
		if len(ends) > 0 {
			fmt.Fprintf(w, ": %s", strings.Join(ends, "; "))
		}
		fmt.Fprintln(w)
	}
}

// printRecords prints what the consumer's and the ingress's records of key say now.
func printRecords(ctx context.Context, w io.Writer, rf *recordFlags, env lookupEnv, key, ingressTable string) {
	fmt.Fprintln(w, "\nthe consumer's record now")
	ref, err := rf.open(ctx, env, key)
	var rec *persistence.Record
	if err == nil {
		rec, err = ref.get(ctx)
	}
	if err != nil {
		fmt.Fprintf(w, "  %v\n", err)
	} else {
		newRecordView(ref, rec, time.Now()).print(w)
		fmt.Fprintf(w, "\nwhat happened: %s\n", verdict(rec))
	}
	if ingressTable == "" {
		return
	}
	fmt.Fprintln(w, "\nthe ingress's record now")
	if ref == nil {
		return
	}
	v, why := readIngress(ctx, env, ref, ingressTable)
	if v == nil {
		fmt.Fprintf(w, "  %s\n", why)
		return
	}
	printIngressView(w, v)
}

// verdict is one sentence on what became of the key, from its record.
func verdict(rec *persistence.Record) string {
	switch rec.Status {
	case persistence.StatusCompleted:
		s := fmt.Sprintf("applied once, by attempt %d (%s) at %s", rec.Attempt, orDash(rec.Owner), stamp(rec.UpdatedAt))
		switch {
		case rec.Attempt == 2:
			s += ", after an earlier attempt lost the lease"
		case rec.Attempt > 2:
			s += fmt.Sprintf(", after %d earlier attempts lost the lease", rec.Attempt-1)
		}
		switch {
		case len(rec.Outbox) > 0:
			s += fmt.Sprintf("; %d outbound messages committed, not sent yet (the next delivery or the reaper sends them)", len(rec.Outbox))
		case rec.Sent > 0:
			s += fmt.Sprintf("; %d outbound messages sent", rec.Sent)
		}
		return s
	case persistence.StatusInProgress:
		return fmt.Sprintf("in progress: attempt %d held by %s until %s", rec.Attempt, orDash(rec.Owner), stamp(rec.LeaseUntil))
	case persistence.StatusFailed:
		if rec.Retryable {
			return fmt.Sprintf("not applied: attempt %d failed (%s); the next delivery takes it over", rec.Attempt, rec.Error)
		}
		return fmt.Sprintf("failed for good at attempt %d: %s (every delivery is answered with it; idemctl unlock clears it)", rec.Attempt, rec.Error)
	}
	return string(rec.Status)
}

func init() {
	commands = append(commands, command{"trace", "KEY [--trace-file FILE]... [--scope S] [--record ID] [--no-records]",
		"draw a key's life from trace files and its records: every delivery, function and call, who held its lease and when", runTrace})
}

// readIngress reads the ingress's record of the key of ref: the record, or why there is
// none to show.
func readIngress(ctx context.Context, env lookupEnv, ref *recordRef, table string) (*ingressapp.RecordView, string) {
	cfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return nil, err.Error()
	}
	v, err := ingressapp.ReadRecord(ctx, dynamodb.NewFromConfig(cfg), table, ref.scope, ref.key)
	if errors.Is(err, ingressapp.ErrNoRecord) {
		return nil, "none: no request came through the ingress under this key (or its record expired)"
	}
	if err != nil {
		return nil, tableError(table, err).Error()
	}
	return v, ""
}

// printIngressView prints the ingress's record of a key.
func printIngressView(w io.Writer, v *ingressapp.RecordView) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", name, fmt.Sprintf(format, args...))
	}
	row("record", "%s", v.Record)
	state := v.State
	switch v.State {
	case "QUEUED":
		state += " (its message is on the input queue: SQS took it)"
	case "SENDING":
		state += " (a request is sending its message)"
	case "UNSENT":
		state += " (its send failed: the next request of the key with the same body sends it)"
	}
	if v.Expired {
		state += " (expired: counts as absent)"
	}
	row("state", "%s", state)
	row("sending attempts", "%d", v.Attempt)
	row("message id", "%s", orDash(v.MessageID))
	if v.SendingUntil != nil {
		row("sending until", "%s", stamp(*v.SendingUntil))
	}
	row("consumer's record", "%s", orDash(v.ConsumerRecord))
	row("payload hash", "%s", orDash(shortToken(v.PayloadHash)))
	row("created at", "%s", stamp(v.CreatedAt))
	row("updated at", "%s", stamp(v.UpdatedAt))
	row("expires at", "%s", stamp(v.ExpiresAt))
	_ = tw.Flush()
}
