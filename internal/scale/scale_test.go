package scale_test

import (
	"bytes"
	"context"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
	"github.com/idemgo/sqs-lambda-consumer/internal/scale"
)

// base is the template's deployment with a record taking 40 ms: its 4 calls (acquire,
// receipt, commit, and the step or the delete) at the 10 ms round trip BENCHMARKS.md
// uses. One transaction carries the completion, the credit and the journal entry.
var base = scale.Inputs{InflightShards: 4, BatchSize: 10, RecordSeconds: 0.040, WritesPerMsg: 3, HighThroughput: true}

var rates = []float64{100, 1000, 10_000, 100_000}

// groupsAt: the model's assumption of active groups (accounts) at a rate: one per
// 10 msg/s, at least 10.
func groupsAt(rate float64) int { return max(10, int(rate/10)) }

// shardsAt is SCALING.md's advice: the smallest power of two >= the shards the
// inflight index needs at the rate, and never under the template's default 4.
func shardsAt(rate float64) int {
	need := max(1, 2*rate/(scale.PartitionWCU*scale.Headroom))
	return max(4, 1<<int(math.Ceil(math.Log2(need))))
}

func find(t *testing.T, rows []scale.Row, component string) scale.Row {
	t.Helper()
	for _, r := range rows {
		if strings.HasPrefix(r.Component, component) {
			return r
		}
	}
	t.Fatalf("no row %q", component)
	return scale.Row{}
}

// TestInflightShards: the default 4 shards carry 1 000 msg/s and not 10 000, and the
// template's range of InflightShards reaches the shards that 100 000 msg/s needs.
func TestInflightShards(t *testing.T) {
	in := base
	in.Groups = 1000
	for rate, ok := range map[float64]bool{100: true, 1000: true, 10_000: false} {
		in.Rate = rate
		if got := find(t, scale.Plan(in), "inflight").OK; got != ok {
			t.Errorf("4 shards at %.0f msg/s: ok=%v, want %v", rate, got, ok)
		}
	}
	tpl, err := samtemplate.Transform(context.Background(), "../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := tpl.Parameters["InflightShards"]
	if p.MaxValue == nil || float64(shardsAt(100_000)) > *p.MaxValue {
		t.Errorf("InflightShards MaxValue %v: 100 000 msg/s needs %d", p.MaxValue, shardsAt(100_000))
	}
	if def, ok := p.Default.(float64); !ok || int(def) < shardsAt(1000) {
		t.Errorf("InflightShards Default %v: 1 000 msg/s needs %d", p.Default, shardsAt(1000))
	}
	for _, r := range rates {
		in.Rate, in.InflightShards = r, shardsAt(r)
		if !find(t, scale.Plan(in), "inflight").OK {
			t.Errorf("%.0f msg/s with the advised %d shards is over the ceiling", r, shardsAt(r))
		}
	}
}

// TestHotGroup: one group's records run one at a time, so a group takes at most
// 1/RecordSeconds messages per second whatever the rest of the system can do.
func TestHotGroup(t *testing.T) {
	in := base
	in.InflightShards, in.Rate, in.Groups = 4, 100, 1 // one account sends everything
	if find(t, scale.Plan(in), "one message group").OK {
		t.Error("100 msg/s in one group at 40 ms per record should be over the group's 25 msg/s")
	}
	in.Groups = 10
	if !find(t, scale.Plan(in), "one message group").OK {
		t.Error("10 msg/s per group should fit")
	}
}

// TestFIFOThroughputMode: without high-throughput mode, the receipts queue stops the
// consumer at 300 msg/s.
func TestFIFOThroughputMode(t *testing.T) {
	in := base
	in.Rate, in.Groups, in.HighThroughput = 1000, 100, false
	if find(t, scale.Plan(in), "FIFO queue").OK {
		t.Error("1 000 SendMessage/s on a FIFO queue without high-throughput mode should be over 300")
	}
	in.HighThroughput = true
	if !find(t, scale.Plan(in), "FIFO queue").OK {
		t.Error("high-throughput mode should carry 1 000 msg/s")
	}
}

// TestScaleTable prints the table SCALING.md shows (make scale).
func TestScaleTable(t *testing.T) {
	var b bytes.Buffer
	if err := scale.Write(&b, base, rates, groupsAt, shardsAt); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("SCALE_TABLE") != "" {
		_, _ = os.Stdout.Write(b.Bytes())
	}
	if !strings.Contains(b.String(), "**100000 msg/s**") {
		t.Errorf("table misses a rate:\n%s", b.String())
	}
}
