// Package sampleevents generates the sample Lambda events of events/ (and of any other
// example) through the example contract only: the messages come from the example's
// example.Traffic (Traffic and Bad), the expected state from its example.Checker (Expect;
// left out for an example without one). An example without Traffic has no sample
// events. The events are shaped exactly as Lambda
// delivers them (events.SQSEvent), with the digests SQS computes, and are the same for
// the same example and seed, so the committed files are reproducible and their diffs
// reviewable. `idemctl events` writes them.
package sampleevents

import (
	"bytes"
	"crypto/md5" //nolint:gosec // SQS defines md5OfBody and md5OfMessageAttributes with MD5; not used for security
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// DefaultSeed is the seed of the committed files.
const DefaultSeed = 1

// Names of the generated files.
const (
	FIFOBatch      = "sqs-fifo-batch.json"
	Duplicates     = "sqs-duplicates-malformed.json"
	StandardBatch  = "sqs-standard-batch.json"
	Scheduled      = "scheduled.json"
	ExpectedSuffix = ".expected.json"
)

// The fake account and region of every ARN.
const (
	Region  = "eu-west-1"
	Account = "123456789012"
)

// FIFOQueueARN is the source of the FIFO files: the template's InputQueue as
// CloudFormation names it in a stack called idempotent-sqs-consumer.
const FIFOQueueARN = "arn:aws:sqs:" + Region + ":" + Account + ":idempotent-sqs-consumer-InputQueue-kR2vN8xQ4TzL.fifo"

// StandardQueueARN is the source of the standard-queue file, for example ex.
func StandardQueueARN(ex example.Example) string {
	return "arn:aws:sqs:" + Region + ":" + Account + ":" + ex.Name() + "-standard"
}

// scheduled is the EventBridge event of the reaper's schedule rule: the same for every
// example.
const scheduled = `{
  "version": "0",
  "id": "886e75ab-668f-440f-8a97-76baaddeea80",
  "detail-type": "Scheduled Event",
  "source": "aws.events",
  "account": "123456789012",
  "time": "2025-11-20T10:16:00Z",
  "region": "eu-west-1",
  "resources": [
    "arn:aws:events:eu-west-1:123456789012:rule/idempotent-sqs-consumer-ReaperFunctionSweep-7QJ2M1XK9ZPW"
  ],
  "detail": {}
}
`

// Sample is one generated SQS event and its expected outcome.
type Sample struct {
	Name     string // file name, e.g. FIFOBatch
	Event    events.SQSEvent
	Expected Expected
}

// Expected is the outcome of pushing a Sample's event through the consumer, once or
// any number of times, after example.Prepare(Prepare): its sidecar file
// <name>.expected.json.
type Expected struct {
	Example string `json:"example"`
	Seed    uint64 `json:"seed"`
	// Prepare are the distinct valid messages of the file: what example.Prepare must be
	// given before the file is consumed, and Expect's valid.
	Prepare []Message `json:"prepare"`
	// Applied are the business ids of the messages applied, once each.
	Applied []string `json:"applied"`
	// DeadLettered are the records the consumer moves to the dead-letter queue.
	DeadLettered []DeadLetter `json:"dead_lettered"`
	// Outbound is the number of outbound messages (one per applied message).
	Outbound int `json:"outbound"`
	// State is the example's Expect(Prepare, the applied messages); absent for an
	// example without an example.Checker.
	State example.State `json:"state,omitempty"`
}

// Message is an example.Message in a sidecar.
type Message struct {
	ID    string `json:"id"`
	Key   string `json:"key,omitempty"`
	Group string `json:"group"`
	Body  string `json:"body"`
}

// DeadLetter is a record the consumer must dead-letter.
type DeadLetter struct {
	MessageID string `json:"message_id"`    // the record's messageId (dlq-source-message-id)
	ID        string `json:"id"`            // the bad message's business id
	Reason    string `json:"reason"`        // a part of its dlq-reason
	Group     string `json:"group"`         // its MessageGroupId
	Body      string `json:"body"`          // its body, kept unchanged in the DLQ
	Key       string `json:"key,omitempty"` // its idempotency key
}

// ExampleMessages returns the messages as example.Messages.
func ExampleMessages(ms []Message) []example.Message {
	out := make([]example.Message, len(ms))
	for i, m := range ms {
		out[i] = example.Message{ID: m.ID, Key: m.Key, Group: m.Group, Body: m.Body}
	}
	return out
}

// AppliedMessages returns the messages of e.Prepare that e.Applied names, in its order.
func (e Expected) AppliedMessages() []example.Message {
	byID := map[string]example.Message{}
	for _, m := range ExampleMessages(e.Prepare) {
		byID[m.ID] = m
	}
	out := make([]example.Message, 0, len(e.Applied))
	for _, id := range e.Applied {
		out = append(out, byID[id])
	}
	return out
}

// gen holds the state of one generation: the rng and the clock of the fake queue.
type gen struct {
	ex   example.Example
	tr   example.Traffic
	chk  example.Checker // nil: no expected state
	seed uint64
	rng  *rand.Rand
	now  int64    // SentTimestamp of the last message, in ms
	seq  *big.Int // SequenceNumber of the last FIFO message
	ids  map[string]bool
}

// Generate builds the three SQS samples of ex for seed: FIFOBatch (8 valid messages
// over 3 groups, group by group), Duplicates (one valid message three times, another
// in its group, ex's first Bad that ex.Decode rejects alone in its group, another
// valid one in a third group) and StandardBatch (5 valid messages from a standard
// queue). Business ids don't repeat between the samples, so all three can be consumed
// against one set of tables. ex must be an example.Traffic.
func Generate(ex example.Example, seed uint64) ([]Sample, error) {
	tr, err := example.TrafficOf(ex)
	if err != nil {
		return nil, fmt.Errorf("sample events: %w", err)
	}
	chk, _ := example.CheckerOf(ex) // nil: the sidecars have no state
	g := &gen{
		ex: ex, tr: tr, chk: chk, seed: seed,
		rng: rand.New(rand.NewPCG(seed, 0x5a3b1eeee7e7)), //nolint:gosec // fake ids, not secrets
		now: 1763630102135,
		ids: map[string]bool{},
	}
	g.seq, _ = new(big.Int).SetString("18889596386468531164", 10)
	var out []Sample
	for _, f := range []func() (Sample, error){g.fifoBatch, g.duplicates, g.standardBatch} {
		s, err := f()
		if err != nil {
			return nil, fmt.Errorf("sample events of example %s: %w", ex.Name(), err)
		}
		out = append(out, s)
	}
	return out, nil
}

// run is the run name of one sample: business ids are unique to it and to the seed.
func (g *gen) run(sample string) string { return sample + strconv.FormatUint(g.seed, 10) }

// traffic draws n messages over groups groups until ok accepts them (the examples
// spread messages over groups at random); the same seed draws the same.
func (g *gen) traffic(run string, n, groups int, ok func([]example.Message) bool) ([]example.Message, error) {
	for range 1000 {
		ms := g.tr.Traffic(g.rng, run, n, groups)
		if len(ms) == n && ok(ms) {
			for _, m := range ms {
				if _, err := g.ex.Decode([]byte(m.Body)); err != nil {
					return nil, fmt.Errorf("traffic message %s does not decode: %w", m.ID, err)
				}
			}
			return ms, nil
		}
	}
	return nil, fmt.Errorf("the example's Traffic(%d messages, %d groups) never gave the shape the sample needs", n, groups)
}

func groupsOf(ms []example.Message) []string {
	var gs []string
	for _, m := range ms {
		if !slices.Contains(gs, m.Group) {
			gs = append(gs, m.Group)
		}
	}
	return gs
}

func (g *gen) fifoBatch() (Sample, error) {
	const n, groups = 8, 3
	ms, err := g.traffic(g.run("fifo"), n, groups, func(ms []example.Message) bool { return len(groupsOf(ms)) == groups })
	if err != nil {
		return Sample{}, err
	}
	// Group by group, as SQS delivers a FIFO batch; send order within a group.
	order := groupsOf(ms)
	sorted := slices.Clone(ms)
	slices.SortStableFunc(sorted, func(a, b example.Message) int {
		return slices.Index(order, a.Group) - slices.Index(order, b.Group)
	})
	recs := make([]events.SQSMessage, len(sorted))
	for i, m := range sorted {
		g.now += 50 + g.rng.Int64N(100)
		recs[i] = g.record(m, true)
	}
	g.received(recs)
	return g.sample(FIFOBatch, recs, ms, ms, nil)
}

func (g *gen) duplicates() (Sample, error) {
	run := g.run("dup")
	ms, err := g.traffic(run, 3, 2, func(ms []example.Message) bool { return len(groupsOf(ms)) == 2 })
	if err != nil {
		return Sample{}, err
	}
	// a and b share a group, c is in the other one.
	var a, b, c example.Message
	switch ms[0].Group {
	case ms[1].Group:
		a, b, c = ms[0], ms[1], ms[2]
	case ms[2].Group:
		a, b, c = ms[0], ms[2], ms[1]
	default:
		a, b, c = ms[1], ms[2], ms[0]
	}
	valid := []example.Message{a, b, c}
	var bad *example.Bad
	for _, x := range g.tr.Bad(run, valid) {
		if _, err := g.ex.Decode([]byte(x.Body)); err != nil {
			bad = &x
			break
		}
	}
	if bad == nil {
		return Sample{}, errors.New("the example's Bad returns no message that its Decode rejects")
	}
	if bad.Group == a.Group || bad.Group == c.Group || bad.Group == "" {
		bad.Group = a.Group + "-bad" // alone in its group
	}
	var recs []events.SQSMessage
	// a three times: the producer sent it again after the 5-minute deduplication
	// window ran out, so SQS delivers three copies with three message ids.
	for i := range 3 {
		if i > 0 {
			g.now += 6*60_000 + g.rng.Int64N(30_000)
		}
		recs = append(recs, g.record(a, true))
	}
	g.now += 500 + g.rng.Int64N(500)
	recs = append(recs, g.record(b, true))
	g.now += 200 + g.rng.Int64N(500)
	badRec := g.record(bad.Message, true)
	recs = append(recs, badRec)
	g.now += 200 + g.rng.Int64N(500)
	recs = append(recs, g.record(c, true))
	g.received(recs)
	dl := []DeadLetter{{MessageID: badRec.MessageId, ID: bad.ID, Reason: bad.Reason, Group: bad.Group, Body: bad.Body, Key: bad.Key}}
	return g.sample(Duplicates, recs, valid, valid, dl)
}

func (g *gen) standardBatch() (Sample, error) {
	ms, err := g.traffic(g.run("std"), 5, 2, func([]example.Message) bool { return true })
	if err != nil {
		return Sample{}, err
	}
	recs := make([]events.SQSMessage, len(ms))
	for i, m := range ms {
		g.now += 50 + g.rng.Int64N(300)
		recs[i] = g.record(m, false)
	}
	// A standard queue delivers out of send order.
	g.rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	g.received(recs)
	return g.sample(StandardBatch, recs, ms, ms, nil)
}

// sample computes the expected outcome of recs.
func (g *gen) sample(name string, recs []events.SQSMessage, valid, applied []example.Message, dl []DeadLetter) (Sample, error) {
	exp := Expected{Example: g.ex.Name(), Seed: g.seed, Outbound: len(applied), DeadLettered: dl}
	if g.chk != nil {
		st, err := g.chk.Expect(valid, applied)
		if err != nil {
			return Sample{}, err
		}
		exp.State = st
	}
	if exp.DeadLettered == nil {
		exp.DeadLettered = []DeadLetter{}
	}
	for _, m := range valid {
		exp.Prepare = append(exp.Prepare, Message(m))
	}
	for _, m := range applied {
		exp.Applied = append(exp.Applied, m.ID)
	}
	return Sample{Name: name, Event: events.SQSEvent{Records: recs}, Expected: exp}, nil
}

// received sets ApproximateFirstReceiveTimestamp: one poll received the batch.
func (g *gen) received(recs []events.SQSMessage) {
	g.now += 1000 + g.rng.Int64N(2000)
	at := strconv.FormatInt(g.now, 10)
	for i := range recs {
		recs[i].Attributes["ApproximateFirstReceiveTimestamp"] = at
	}
}

// record returns m as Lambda delivers it, sent at g.now, from the FIFO queue or from a
// standard one.
func (g *gen) record(m example.Message, fifo bool) events.SQSMessage {
	r := events.SQSMessage{
		MessageId:         g.messageID(),
		ReceiptHandle:     g.receiptHandle(),
		Body:              m.Body,
		Md5OfBody:         BodyMD5(m.Body),
		Attributes:        map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": strconv.FormatInt(g.now, 10), "SenderId": "AROA3XFRBF23EXAMPLE7:" + g.ex.Name() + "-producer"},
		MessageAttributes: map[string]events.SQSMessageAttribute{},
		EventSource:       "aws:sqs",
		EventSourceARN:    StandardQueueARN(g.ex),
		AWSRegion:         Region,
	}
	if m.Key != "" {
		key := m.Key
		r.MessageAttributes[idem.KeyAttribute] = events.SQSMessageAttribute{
			StringValue: &key, StringListValues: []string{}, BinaryListValues: [][]byte{}, DataType: "String",
		}
		r.Md5OfMessageAttributes = AttributesMD5(r.MessageAttributes)
	}
	if fifo {
		r.EventSourceARN = FIFOQueueARN
		g.seq.Add(g.seq, big.NewInt(100_000+g.rng.Int64N(400_000)))
		r.Attributes["SequenceNumber"] = g.seq.String()
		r.Attributes["MessageGroupId"] = m.Group
		dedup := m.Key
		if dedup == "" { // what content-based deduplication would use
			sum := sha256.Sum256([]byte(m.Body))
			dedup = hex.EncodeToString(sum[:])
		}
		r.Attributes["MessageDeduplicationId"] = dedup
	}
	return r
}

// messageID returns a new random (version 4) UUID, distinct from the earlier ones.
func (g *gen) messageID() string {
	for {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], g.rng.Uint64())
		binary.BigEndian.PutUint64(b[8:], g.rng.Uint64())
		b[6] = b[6]&0x0f | 0x40
		b[8] = b[8]&0x3f | 0x80
		h := hex.EncodeToString(b[:])
		id := h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
		if !g.ids[id] {
			g.ids[id] = true
			return id
		}
	}
}

