#!/usr/bin/env bash
# with-local-aws.sh [--free-port] -- COMMAND...
#
# Runs COMMAND with AWS_ENDPOINT_URL pointing at a local AWS-protocol endpoint, and
# stops whatever it started when COMMAND ends (also on Ctrl-C).
#
#   * AWS_ENDPOINT_URL already set: used as is, nothing is started.
#   * --free-port (make test): moto_server on a free 127.0.0.1 port, never Docker, so
#     tests never collide with a LocalStack or moto the user already runs.
#   * otherwise (make demo): LocalStack through docker compose when a Docker engine
#     answers `docker info`, else moto_server on 127.0.0.1:${LOCAL_AWS_PORT:-4566}.
#     An endpoint already answering on that port is reused and left running.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
free_port=0
if [[ ${1:-} == --free-port ]]; then free_port=1; shift; fi
[[ ${1:-} == -- ]] && shift
if [[ $# -eq 0 ]]; then
  echo "usage: $0 [--free-port] -- COMMAND..." >&2
  exit 2
fi

export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test}
export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
export AWS_REGION=${AWS_REGION:-us-east-1}
export AWS_EC2_METADATA_DISABLED=true

log() { echo "local-aws: $*" >&2; }

answers() { # answers URL: something speaks HTTP there
  curl -s -o /dev/null --max-time 2 "$1" 2>/dev/null
}

wait_for() { # wait_for URL SECONDS
  local url=$1 limit=$2 i
  for ((i = 0; i < limit * 10; i++)); do
    answers "$url" && return 0
    sleep 0.1
  done
  return 1
}

started_pid=""
started_compose=0
cleanup() {
  local rc=$?
  if [[ -n $started_pid ]]; then
    kill "$started_pid" 2>/dev/null || true
    wait "$started_pid" 2>/dev/null || true
    log "stopped moto_server (pid $started_pid)"
  fi
  if [[ $started_compose == 1 ]]; then
    docker compose -f "$here/docker-compose.yml" down >/dev/null 2>&1 || true
    log "stopped LocalStack"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# moto through internal/awstest/motoserver.py, which serializes DynamoDB requests: plain
# moto_server lets two concurrent conditional writes to one item both succeed, which real
# DynamoDB never does. Plain moto_server is the fallback when python3 cannot import moto.
start_moto() { # start_moto PORT
  local logfile=${TMPDIR:-/tmp}/moto-$1.log launcher="$here/../internal/awstest/motoserver.py"
  if command -v python3 >/dev/null && python3 -c 'import moto.moto_server.werkzeug_app, werkzeug.serving' 2>/dev/null; then
    python3 "$launcher" -H 127.0.0.1 -p "$1" --exit-with-parent >"$logfile" 2>&1 &
  elif command -v moto_server >/dev/null; then
    log "warning: python3 cannot import moto; plain moto_server's DynamoDB writes are not atomic under concurrency"
    moto_server -H 127.0.0.1 -p "$1" >"$logfile" 2>&1 &
  else
    log "moto not found: python3 -m pip install 'moto[server]==5.2.1' (or start LocalStack and set AWS_ENDPOINT_URL)"
    exit 1
  fi
  started_pid=$!
  if ! wait_for "http://127.0.0.1:$1" 30; then
    log "moto did not answer on port $1 within 30s; its log:"
    tail -20 "$logfile" >&2
    kill "$started_pid" 2>/dev/null
    started_pid=
    return 1
  fi
  log "moto (pid $started_pid) on http://127.0.0.1:$1, log in $logfile"
}

if [[ -n ${AWS_ENDPOINT_URL:-} ]]; then
  log "using AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"
elif [[ $free_port == 1 ]]; then
  # Below Linux's ephemeral range (32768-60999), where outgoing connections take their
  # ports: a port free a moment ago there may be taken by the time moto binds it.
  for _ in 1 2 3 4 5; do
    port=$(( (RANDOM % 12000) + 20000 ))
    (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # taken
    start_moto "$port" && break
  done
  [[ -n $started_pid ]] || { log "no free port found"; exit 1; }
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
else
  port=${LOCAL_AWS_PORT:-4566}
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
  if answers "$AWS_ENDPOINT_URL"; then
    log "reusing the endpoint already answering on $AWS_ENDPOINT_URL"
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    log "Docker engine found: starting LocalStack (localstack/docker-compose.yml)"
    LOCAL_AWS_PORT=$port docker compose -f "$here/docker-compose.yml" up -d
    started_compose=1
    wait_for "$AWS_ENDPOINT_URL/_localstack/health" 120 || { log "LocalStack did not become healthy"; exit 1; }
  else
    log "no Docker engine: starting moto_server"
    start_moto "$port" || exit 1
  fi
fi

"$@"
