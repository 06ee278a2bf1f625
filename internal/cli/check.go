package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
)

// runCheck is the final check of traffic sent with `idemctl send --record FILE`, against
// any deployment (moto, LocalStack, AWS): every balance in the ledger equals the sum of
// the distinct payments recorded. It exits 1 when one does not.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("check", stderr)
	record := flags.String("record", "", "the payments sent, as `send --record` wrote them (required)")
	table := flags.String("ledger-table", "", "ledger table (default $LEDGER_TABLE)")
	pos, code, ok := parseArgs(flags, args)
	if !ok {
		return code
	}
	if len(pos) > 0 || *record == "" {
		return usageError(flags, stderr, "want --record FILE and no arguments")
	}
	name := setting(*table, env, "LEDGER_TABLE")
	if name == "" {
		return fail(stderr, "check", errNotSet("LEDGER_TABLE", "ledger-table"))
	}
	b, err := os.ReadFile(*record)
	if err != nil {
		return fail(stderr, "check", err)
	}
	var payments []ledger.Payment
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		p, err := ledger.Decode([]byte(line))
		if err != nil {
			return fail(stderr, "check", fmt.Errorf("%s line %d: %w", *record, i+1, err))
		}
		payments = append(payments, p)
	}
	awsCfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return fail(stderr, "check", err)
	}
	got, err := ledger.Balances(ctx, dynamodb.NewFromConfig(awsCfg), name)
	if err != nil {
		return fail(stderr, "check", err)
	}
	want := ledger.ExpectedBalances(payments)
	var bad []string
	for _, acct := range slices.Sorted(maps.Keys(want)) {
		if got[acct] != want[acct] {
			bad = append(bad, fmt.Sprintf("%s: %d, want %d", acct, got[acct], want[acct]))
		}
	}
	fmt.Fprintf(stdout, "ledger check: %d payments over %d accounts\n", len(payments), len(want))
	if len(bad) > 0 {
		return fail(stderr, "check", errors.New("balances differ from the sum of the distinct payments:\n  "+strings.Join(bad, "\n  ")))
	}
	fmt.Fprintln(stdout, "ledger check: every balance = sum of distinct payments OK")
	return exitOK
}

func init() {
	commands = append(commands, command{"check", "--record FILE [--ledger-table T]",
		"after `send --record FILE` and the consumption (idemctl run, or a deployment): every balance = sum of the distinct payments", runCheck})
}
