package tooling

// Entry is a file or a folder of the repository, by its path from the repository's root
// (a folder without a trailing slash), and what it holds.
type Entry struct{ Path, What string }

// Production is what a production team keeps and deploys: the library, the functions,
// the template and its deploy settings, the sample events, the local AWS scripts, the
// Makefile (whose build and deploy targets it uses) and the internal packages the
// functions import.
var Production = []Entry{
	{"idem", "the idempotency library"},
	{"functions", "the consumer, the reaper, the ingress and the message types (examples)"},
	{"template.yaml", "the SAM template"},
	{"samconfig.toml", "sam deploy's settings"},
	{"events", "sample events for sam local invoke"},
	{"localstack", "with-local-aws.sh (moto or LocalStack for the tests) and deploy.sh"},
	{"Makefile", "build, deploy, lint, cfn-lint, actionlint, check, fuzz; the tooling's targets too"},
	{".github/workflows", "make test on pull requests; the deploy, with an AWS role assumed by OIDC"},
	{"internal/makefile", "tools.sh, the tool check every Makefile target runs first (build and deploy too), and its tests"},
	{"internal/awsconf", "the AWS SDK configuration of the functions, idemctl and the tests, with the SDK's request-body race worked around"},
	{"internal/envconf", "the functions' settings from their environment"},
	{"internal/fnmain", "the start-up the three functions' mains share: AWS configuration, tracing, the stack's secret, the runtime loop"},
	{"internal/initerr", "a failed init reported to the Lambda Runtime API"},
	{"internal/stacksecret", "the stack's secret read from Secrets Manager at init"},
	{"internal/syncw", "serialized writes to a shared log"},
	{"internal/tracing", "OpenTelemetry for the functions: the export path from their environment, the SDK clients instrumented, a span per invocation, the trace file of the local tools"},
	{"go.mod", "the module"},
	{"go.sum", "the module's checksums"},
}

// TestSupport is what the consumer's own tests (idem/, functions/) import: kept with
// them. None of it imports a Deletable folder.
var TestSupport = []Entry{
	{"internal/awstest", "moto for the tests, SDK clients and request counting"},
	{"internal/exampletest", "the wired example and the template's resources on moto for a test; a consumer loop over the real SDK"},
	{"internal/stack", "template.yaml's queues, tables and secret created on moto (exampletest's engine)"},
	{"internal/samtemplate", "the template after the SAM transform (the IAM tests)"},
	{"internal/funcurl", "a Lambda function URL on loopback (the ingress's tests)"},
	{"internal/loopback", "the Host and cross-site checks of every server the tools open on loopback"},
	{"internal/simdb", "an in-memory DynamoDB (idem's contract tests)"},
	{"internal/itemsize", "DynamoDB's item size rule (simdb's 400 KB limit, the cost model)"},
	{"internal/dedupgroup", "what a high-throughput FIFO queue needs of its senders (idem's tests)"},
	{"internal/gateway", "a stand-in for an outside HTTP service called with the idempotency key (the payouts' tests, the demo, idemctl)"},
}

// Deletable is the development tooling: no Production or TestSupport package imports it,
// and TestRemovingTheToolingLeavesTheConsumerGreen deletes it from a copy. The Makefile
// targets that run it stop working once it is deleted (docs/tooling.md).
var Deletable = []Entry{
	{"cmd", "idemctl: the local runner and operations CLI"},
	{"internal/cli", "idemctl's commands"},
	{"internal/demo", "make demo"},
	{"internal/runner", "the local SQS event source mapping"},
	{"internal/lambdaenv", "Lambda execution environments of the bootstraps on the host"},
	{"internal/localfn", "the template's functions as local execution environments"},
	{"internal/coldstart", "the cold start measurement and the local Runtime API"},
	{"internal/reliability", "the reliability suite (RELIABILITY.md)"},
	{"internal/faults", "fault injection between the SDK and moto"},
	{"internal/sim", "the deterministic simulator (make sim)"},
	{"internal/mutation", "the mutation score of idem and the ingress (make mutation)"},
	{"internal/bench", "the benchmarks that need the tooling (make bench, make bench-ingress)"},
	{"internal/cost", "the cost per million messages (make cost)"},
	{"internal/scale", "the scale model of SCALING.md (make scale)"},
	{"internal/adapt", "a new message type (testdata/shipments) added, wired and tested in a copy"},
	{"internal/rename", "make rename"},
	{"internal/sampleevents", "the generator and check of events/"},
	{"internal/samdeploy", "the template's deployment on moto's CloudFormation"},
	{"internal/libonly", "docs/library.md's main built as a module of its own"},
	{"internal/doccheck", "the check of the documentation's shell commands"},
	{"internal/tooling", "these lists and their check"},
}
