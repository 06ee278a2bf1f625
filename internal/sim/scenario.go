package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// scenario is what one seed chose: the configuration, the fault rates and the workload.
type scenario struct {
	mode            idem.Mode
	fifo            bool // the input queue is FIFO (else standard)
	contentDedup    bool // FIFO with content-based deduplication; producers send no dedup id
	keyField        string
	keySource       idem.KeySource // KeyFromField in the fold configuration: the business id is the key
	slots           int            // concurrent pollers and environments
	concurrency     int            // MAX_CONCURRENCY
	batchSize       int
	window          time.Duration // batching window
	timeout         time.Duration // function timeout
	visibility      time.Duration
	checkVisibility bool // tell the consumer its visibility timeout (its init refuses a lease that outlives it)
	grace           time.Duration
	margin          time.Duration
	cacheSize       int
	maxReceive      int
	reaperEvery     time.Duration
	reaperTimeout   time.Duration
	shards          int
	outMaxBytes     int // MaximumMessageSize of the outbound FIFO queue
	wholeBatchFails bool
	ttl             time.Duration
	faultEnd        time.Duration // faults stop then
	faults          faultRates
	ops             []*op
	accounts        []account
	// cfg is the deployment (config.go): the layout, a second consumer on the shared
	// table, the ingress, the clocks' drift, the stepping handler; consumers are the
	// consumer deployments it makes.
	cfg       config
	consumers []*consumer
	stats     producerStats
}

// producerStats counts what the producers were drawn to do wrong.
type producerStats struct {
	twoKeys, twoDoors, freshTwins, longKeys, lookalikes int
	otherCallers, forged                                int
}

type account struct {
	name   string
	closed bool
	cap    int64
}

// faultRates are per-request probabilities while faults are on.
type faultRates struct {
	crashBefore, crashAfter float64 // the invocation dies before sending / after the answer
	throttle, serverError   float64
	lost                    float64 // applied, answer lost
	slow                    float64 // a long latency (a hang)
	lateInvoke              float64 // an invoke starts long after its receive
	lostDelete              float64 // the event source mapping's delete does not happen
	entryFail               float64 // one entry of a standard queue's batch fails (server side)
	recycle                 float64 // Lambda replaces a warm environment
	partition               float64 // an invocation's network stalls for seconds: its requests wait until it heals
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func dur(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

func idemContentID(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:])
}

// newScenario draws a scenario: its settings and workload from r, its configuration
// (config.go) and its producers' misbehaviour (producers.go) from sources of their own.
func newScenario(r *rand.Rand, seed uint64) *scenario {
	sc := &scenario{
		mode:          pick(r, idem.ModeLease, idem.ModeSingleTransaction),
		fifo:          r.IntN(5) != 0,
		slots:         1 + r.IntN(3),
		concurrency:   pick(r, 1, 2, 10),
		batchSize:     pick(r, 1, 3, 10),
		window:        pick(r, 0, time.Second, 5*time.Second),
		timeout:       pick(r, 5*time.Second, 10*time.Second, 30*time.Second),
		grace:         pick(r, 5*time.Second, 2*time.Second, 30*time.Second), // consumerapp refuses none (Config.Check)
		margin:        pick(r, time.Second, 2*time.Second),
		cacheSize:     pick(r, 0, 100),
		maxReceive:    3 + r.IntN(4),
		reaperEvery:   pick(r, 30*time.Second, time.Minute, 2*time.Minute),
		reaperTimeout: 30 * time.Second,
		shards:        1 + r.IntN(3),
		outMaxBytes:   pick(r, 1<<20, 1<<20, 1024),
		ttl:           pick(r, 2*time.Hour, 6*time.Hour),
	}
	sc.wholeBatchFails = r.IntN(2) == 0
	if sc.fifo {
		sc.contentDedup = r.IntN(4) == 0
	}
	if r.IntN(2) == 0 || !sc.fifo {
		sc.keyField = pick(r, "", "id")
	}
	// The visibility timeout is at least the function timeout (the event source mapping
	// requires it); the consumer's own check also wants the lease (timeout + grace) to
	// end before it, and is told the visibility timeout only in some runs, so that
	// others run as AWS allows.
	// https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
	sc.visibility = pick(r, sc.timeout, sc.timeout+sc.grace+time.Second, 6*sc.timeout)
	sc.checkVisibility = sc.visibility > sc.timeout+sc.grace && r.IntN(2) == 0
	storm := r.IntN(3)
	f := &sc.faults
	switch storm {
	case 0: // calm: a few faults
		*f = faultRates{crashBefore: 0.005, crashAfter: 0.005, throttle: 0.01, serverError: 0.005, lost: 0.01, slow: 0.005, lateInvoke: 0.05, lostDelete: 0.02, entryFail: 0.05, recycle: 0.05, partition: 0.01}
	case 1:
		*f = faultRates{crashBefore: 0.02, crashAfter: 0.02, throttle: 0.05, serverError: 0.02, lost: 0.05, slow: 0.02, lateInvoke: 0.2, lostDelete: 0.05, entryFail: 0.2, recycle: 0.1, partition: 0.03}
	default: // storm
		*f = faultRates{crashBefore: 0.05, crashAfter: 0.05, throttle: 0.1, serverError: 0.05, lost: 0.1, slow: 0.05, lateInvoke: 0.4, lostDelete: 0.1, entryFail: 0.4, recycle: 0.2, partition: 0.06}
	}
	sc.faultEnd = dur(r, 5*time.Minute, 40*time.Minute)
	sc.accounts = []account{{name: "a1"}, {name: "a2"}, {name: "a3"}, {name: "closed", closed: true}, {name: "cap", cap: 30}}
	cr := configRand(seed)
	sc.cfg = drawConfig(cr, sc)
	if sc.cfg.layout == layoutFold {
		// A record folded into its guard stands for the guard's business id: the
		// consumer keys every message by it (idem.Result.HomeKey, KEY_SOURCE=field).
		sc.keyField, sc.keySource = "id", idem.KeyFromField
	}
	sc.newConsumers(cr)
	sc.cfg.fastReaper = sc.cfg.beat && cr.IntN(2) == 0
	if sc.cfg.fastReaper {
		sc.reaperEvery = fastReaperEvery
	}
	if sc.cfg.steps && cr.IntN(2) == 0 {
		sc.cfg.keyWindow, sc.cfg.lookup = pick(cr, 15*time.Second, time.Minute, 5*time.Minute), cr.IntN(2) == 0
	}
	sc.cfg.dlqRetention = pick(cr, 0, time.Hour, 24*time.Hour)
	sc.cfg.lateRedrive = cr.IntN(2) == 0
	sc.workload(r)
	sc.misbehave(producerRand(seed))
	return sc
}