// receiptHandle returns an opaque handle shaped like SQS's.
func (g *gen) receiptHandle() string {
	b := make([]byte, 270)
	for i := 0; i < len(b); i += 8 {
		v := g.rng.Uint64()
		for j := i; j < min(i+8, len(b)); j++ {
			b[j] = byte(v >> (8 * (j - i)))
		}
	}
	return "AQEB" + base64.StdEncoding.EncodeToString(b)
}

// BodyMD5 is md5OfBody: the hex MD5 digest of the body's bytes.
func BodyMD5(body string) string {
	sum := md5.Sum([]byte(body)) //nolint:gosec // see import
	return hex.EncodeToString(sum[:])
}

// AttributesMD5 is md5OfMessageAttributes as SQS computes it
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html,
// "Calculating the MD5 message digest for message attributes"): the attributes sorted
// by name, each encoded as its name and its data type (each as a 4-byte big-endian
// length and the UTF-8 bytes), a transport byte (1 for a string value, 2 for a binary
// one) and the value (length and bytes); the hex MD5 digest of the concatenation. ""
// for no attributes: SQS gives none.
func AttributesMD5(attrs map[string]events.SQSMessageAttribute) string {
	if len(attrs) == 0 {
		return ""
	}
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	h := md5.New() //nolint:gosec // see import
	put := func(b []byte) {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(b))) //nolint:gosec // attribute parts are far below 4 GiB
		h.Write(l[:])
		h.Write(b)
	}
	for _, n := range names {
		v := attrs[n]
		put([]byte(n))
		put([]byte(v.DataType))
		if v.StringValue == nil && v.BinaryValue != nil {
			h.Write([]byte{2})
			put(v.BinaryValue)
		} else {
			h.Write([]byte{1})
			var s string
			if v.StringValue != nil {
				s = *v.StringValue
			}
			put([]byte(s))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Files returns the files of samples, by name: each sample's event and its sidecar
// <name>.expected.json, and scheduled.json. JSON indented by two spaces, with a final
// newline.
func Files(samples []Sample) (map[string][]byte, error) {
	out := map[string][]byte{Scheduled: []byte(scheduled)}
	for _, s := range samples {
		ev, err := marshal(s.Event)
		if err != nil {
			return nil, err
		}
		exp, err := marshal(s.Expected)
		if err != nil {
			return nil, err
		}
		out[s.Name] = ev
		out[s.Name+ExpectedSuffix] = exp
	}
	return out, nil
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Render is Generate and Files.
func Render(ex example.Example, seed uint64) (map[string][]byte, error) {
	samples, err := Generate(ex, seed)
	if err != nil {
		return nil, err
	}
	return Files(samples)
}

// Write writes files into dir (created if missing) and returns their paths, sorted.
func Write(dir string, files map[string][]byte) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // a source directory, readable like the rest of the repository
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	paths := make([]string, 0, len(names))
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, files[n], 0o644); err != nil { //nolint:gosec // as above
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Decode reads a sidecar file.
func Decode(raw []byte) (Expected, error) {
	var e Expected
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Expected{}, fmt.Errorf("sample events: expected outcome: %w", err)
	}
	return e, nil
}

// Stale compares the files of dir with what the generator writes, with DefaultSeed, for
// the example its sidecars name. It returns that example's name ("" when dir holds no
// sidecar, or names an example that is not among examples: nothing to compare) and the
// files that differ or are missing.
func Stale(dir string, examples []example.Example) (string, []string, error) {
	sidecars, err := filepath.Glob(filepath.Join(dir, "*.expected.json"))
	if err != nil || len(sidecars) == 0 {
		return "", nil, err
	}
	raw, err := os.ReadFile(sidecars[0])
	if err != nil {
		return "", nil, err
	}
	exp, err := Decode(raw)
	if err != nil {
		return "", nil, fmt.Errorf("sampleevents: %s: %w", sidecars[0], err)
	}
	ex, err := example.Find(examples, exp.Example)
	if err != nil || exp.Example == "" {
		return "", nil, nil //nolint:nilerr // an example this build does not carry: nothing to compare
	}
	files, err := Render(ex, DefaultSeed)
	if err != nil {
		return ex.Name(), nil, err
	}
	var stale []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, files[name]) {
			stale = append(stale, name)
		}
	}
	return ex.Name(), stale, nil
}
