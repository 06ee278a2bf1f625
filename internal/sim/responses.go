package sim

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/simdb"
)

// The records' side of the oracle: who held each record when (the step check's
// reference, outside.go), a completed record's response never changing while the record
// lives, and at the end, each completed record's response being the one whose writes
// landed, computed by the holder that completed it.

// hold is one change of a record's holder or status, as the table saw it.
type hold struct {
	at     time.Time
	token  string
	status string      // IN_PROGRESS, COMPLETED, FAILED; "" once deleted
	until  time.Time   // the lease end (IN_PROGRESS)
	inv    *invocation // whose request wrote it (nil: the TTL process)
	// created and hash are the record's created_at (epoch milliseconds, by its creator's
	// clock) and payload fingerprint as written.
	created int64
	hash    string
}

func holdKey(c *consumer, rk string) string { return c.name + "|" + rk }

// watchRecords notes each write of a consumer's record.
func (w *world) watchRecords(wr simdb.Write) {
	for _, c := range w.sc.consumers {
		if c.layout.Table != wr.Table {
			continue
		}
		it := wr.New
		if it == nil {
			it = wr.Old
		}
		rk, ok := c.recordKey(it)
		if !ok {
			continue
		}
		if c.fold && wr.New != nil && wr.New["op"] != nil && (wr.Old == nil || wr.Old["op"] == nil) {
			w.obs.stats.Folded++
		}
		if wr.New == nil {
			delete(c.recs, rk)
		} else {
			_, inflight := wr.New[c.names.inflight]
			_, outbox := wr.New[c.names.outbox]
			c.recs[rk] = recState{inflight: inflight, outbox: outbox, exp: numAttr(wr.New, c.names.exp)}
		}
		h := hold{at: time.Now()}
		if w.cur != nil {
			h.inv = w.cur.inv
		}
		if wr.New != nil {
			h.token, h.status = strAttr(wr.New, c.names.token), strAttr(wr.New, c.names.status)
			h.until = time.UnixMilli(numAttr(wr.New, c.names.until))
			h.created, h.hash = numAttr(wr.New, c.names.created), strAttr(wr.New, c.names.hash)
		}
		k := holdKey(c, rk)
		hs := w.obs.holds[k]
		if n := len(hs); n == 0 || hs[n-1].token != h.token || hs[n-1].status != h.status || !hs[n-1].until.Equal(h.until) {
			if n > 0 {
				w.leaseKept(c, rk, hs[n-1], h)
			}
			w.obs.holds[k] = append(hs, h)
		}
		w.responseKept(c, rk, wr)
		w.refusalKept(c, rk, wr)
		return
	}
}

// leaseKept: a lease is never taken from a holder that still runs. A holder's lease ends
// its grace after its invocation's deadline, where Lambda stops it, so a taker (a
// delivery's takeover, or a reap) whose clock is ahead by less than the grace finds the
// holder gone. A takeover or reap of a lease whose holder's invocation still runs puts
// two holders on the key at once: their steps may overlap, and only the fence stops the
// old holder's commit.
func (w *world) leaseKept(c *consumer, rk string, prev, next hold) {
	if prev.status != string(persistence.StatusInProgress) || prev.inv == nil || next.inv == nil || next.inv == prev.inv {
		return
	}
	taken := next.status == string(persistence.StatusInProgress) && next.token != prev.token || next.inv.kind == "reaper" && next.status == string(persistence.StatusFailed)
	if taken && next.inv.kind == "reaper" && !prev.until.Before(next.at) {
		// The reaper fails only leases it listed as ended more than its grace before: a
		// lease that is live as it lands (its holder extended it since) must win.
		w.obs.violation("reap", "record %s of %s: %s failed a live lease at %s (it ends at %s by the true clock): an extension after the listing lost",
			rk, c.name, next.inv, w.since(next.at), w.since(prev.until))
		return
	}
	// A lease that ended by the true clock may be taken: a holder that keeps a lease
	// shorter than its invocation (config.beat) let it lapse, and a taker whose clock is
	// ahead may take it that much early (no grace covers a lease its holder chose). Any
	// other holder's lease outlives its invocation.
	if !taken || prev.until.Before(next.at.Add(2*w.stepSlack())) || !w.live[prev.inv] || prev.inv.isDead() || w.obs.done[prev.inv] {
		return
	}
	w.obs.violation("lease", "record %s of %s taken by %s at %s while its holder %s still ran (its lease ended at %s by the true clock, its deadline is %s)",
		rk, c.name, next.inv, w.since(next.at), prev.inv, w.since(prev.until), w.since(prev.inv.deadline))
}

