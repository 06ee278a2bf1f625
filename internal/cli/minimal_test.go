package cli_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/cli"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest/minimal"
)

// TestMinimalExample: a message type with example.Example's four methods only
// (internal/exampletest/minimal), as the build's one example. idemctl up creates its
// block's resources, send --from-file sends its messages and run consumes them; the
// commands that need an optional interface refuse in one line that names it (no usage
// text: no flag would fix it) and exit 1.
func TestMinimalExample(t *testing.T) {
	cli.UseExamples(t, []example.Example{minimal.Example{}})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"send"}, `idemctl send: example "minimal" has no traffic generator (implement example.Traffic); send your own messages with --from-file`},
		{[]string{"events", "--out", t.TempDir()}, `idemctl events: example "minimal" has no traffic generator (implement example.Traffic)`},
		{[]string{"check", "--record", "sent.jsonl"}, `idemctl check: example "minimal" has no check of its tables (implement example.Checker)`},
		{[]string{"demo"}, `idemctl demo: example "minimal" has no traffic generator (implement example.Traffic)`},
	} {
		r := idemctl(t, localEnv(t), c.args...)
		if r.code != 1 || r.stderr != c.want+"\n" {
			t.Errorf("idemctl %s: exit %d, stderr %q; want 1 and the one line %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}

	e := localEnv(t)
	// template.yaml carries the default block; --example swaps the minimal one in.
	r := idemctl(t, e, "up", "--template", templatePath, "--example", "minimal", "--stack", stackName(t))
	if r.code != 0 {
		t.Fatalf("up: exit %d\n%s", r.code, r.stderr)
	}
	maps.Copy(e, parseExports(t, r.stdout))
	if e[example.Var] != "minimal" || e[minimal.TableVar] == "" {
		t.Fatalf("up exported %s=%q %s=%q", example.Var, e[example.Var], minimal.TableVar, e[minimal.TableVar])
	}
	file := filepath.Join(t.TempDir(), "notes.jsonl")
	if err := os.WriteFile(file, []byte(`{"note_id":"n-1"}`+"\n"+`{"note_id":"n-2"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := idemctl(t, e, "send", "--from-file", file); r.code != 0 {
		t.Fatalf("send --from-file: exit %d\n%s", r.code, r.stderr)
	}
	r = idemctl(t, e, "run", "--in-process", "--template", templatePath, "--until-idle", "2s", "--wait", "1s", "--reaper-every", "1s")
	if r.code != 0 || !strings.Contains(r.stderr, "2 deleted") {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	out, err := awstest.DynamoDB(t).Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(e[minimal.TableVar])})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 2 {
		t.Errorf("the notes table holds %d items, want the 2 notes", len(out.Items))
	}
}
