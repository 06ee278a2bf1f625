package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// TestStepAnswerFeedsTheNextStepAfterATakeover: a shipments-like chain, a carrier's
// label then a warehouse's pick fed by the label, with a crash between the two. The
// attempt that takes the key over gets the recorded label back without calling the
// carrier again, feeds it to the pick, and its commit reads both answers. The carrier
// gives a new label on each call, as one that forgot the key would: a second call shows.
func TestStepAnswerFeedsTheNextStepAfterATakeover(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.DefaultLease = 30 * time.Second })
		var labels, picks atomic.Int64
		var pickedFor atomic.Value
		crashed, abandon := make(chan struct{}), make(chan struct{})
		handler := func(crash bool) idem.HandlerFunc {
			return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
				label, err := r.Attempt.StepAnswer(ctx, "label", func(context.Context) ([]byte, error) {
					return fmt.Appendf(nil, "L-%d", labels.Add(1)), nil
				})
				if err != nil {
					return idem.Result{}, err
				}
				if crash {
					close(crashed)
					<-abandon // the process is gone
					return idem.Result{}, errors.New("process died")
				}
				if _, err := r.Attempt.StepAnswer(ctx, "pick", func(context.Context) ([]byte, error) {
					pickedFor.Store(string(label))
					return fmt.Appendf(nil, "P-%d-for-%s", picks.Add(1), label), nil
				}); err != nil {
					return idem.Result{}, err
				}
				l, _ := r.Attempt.Answer("label")
				p, _ := r.Attempt.Answer("pick")
				return idem.Result{Response: fmt.Appendf(nil, "%s %s", l, p)}, nil
			}
		}
		first := make(chan error, 1)
		go func() { _, err := c.Do(ctx, req("order-1", `{}`), handler(true)); first <- err }()
		<-crashed
		e.clock.Advance(31 * time.Second)
		res, err := c.Do(ctx, req("order-1", `{}`), handler(false))
		if err != nil || string(res.Response) != "L-1 P-1-for-L-1" {
			t.Fatalf("takeover: response %q, err %v; want %q", res.Response, err, "L-1 P-1-for-L-1")
		}
		if n := labels.Load(); n != 1 {
			t.Errorf("the carrier was called %d times, want 1", n)
		}
		if got := pickedFor.Load(); got != "L-1" {
			t.Errorf("the pick was fed %v, want the recorded label L-1", got)
		}
		close(abandon)
		if err := <-first; !errors.Is(err, idem.ErrLeaseLost) && err.Error() != "process died" {
			t.Errorf("abandoned attempt: %v", err)
		}
		pk, _ := c.RecordKey("order-1")
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if string(rec.Answers["label"]) != "L-1" || string(rec.Answers["pick"]) != "P-1-for-L-1" {
			t.Errorf("record's answers: %q", rec.Answers)
		}
	})
}

// TestStepAnswerBounds: an answer that would take the record's answers past
// MaxStepAnswers is ErrAnswerTooLarge, permanent, and nothing of the step is recorded;
// one at the bound, empty answers and a step without one round-trip through the record.
func TestStepAnswerBounds(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		big := bytes.Repeat([]byte{0xfe}, persistence.MaxStepAnswers-len("a"))
		_, err := c.Do(ctx, req("too-large", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			if _, err := r.Attempt.StepAnswer(ctx, "ab", func(context.Context) ([]byte, error) { return big, nil }); err != nil {
				return idem.Result{}, err
			}
			return idem.Result{}, nil
		})
		if !errors.Is(err, idem.ErrAnswerTooLarge) || !idem.IsPermanent(err) {
			t.Fatalf("an answer past the bound: %v, want a permanent ErrAnswerTooLarge", err)
		}
		pk, _ := c.RecordKey("too-large")
		if rec, err := e.store.Get(ctx, pk, e.clock.Now()); err != nil || len(rec.Steps) != 0 || len(rec.Answers) != 0 {
			t.Fatalf("record after the refused answer: %+v, %v; want no step", rec, err)
		}
		var got [3][]byte
		res, err := c.Do(ctx, req("at-bound", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			if err := r.Attempt.Step(ctx, "plain", func(context.Context) error { return nil }); err != nil {
				return idem.Result{}, err
			}
			if _, err := r.Attempt.StepAnswer(ctx, "empty", func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
				return idem.Result{}, err
			}
			if _, err := r.Attempt.StepAnswer(ctx, "a", func(context.Context) ([]byte, error) {
				return big[:persistence.MaxStepAnswers-len("empty")-len("a")], nil
			}); err != nil {
				return idem.Result{}, err
			}
			for i, s := range []string{"plain", "empty", "a"} {
				got[i], _ = r.Attempt.Answer(s)
			}
			return idem.Result{Response: []byte("ok")}, nil
		})
		if err != nil || string(res.Response) != "ok" {
			t.Fatalf("answers at the bound: %v", err)
		}
		if len(got[0]) != 0 || len(got[1]) != 0 || len(got[2]) != persistence.MaxStepAnswers-len("empty")-len("a") {
			t.Errorf("answers: %d, %d, %d bytes", len(got[0]), len(got[1]), len(got[2]))
		}
		pk, _ = c.RecordKey("at-bound")
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if a, ok := rec.Answers["empty"]; !ok || len(a) != 0 || !bytes.Equal(rec.Answers["a"], big[:persistence.MaxStepAnswers-len("empty")-len("a")]) {
			t.Errorf("stored answers: %d of them", len(rec.Answers))
		}
		if _, ok := rec.Answers["plain"]; ok || !strings.Contains(strings.Join(rec.Steps, ","), "plain") {
			t.Errorf("a step without an answer: steps %v, answers has it: %v", rec.Steps, ok)
		}
	})
}