// responseKept: a completed record's stored response never changes while the record
// lives, so every duplicate answered from it gets the first response, byte for byte.
// A record past its TTL may be replaced by a new execution.
func (w *world) responseKept(c *consumer, rk string, wr simdb.Write) {
	done := string(persistence.StatusCompleted)
	if wr.Old == nil || wr.New == nil || strAttr(wr.Old, c.names.status) != done || strAttr(wr.New, c.names.status) != done {
		return
	}
	if e := numAttr(wr.Old, c.names.exp); e > 0 && time.Unix(e, 0).Before(time.Now().Add(maxDrift)) {
		return
	}
	if !bytes.Equal(blob(wr.Old[c.names.response]), blob(wr.New[c.names.response])) ||
		strAttr(wr.Old, c.names.responseEnc) != strAttr(wr.New, c.names.responseEnc) {
		w.obs.violation("response", "record %s of %s: its stored response changed after it was completed: a duplicate answered before and one answered after get different responses", rk, c.name)
	}
}

func blob(v types.AttributeValue) []byte {
	if b, ok := v.(*types.AttributeValueMemberB); ok {
		return b.Value
	}
	return nil
}

// checkResponses: every completed record with a response names, in it, the holder that
// completed the record (a commit by a holder whose lease was taken over would store its
// own), and a run whose writes landed; or, when its own writes did not (a guarded
// completion: the effect was in place already), an effect that landed in another run.
func (w *world) checkResponses() {
	for _, c := range w.sc.consumers {
		var rks []string
		for _, it := range w.records(c) {
			if strAttr(it, c.names.status) == string(persistence.StatusCompleted) {
				rk, _ := c.recordKey(it)
				rks = append(rks, rk)
			}
		}
		sort.Strings(rks)
		for _, rk := range rks {
			rec := w.record(c, rk)
			if rec == nil || len(rec.Response) == 0 {
				continue
			}
			var r response
			if err := json.Unmarshal(rec.Response, &r); err != nil {
				w.obs.violation("response", "record %s of %s: unreadable response %q", rk, c.name, rec.Response)
				continue
			}
			if r.Holder != rec.LeaseToken {
				w.obs.violation("response", "record %s of %s: its response was computed by holder %s, but the record was completed under holder %s (a commit by a holder whose lease was taken over)",
					rk, c.name, w.holderName(r.Holder), w.holderName(rec.LeaseToken))
			}
			if _, ok := w.obs.runs[r.Run]; !ok && w.obs.credits[r.Applied] == 0 {
				w.obs.violation("response", "record %s of %s: completed with the response of run %s, but no writes of effect %s ever landed", rk, c.name, r.Run, shortID(r.Applied))
			}
		}
	}
}

// holderName names a holder's token in a violation by the run that held it, tokens being
// random.
func (w *world) holderName(token string) string {
	if run, ok := w.obs.tokenRun[token]; ok {
		return "of run " + run
	}
	if len(token) > 8 {
		return token[:8]
	}
	return token
}

// refusalKept: a business rule's refusal stands against late copies of the message it
// refused (docs/records.md). A takeover of a record that delivery (message m, receive n)
// refused, by a request for m of a receive no later than n, clears the refusal while the
// message sits in the dead-letter queue: if that copy then dies or fails retryably, the
// record reads retrying, and no copy is left to retry it.
func (w *world) refusalKept(c *consumer, rk string, wr simdb.Write) {
	if wr.Old == nil || wr.New == nil || w.cur == nil || w.cur.inv == nil {
		return
	}
	old, next := wr.Old, wr.New
	if strAttr(old, c.names.status) != string(persistence.StatusFailed) || strAttr(old, c.names.category) != string(persistence.CategoryRefused) ||
		strAttr(next, c.names.status) != string(persistence.StatusInProgress) || strAttr(next, c.names.token) == strAttr(old, c.names.token) {
		return
	}
	n, id, ok := strings.Cut(strAttr(old, c.names.refusedBy), "/")
	by, err := strconv.Atoi(n)
	if !ok || err != nil || id != w.cur.msgID {
		return
	}
	for _, m := range w.cur.inv.msgs {
		if m.ID == id && m.ReceiveCount <= by {
			w.obs.violation("refusal", "record %s of %s: %s took it over for receive %d of message %s, which receive %d of the same message had refused and dead-lettered",
				rk, c.name, w.cur.inv, m.ReceiveCount, id, by)
		}
	}
}
