// Package scale is the scale model of SCALING.md as a program: for a target rate in
// messages per second it gives the load on each component that has a ceiling, the
// ceiling with its source, and the parameter to raise. It is arithmetic on documented
// limits and the template's parameters; it measures nothing.
package scale

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Documented limits, each with its source.
const (
	// PartitionWCU: one DynamoDB partition (of a table or an index) takes 1 000 write
	// units per second.
	// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html
	PartitionWCU = 1000
	// NewTableWarmWCU: a new on-demand table takes 4 000 write units per second at once
	// and adjusts higher with sustained traffic (same page).
	NewTableWarmWCU = 4000
	// FIFOCallsPerAction: a FIFO queue not in high-throughput mode takes 300 calls per
	// second per API action (3 000 messages per second with batches of 10).
	// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/troubleshooting-fifo-throttling-issues.html
	FIFOCallsPerAction = 300
	// ESMStartBatches and ESMScalePerMinute: on a standard queue the event source mapping
	// starts with 5 concurrent batches and adds up to 300 per minute, up to ESMMaxBatches.
	// On a FIFO queue its concurrency is at most the number of active message groups (or
	// MaximumConcurrency, 2..1000, if lower).
	// https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html
	ESMStartBatches   = 5
	ESMScalePerMinute = 300
	ESMMaxBatches     = 1000
	// TransactionActions: TransactWriteItems takes at most 100 actions.
	// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
	TransactionActions = 100
)

// Headroom is the fraction of a ceiling the model plans to use.
const Headroom = 0.8

// Inputs describe the deployment and the traffic.
type Inputs struct {
	Rate           float64 // messages per second
	InflightShards int     // the template's InflightShards
	BatchSize      int     // the event source mapping's BatchSize (template: 10)
	RecordSeconds  float64 // time one record takes in the handler (acquire, commit, receipt)
	Groups         int     // active message groups (accounts) at that rate
	WritesPerMsg   int     // transaction actions per message (completion + business writes)
	HighThroughput bool    // the FIFO queues are in high-throughput mode (the template's)
}

// Row is one component at one rate.
type Row struct {
	Component string
	Load      string // what the rate asks of it
	Ceiling   string // what it takes, with the setting that bounds it
	OK        bool   // load within Headroom of the ceiling
	Raise     string // what to change when not OK ("" when OK)
}

