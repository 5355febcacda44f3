#!/usr/bin/env bash
# Runs nodecycle locally, no AWS account: starts the fake cloud (moto server + fixtures), seeds
# two clusters, public AL2023 AMIs, a golden image and three example pools, then runs the real
# ami-watcher handler (the same code as the Lambda) through `nodecycle run`:
#   pass 1 resolves every pool; a new AL2023 release and a new golden image are published;
#   pass 2 moves the @latest test pool, the Parameter Store Change event moves the golden pool,
#   and the pinned prod pool stays where it is.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
nodecycle_python_setup

echo "==> building nodecycle" >&2
cargo build --quiet --bin nodecycle
NODECYCLE="$CARGO_TARGET_DIR/debug/nodecycle"

workdir=$(mktemp -d)
# The fake cloud serves until its stdin closes: hold a pipe open for it, close it on exit.
mkfifo "$workdir/hold"
: >"$workdir/ready"
"$NODECYCLE_PYTHON" tests/fakecloud/server.py <"$workdir/hold" >"$workdir/ready" 2>"$workdir/fakecloud.log" &
server_pid=$!
exec 4>"$workdir/hold"
trap 'exec 4>&-; kill $server_pid 2>/dev/null || true; rm -rf "$workdir"' EXIT
for _ in $(seq 600); do
  ready=$(head -n 1 "$workdir/ready")
  case "$ready" in *'"control"'*) break ;; esac
  kill -0 $server_pid 2>/dev/null || { cat "$workdir/fakecloud.log" >&2; exit 1; }
  sleep 0.1
done
aws=$(printf '%s' "$ready" | "$NODECYCLE_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["aws"])')
control=$(printf '%s' "$ready" | "$NODECYCLE_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["control"])')
export AWS_ENDPOINT_URL="$aws" AWS_REGION=us-east-2 AWS_DEFAULT_REGION=us-east-2 AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
unset AWS_PROFILE AWS_SESSION_TOKEN
export NODECYCLE_CONTROL="$control" NODECYCLE_TABLE=nodecycle-demo NODECYCLE_LOG=warn
echo "==> fake cloud at $aws" >&2

summary() { "$NODECYCLE_PYTHON" scripts/demo_seed.py summary; }

echo "==> seeding"
"$NODECYCLE_PYTHON" scripts/demo_seed.py seed

echo "==> validate the example policies"
"$NODECYCLE" validate examples/*.yaml

echo "==> what does prod/general resolve to, and why?"
"$NODECYCLE" resolve examples/prod-general.yaml 2>/dev/null | "$NODECYCLE_PYTHON" scripts/demo_seed.py explain

echo "==> pass 1: scheduled ami-watcher"
"$NODECYCLE" run ami-watcher --event events/scheduled-tick.json | summary

echo "==> AWS publishes AL2023 v20241109; the image pipeline publishes a new golden image"
"$NODECYCLE_PYTHON" scripts/demo_seed.py publish v20241109 2024-11-09T12:00:00Z
"$NODECYCLE_PYTHON" scripts/demo_seed.py golden golden-eks-al2023-2024.11.10 2024-11-10T09:00:00Z

echo "==> pass 2: scheduled ami-watcher (public parameters emit no events: polling finds them)"
"$NODECYCLE" run ami-watcher --event events/scheduled-tick.json | summary

echo "==> Parameter Store Change for /golden/eks/al2023/x86_64 (already applied by the pass: no change)"
"$NODECYCLE" run ami-watcher --event events/parameter-store-change.json | summary

echo "==> done: prod/general stayed pinned to v20240807; test/general moved to v20241109; prod/golden moved to the new golden image"
