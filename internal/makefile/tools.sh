#!/usr/bin/env bash
# tools.sh TARGET...
#
# Checks that the tools the given make targets need are installed, before make runs any
# of them. Prints every missing tool with the command that installs it, and exits 1 if
# one is missing; prints nothing and exits 0 when all are there. The Makefile calls it
# with the targets on its command line; `make tools` alone checks for test and demo.
#
# It only looks: `command -v`, one `python3 -c 'import moto…'`, and for `make demo` a
# probe of the endpoint it would reuse and `docker info`. It installs nothing.
set -uo pipefail

# Versions this repository is tested with (README: Quick start).
MOTO_VERSION=5.2.1
CFN_LINT_SERIES=1.51

# install TOOL: the commands that install it on a fresh machine, one per line.
install() {
  case $1 in
  go) echo "Go 1.26 or later (go.mod): https://go.dev/doc/install" ;;
  moto) echo "python3 -m pip install 'moto[server]==$MOTO_VERSION'" ;;
  cfn-lint) echo "python3 -m pip install 'cfn-lint==$CFN_LINT_SERIES.*'" ;;
  curl) echo "sudo apt-get install curl        (Fedora: sudo dnf install curl; macOS: brew install curl)" ;;
  sam)
    echo "curl -L https://github.com/aws/aws-sam-cli/releases/latest/download/aws-sam-cli-linux-x86_64.zip -o aws-sam-cli-linux-x86_64.zip"
    echo "unzip aws-sam-cli-linux-x86_64.zip -d sam-installation && sudo ./sam-installation/install"
    echo "(Linux x86_64; arm64, macOS, Windows: https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/install-sam-cli.html)"
    ;;
  esac
}

# needs TARGET: the tools a target runs.
needs() {
  case $1 in
  test | unit | bench | reliability | cost | mutation) echo go moto curl ;;
  demo) echo go local-aws curl ;;
  bench-e2e | bench-ingress) echo go moto curl ;;
  check | lint | actionlint | build | fuzz | clean | scale | rename | sim | sim-holes) echo go ;;
  cfn-lint) echo cfn-lint ;;
  deploy) echo sam go ;;
  *) ;;
  esac
  # aws-sam-translator, which the tests of the transformed template run, comes with cfn-lint.
  [[ $1 == test || $1 == unit || $1 == bench || $1 == cost || $1 == mutation ]] && echo cfn-lint
}

has_moto() {
  if command -v python3 >/dev/null 2>&1 &&
    python3 -c 'import moto.moto_server.werkzeug_app, werkzeug.serving' >/dev/null 2>&1; then
    return 0
  fi
  command -v moto_server >/dev/null 2>&1
}

# has_local_aws: what localstack/with-local-aws.sh uses for `make demo` is there: an
# AWS_ENDPOINT_URL, an endpoint answering on LOCAL_AWS_PORT, a Docker engine, or moto.
has_local_aws() {
  [[ -n ${AWS_ENDPOINT_URL:-} ]] && return 0
  if command -v curl >/dev/null 2>&1 &&
    curl -s -o /dev/null --max-time 2 "http://127.0.0.1:${LOCAL_AWS_PORT:-4566}" 2>/dev/null; then
    return 0
  fi
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    return 0
  fi
  has_moto
}

has() {
  case $1 in
  moto) [[ -n ${AWS_ENDPOINT_URL:-} ]] || has_moto ;;
  local-aws) has_local_aws ;;
  *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(test demo)

declare -A wanted=()
order=()
for t in "${targets[@]}"; do
  for tool in $(needs "$t"); do
    [[ $tool == local-aws ]] && tool=moto-or-local-aws
    if [[ -z ${wanted[$tool]:-} ]]; then
      wanted[$tool]="make $t"
      order+=("$tool")
    fi
  done
done

missing=0
declare -A printed=()
for tool in "${order[@]}"; do
  probe=$tool name=$tool
  [[ $tool == moto-or-local-aws ]] && probe=local-aws name=moto
  has "$probe" && continue
  [[ -n ${printed[$name]:-} ]] && continue
  printed[$name]=1
  if [[ $missing == 0 ]]; then
    echo "Missing tools: nothing was run. Install them, then run make again." >&2
  fi
  missing=$((missing + 1))
  echo "  $name (needed by ${wanted[$tool]}):" >&2
  install "$name" | sed 's/^/      /' >&2
  if [[ $tool == moto-or-local-aws ]]; then
    echo "      (or start a Docker engine: make demo then runs LocalStack)" >&2
  fi
done
[[ $missing == 0 ]]