// Plan returns the rows for in.
func Plan(in Inputs) []Row {
	var rows []Row
	// inflight index: the acquire adds the record to the index (one write), the
	// completion removes it (another); each shard is one partition key value.
	gsiPerShard := 2 * in.Rate / float64(in.InflightShards)
	need := int(math.Ceil(2 * in.Rate / (PartitionWCU * Headroom)))
	rows = append(rows, Row{
		Component: "inflight index (GSI)",
		Load:      fmt.Sprintf("%.0f WCU/s per shard (%d shards)", gsiPerShard, in.InflightShards),
		Ceiling:   fmt.Sprintf("%d WCU/s per partition", PartitionWCU),
		OK:        gsiPerShard <= PartitionWCU*Headroom,
		Raise:     fmt.Sprintf("InflightShards >= %d", need),
	})
	// Tables: acquire PutItem (1 unit) and a transaction of WritesPerMsg items of at
	// most 1 KB (2 units each); keys are spread, one record per key.
	tableWCU := in.Rate * float64(1+2*in.WritesPerMsg)
	rows = append(rows, Row{
		Component: "tables (idempotency + ledger)",
		Load:      fmt.Sprintf("%.0f WCU/s (%d per message)", tableWCU, 1+2*in.WritesPerMsg),
		Ceiling:   fmt.Sprintf("%d WCU/s at once on a new on-demand table; more once warmed", NewTableWarmWCU),
		OK:        tableWCU <= NewTableWarmWCU*Headroom,
		Raise:     "pre-warm the tables (WarmThroughput) or ramp up; check the account's table quotas",
	})
	// FIFO queues: without high-throughput mode, the receipt's SendMessage (one call per
	// message) reaches 300 calls/s first.
	fifoOK := in.HighThroughput || in.Rate <= FIFOCallsPerAction*Headroom
	rows = append(rows, Row{
		Component: "FIFO queue, per API action",
		Load:      fmt.Sprintf("%.0f SendMessage/s (receipts)", in.Rate),
		Ceiling:   fmt.Sprintf("%d calls/s without high-throughput mode; the regional quota with it", FIFOCallsPerAction),
		OK:        fifoOK,
		Raise:     "FifoThroughputLimit: perMessageGroupId (the template sets it)",
	})
	// One group runs one record at a time: its rate is bounded by the record's duration.
	perGroup := in.Rate / float64(in.Groups)
	groupCeiling := 1 / in.RecordSeconds
	rows = append(rows, Row{
		Component: "one message group (hot account)",
		Load:      fmt.Sprintf("%.1f msg/s per group", perGroup),
		Ceiling:   fmt.Sprintf("%.0f msg/s (one record at a time, %.0f ms each)", groupCeiling, in.RecordSeconds*1000),
		OK:        perGroup <= groupCeiling*Headroom,
		Raise:     fmt.Sprintf("more groups: >= %d (split hot accounts)", int(math.Ceil(in.Rate/(groupCeiling*Headroom)))),
	})
	// Concurrency: records in flight = rate x duration (Little's law); a batch carries
	// up to BatchSize of them, its groups concurrently.
	inflight := in.Rate * in.RecordSeconds
	batches := int(math.Ceil(inflight / float64(in.BatchSize)))
	rows = append(rows, Row{
		Component: "Lambda concurrency (FIFO)",
		Load:      fmt.Sprintf("%.0f records in flight: >= %d batches", inflight, batches),
		Ceiling:   fmt.Sprintf("min(%d groups, MaximumConcurrency, %d)", in.Groups, ESMMaxBatches),
		OK:        float64(batches) <= float64(min(in.Groups, ESMMaxBatches))*Headroom,
		Raise:     fmt.Sprintf("more groups; account concurrency >= %d; above %d, more queues", batches, ESMMaxBatches),
	})
	minutes := math.Max(0, float64(batches-ESMStartBatches)) / ESMScalePerMinute
	rows = append(rows, Row{
		Component: "Lambda scale-up (standard queue)",
		Load:      fmt.Sprintf("%d batches, reached after %.1f min", batches, minutes),
		Ceiling:   fmt.Sprintf("%d at start, +%d per minute, %d at most", ESMStartBatches, ESMScalePerMinute, ESMMaxBatches),
		OK:        batches <= ESMMaxBatches,
		Raise:     fmt.Sprintf("above %d, more queues", ESMMaxBatches),
	})
	rows = append(rows, Row{
		Component: "transaction size",
		Load:      fmt.Sprintf("%d actions per message", in.WritesPerMsg),
		Ceiling:   fmt.Sprintf("%d actions, 4 MB", TransactionActions),
		OK:        in.WritesPerMsg <= TransactionActions,
		Raise:     "fewer business writes per message (the completion takes one action)",
	})
	for i := range rows {
		if rows[i].OK {
			rows[i].Raise = ""
		}
	}
	return rows
}

// Write prints the plan for each rate as a Markdown table, with the shards and groups
// that shards and groups give for the rate.
func Write(w io.Writer, base Inputs, rates []float64, groups func(rate float64) int, shards func(rate float64) int) error {
	var b strings.Builder
	for _, r := range rates {
		in := base
		in.Rate, in.Groups, in.InflightShards = r, groups(r), shards(r)
		fmt.Fprintf(&b, "\n**%.0f msg/s** (InflightShards %d, %d groups, %.0f ms per record)\n\n", r, in.InflightShards, in.Groups, in.RecordSeconds*1000)
		b.WriteString("| component | load | ceiling | ok | raise |\n|---|---|---|---|---|\n")
		for _, row := range Plan(in) {
			ok := "yes"
			if !row.OK {
				ok = "**no**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row.Component, row.Load, row.Ceiling, ok, row.Raise)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
