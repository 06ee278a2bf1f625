package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// The configuration a seed deploys: where the records live (the layouts the template
// and docs/storage.md offer), whether a second consumer shares the records' table,
// whether the ingress stands in front of the first consumer, and how far the
// environments' clocks drift apart. It is drawn from a source of its own (configRand),
// so that adding a kind of configuration leaves the seed's other draws as they were.

// layoutKind is where a consumer keeps its records.
type layoutKind int

const (
	layoutDefault    layoutKind = iota // a table of their own, partition key pk
	layoutPowertools                   // persistence.PowertoolsLayout: partition key id, Powertools' names
	layoutSortKey                      // a sort key under a static partition key value
	layoutPrefix                       // the business table, each record key after a prefix
	layoutFold                         // the business table, a guarded operation's journal entry is its record
)

func (k layoutKind) String() string {
	return [...]string{"default", "powertools", "sortkey", "prefix", "fold"}[k]
}

// maxDrift bounds how far an environment's clock is from the true one: any two clocks
// differ by at most 2*maxDrift (1 s). The lease grace must cover it (RELIABILITY.md):
// every grace the scenario draws is at least 2 s.
const maxDrift = 500 * time.Millisecond

// config is the deployment a seed draws.
type config struct {
	layout  layoutKind
	shared  bool // a second consumer keeps its records in the first one's table
	ingress bool // the ingress (ingressapp) in front of the first consumer
	drift   bool // the environments' clocks drift apart, within maxDrift of the true one
	steps   bool // the handler calls an outside service as recorded steps (lease mode only)
	// keyScope is the ingress's INGRESS_KEY_SCOPE: whose Idempotency-Keys two callers
	// share (ingressapp.ScopeCaller, ScopeAccount, ScopeShared).
	keyScope string
	// The edges of SQS (edges.go): the handler's outbound messages carry up to the
	// attributes SQS allows (attrs), some fill a small queue's MaximumMessageSize to the
	// byte (exact), and idem's own tracer runs in the consumers and reapers (spans, nil:
	// off).
	attrs, exact bool
	spans        *spans
	// beat: the stepping handler keeps a short lease and extends it before each step and
	// its commit (idem.Attempt.Extend), so its lease can end while it runs and be listed by
	// the reaper just before it is extended (the reap race: the extension must win).
	beat bool
	// slowReaper: the reaper's writes take seconds each (a reaper far from the table, or
	// throttled), so that between its listing and its reaps the leases it listed move on.
	slowReaper bool
	// fastReaper: a beating consumer's reaper sweeps every fastReaperEvery, and its writes
	// are slow (as slowReaper's): it lists a lease that lapsed during its holder's pause
	// often, and its reap may land after the holder extended it (the reap race: the
	// extension must win). Drawn after the consumers, so no other draw moves.
	fastReaper bool
	// keyWindow: the outside service forgets a key that long after it applied it
	// (0: never; 15 s, a minute or five), and the stepping handler says so
	// (idem.Service.KeyWindow, with the network's maxFlight); lookup: it gives the
	// service's lookup (idem.Service.Lookup), else a step past the window parks its
	// message, as it does when the lookup finds no call and the window is shorter than
	// maxFlight. dlqRetention is the consumer's DLQ_RETENTION (0: unset): how long a
	// record that has not completed outlives its dead letter. Drawn after fastReaper.
	keyWindow    time.Duration
	lookup       bool
	dlqRetention time.Duration
	// lateRedrive: once the world has settled and the clients have read their final
	// status, an operator redrives the input's dead letters past the records' TTL, at a
	// drawn time within the dead-letter queue's retention (dlqRetention, or for good when
	// unset), while the TTL process deletes what expired (run.go, lateRedrive). Drawn
	// after dlqRetention.
	lateRedrive bool
}

// fastReaperEvery is the period of a fast reaper (config.fastReaper).
const fastReaperEvery = 3 * time.Second

// configRand is the seed's source for its configuration.
func configRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0xc0f1)) }

