#!/usr/bin/env bash
# make local-deploy: build and deploy template.yaml, unchanged, into LocalStack with
# samlocal, so that the real Lambda service of LocalStack runs the bootstraps: the SQS
# event source mapping with partial batch responses, the scheduled reaper, the alarms.
#
# UNTESTED: the project's machines have no Docker engine, so this script has never run
# there (docs/localstack.md says so). Everything it does is in this one file.
#
# Needs: Docker (LocalStack runs each function in a container of its own, through the
# Docker socket), python3 with venv, Go. Pinned versions below.
#
# LocalStack features the community image provides for this stack: CloudFormation, S3
# (the deployment bucket), IAM and STS (roles are created, not enforced), SQS (FIFO),
# DynamoDB (with TTL and GSIs), Lambda (provided.al2023, run in Docker), the event
# source mapping for SQS (ReportBatchItemFailures), EventBridge rules (schedules),
# CloudWatch Logs and alarms. From 2026, images newer than the pin ask for
# LOCALSTACK_AUTH_TOKEN (exported from your shell if set).
#
# After it: source .aws-sam/localstack.env, then idemctl send --record (traffic) and,
# once LocalStack's Lambda has consumed the queue (not idemctl run), idemctl check.
set -euo pipefail

LOCALSTACK_IMAGE=localstack/localstack:4.9.2
SAM_CLI_VERSION=1.170.0
SAMLOCAL_VERSION=1.71.0       # aws-sam-cli-local
AWSLOCAL_VERSION=0.23.0       # awscli-local
AWSCLI_VERSION=1.46.2
STACK=${STACK:-idem-local}
PORT=${LOCAL_AWS_PORT:-4566}
CONTAINER=idempotent-sqs-consumer-localstack-deploy

cd "$(dirname "$0")/.."
die() { echo "local-deploy: $*" >&2; exit 1; }

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
command -v go >/dev/null || die "go is not installed"

# The tools, pinned, in a virtualenv of their own.
venv=.aws-sam/localstack-venv
if [ ! -x "$venv/bin/samlocal" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "aws-sam-cli==$SAM_CLI_VERSION" "aws-sam-cli-local==$SAMLOCAL_VERSION" \
    "awscli==$AWSCLI_VERSION" "awscli-local==$AWSLOCAL_VERSION"
fi
export PATH="$PWD/$venv/bin:$PATH"

# LocalStack with Lambda: the Docker socket lets it start the functions' containers.
# LAMBDA_IGNORE_ARCHITECTURE runs the template's arm64 functions in containers of this
# host's architecture, so the bootstraps are built for it (LAMBDA_ARCH below).
if ! docker ps --format '{{.Names}}' | grep -qx "$CONTAINER"; then
  docker run -d --rm --name "$CONTAINER" -p "127.0.0.1:$PORT:4566" \
    -e SERVICES=cloudformation,s3,iam,sts,sqs,dynamodb,lambda,events,logs,cloudwatch \
    -e LAMBDA_IGNORE_ARCHITECTURE=1 -e SQS_ENDPOINT_STRATEGY=path \
    -e LOCALSTACK_AUTH_TOKEN="${LOCALSTACK_AUTH_TOKEN:-}" \
    -v /var/run/docker.sock:/var/run/docker.sock "$LOCALSTACK_IMAGE" >/dev/null
fi
for _ in $(seq 60); do
  curl -fs "http://127.0.0.1:$PORT/_localstack/health" >/dev/null 2>&1 && break
  sleep 2
done
curl -fs "http://127.0.0.1:$PORT/_localstack/health" >/dev/null || die "LocalStack did not become healthy on port $PORT"

export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=${AWS_REGION:-us-east-1}
export AWS_REGION=$AWS_DEFAULT_REGION EDGE_PORT=$PORT AWS_ENDPOINT_URL="http://127.0.0.1:$PORT"

# sam build runs the Makefile's build-<Function> targets; LAMBDA_ARCH picks GOARCH.
LAMBDA_ARCH=$(go env GOARCH) samlocal build
samlocal deploy --stack-name "$STACK" --resolve-s3 --capabilities CAPABILITY_IAM \
  --no-confirm-changeset --no-fail-on-empty-changeset

# The variables idemctl needs: the deployed consumer's environment (whatever the wired
# example's block gives it: EXAMPLE, its tables and queues, IDEMPOTENCY_SCOPE...), as
# `idemctl up` exports it, and QUEUE_URL, the input queue, from the stack's outputs.
out() { awslocal cloudformation describe-stacks --stack-name "$STACK" \
  --query "Stacks[0].Outputs[?OutputKey=='$1'].OutputValue" --output text; }
consumer_env() { awslocal lambda get-function-configuration --function-name "$(out ConsumerFunctionName)" \
  --query 'Environment.Variables' --output json |
  python3 -c 'import json, shlex, sys
for k, v in json.load(sys.stdin).items():
    print("export %s=%s" % (k, shlex.quote(v)))'; }
mkdir -p .aws-sam
{
  echo "export AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL AWS_REGION=$AWS_REGION AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test"
  consumer_env
  echo "export QUEUE_URL='$(out QueueUrl)'"
} > .aws-sam/localstack.env
echo "local-deploy: stack $STACK is deployed in LocalStack ($AWS_ENDPOINT_URL)."
echo "  source .aws-sam/localstack.env"
echo "  go run ./cmd/idemctl send --count 200 --duplicates 0.3 --record sent.jsonl   # traffic"
echo "  go run ./cmd/idemctl check --record sent.jsonl                               # once consumed"
echo "  docker rm -f $CONTAINER                                                     # stop"