// drawConfig draws the configuration; the ingress needs a FIFO input queue, steps the
// lease mode.
func drawConfig(r *rand.Rand, sc *scenario) config {
	c := config{layout: layoutKind(r.IntN(5))}
	c.shared = c.layout != layoutFold && r.IntN(4) == 0
	c.ingress = sc.fifo && r.IntN(3) == 0
	c.drift = r.IntN(2) == 0
	c.steps = sc.mode == idem.ModeLease && r.IntN(2) == 0
	c.keyScope = pick(r, ingressapp.ScopeCaller, ingressapp.ScopeCaller, ingressapp.ScopeAccount, ingressapp.ScopeShared)
	c.attrs = r.IntN(2) == 0
	c.exact = r.IntN(2) == 0
	if r.IntN(3) == 0 {
		c.spans = newSpans()
	}
	c.beat = c.steps && r.IntN(2) == 0
	c.slowReaper = r.IntN(3) == 0
	return c
}

// String is the configuration as the replay line and the summary name it.
func (c config) String() string {
	s := c.layout.String()
	if c.shared {
		s += "+shared"
	}
	if c.ingress {
		s += "+ingress"
	}
	if c.beat {
		s += "+beat"
	}
	if c.slowReaper {
		s += "+slowreaper"
	}
	if c.fastReaper {
		s += "+fastreaper"
	}
	if c.keyWindow > 0 {
		s += "+keywindow=" + c.keyWindow.String()
		if c.lookup {
			s += "+lookup"
		}
	}
	if c.lateRedrive {
		s += "+lateredrive"
	}
	return s
}

// consumer is one deployment of the consumer and its reaper: its scope, where its
// records live, its input queue, its pollers. The first (a) takes the scenario's
// settings; the second (b), when the table is shared, draws its own timeout and grace,
// so that a reaper that took the other's records for its own would reap them on the
// wrong schedule.
type consumer struct {
	name   string // a, b
	scope  string
	layout persistence.Layout
	fold   bool

	timeout, grace, visibility time.Duration
	checkVisibility            bool

	input, inputURL string
	slots           []*slot
	reaping         bool
	names           recordNames
	store           *persistence.DynamoStore // the oracle's reader of the records (straight on simdb)
	recs            map[string]recState      // the records as the table holds them, by record key (responses.go)
}

// recState is what the world needs of a record between two of its writes.
type recState struct {
	inflight, outbox bool  // in the in-flight index; with outbound messages pending
	exp              int64 // its TTL, in seconds (0: none)
}

// Names of the simulated tables and queues beyond the defaults.
const (
	ingressTable = "ingress"
	scopeB       = "simb"
)

// layoutFor is where consumer n (0: a, 1: b) keeps its records in a configuration of
// kind k: two consumers on one table keep theirs apart by scope, and by static
// partition key or key prefix where the layout has one (docs/storage.md).
func layoutFor(k layoutKind, n int) persistence.Layout {
	switch k {
	case layoutPowertools:
		return persistence.PowertoolsLayout(idemTable)
	case layoutSortKey:
		l := persistence.Layout{Table: idemTable, PartitionKey: "pk", SortKey: "sk"}
		if n == 1 {
			l.StaticPartitionKey = "idempotency#b"
		}
		return l
	case layoutPrefix:
		return persistence.Layout{Table: bizTable, PartitionKey: "pk", KeyPrefix: [...]string{"idem#", "idemb#"}[n]}
	case layoutFold:
		return persistence.Layout{Table: bizTable, PartitionKey: "pk", KeyPrefix: recPrefix}
	}
	return persistence.Layout{Table: idemTable}
}

// newConsumers builds the deployments of the scenario.
func (sc *scenario) newConsumers(r *rand.Rand) {
	a := &consumer{name: "a", scope: scope, layout: layoutFor(sc.cfg.layout, 0), fold: sc.cfg.layout == layoutFold,
		timeout: sc.timeout, grace: sc.grace, visibility: sc.visibility, checkVisibility: sc.checkVisibility}
	sc.consumers = []*consumer{a}
	if !sc.cfg.shared {
		return
	}
	b := &consumer{name: "b", scope: scopeB, layout: layoutFor(sc.cfg.layout, 1),
		timeout: pick(r, 5*time.Second, 10*time.Second), grace: pick(r, 2*time.Second, 10*time.Second)}
	b.visibility = b.timeout + b.grace + time.Duration(1+r.IntN(20))*time.Second
	b.checkVisibility = true
	sc.consumers = append(sc.consumers, b)
}

func (c *consumer) String() string {
	return fmt.Sprintf("%s(scope=%s table=%s timeout=%s grace=%s)", c.name, c.scope, c.layout.Table, c.timeout, c.grace)
}
