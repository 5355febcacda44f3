#!/usr/bin/env bash
# Runs nodecycle locally, no AWS account: starts the fake cloud (moto server + fixtures + a
# Kubernetes API stand-in per cluster), seeds two clusters with a 6-node Auto Scaling group each
# on AL2023 v20240807, a golden image, a 3-node managed node group (prod/golden) on a launch
# template naming that image, and three example pools, then runs the real ami-watcher and rotator
# handlers (the same code as the Lambdas) through `nodecycle run`:
#   AWS publishes AL2023 v20241109 and the image pipeline a new golden image; the watcher moves
#   the @latest test pool and the golden pool while the pinned prod pool stays; the rotator then
#   replaces the test pool's nodes pass after pass, never more than its budget ("2") at once, and
#   rolls the golden node group with UpdateNodegroupConfig (maxUnavailable = its budget, 1) and
#   UpdateNodegroupVersion (a new launch template version), which the fake EKS rolls out in its
#   own time (surge, drain, replace, scale down) while the rotator follows it with DescribeUpdate,
#   until every node of both runs its new AMI. A pipeline's `nodecycle wait`, started before the
#   passes, exits 0 once test/general's published rollout status says so.
# Then the tiered rollout: prod/apps (promotion from test/general) takes v20241109 after its soak
# (20 s here); a bad release (v20241201, nodes never Ready) is quarantined in test, test rolls
# back to v20241109 in the same pass (launch template first, surges given back), and prod/apps
# never touches it; `nodecycle wait` for v20241201 exits 1 with the quarantine's reason.
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
export NODECYCLE_DEMO_STATE="$workdir/summary-state.json"
# Short soak and replacement timeout so the tiered rollout fits in the demo (72h and 15m in
# production; examples/prod-apps.yaml says 72h).
export NODECYCLE_DEMO_SOAK=20s NODECYCLE_REPLACEMENT_TIMEOUT=20s
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

echo "==> what the rotator will do for test/general (nodecycle plan changes nothing)"
"$NODECYCLE" plan examples/test-general.yaml 2>/dev/null | "$NODECYCLE_PYTHON" -c 'import json,sys; p=json.load(sys.stdin); print("   allowed:", p["allowed"], "| candidates:", len(p["candidates"]), "| blocked:", p["blocked"])'

echo "==> what the rotator will do for prod/golden, a managed node group"
"$NODECYCLE" plan examples/prod-golden.yaml 2>/dev/null | "$NODECYCLE_PYTHON" -c 'import json,sys; p=json.load(sys.stdin); print("   allowed:", p["allowed"], "| drifted:", p["drifted"], "| update:", p["update"], p.get("image", ""), "maxUnavailable", p.get("maxUnavailable"))'

converged() {
  "$NODECYCLE_PYTHON" scripts/demo_seed.py converged test-general 6 &&
    "$NODECYCLE_PYTHON" scripts/demo_seed.py converged-nodegroup prod golden 3
}
echo "==> a pipeline waits for test/general to run v20241109: nodecycle wait, in the background,"
echo "    reading only the rollout status the rotator publishes (/nodecycle/status/test/general)"
"$NODECYCLE" wait --pool test/general --for up-to-date --release v20241109 --timeout 5m --interval 1s 2>"$workdir/wait.log" &
wait_pid=$!
echo "==> rotator passes (every minute in AWS; back to back here)"
passes=0
for pass in $(seq 1 40); do
  echo "-- pass $pass"
  passes=$pass
  "$NODECYCLE" run rotator --event events/scheduled-tick.json | summary
  sleep 0.5
  if converged >/dev/null; then
    break
  fi
done
echo "==> summary after $passes rotator passes"
converged || { echo "did not converge" >&2; exit 1; }
echo "   prod/general stays pinned to v20240807 (its nodes are current: nothing to rotate)"
# The pass that replaced the last node published what it observed; the next one publishes the
# end of the rollout.
for _ in 1 2 3; do
  kill -0 "$wait_pid" 2>/dev/null || break
  "$NODECYCLE" run rotator --event events/scheduled-tick.json >/dev/null
  sleep 2
done
if wait "$wait_pid"; then
  echo "   nodecycle wait exited 0: $(tail -n 1 "$workdir/wait.log")"
else
  echo "nodecycle wait did not see the rollout end:" >&2
  cat "$workdir/wait.log" >&2
  exit 1
fi

seed() { "$NODECYCLE_PYTHON" scripts/demo_seed.py "$@"; }
tick() {
  "$NODECYCLE" run ami-watcher --event events/scheduled-tick.json | summary
  "$NODECYCLE" run rotator --event events/scheduled-tick.json | summary
  sleep 1
}

echo "==> tiered rollout: prod/apps takes v20241109 only after test/general ran it on every node,"
echo "    Ready, for the soak ($NODECYCLE_DEMO_SOAK here); watcher and rotator ticks until prod/apps is on it"
for pass in $(seq 1 60); do
  echo "-- tick $pass"
  tick
  if seed converged prod-apps 4 v20241109 >/dev/null; then break; fi
done
seed converged prod-apps 4 v20241109 || { echo "prod/apps was not promoted" >&2; exit 1; }
seed pool-state test/general prod/apps

echo "==> AWS publishes AL2023 v20241201: its nodes never become Ready (a bad release)"
seed publish-bad v20241201 2024-12-01T12:00:00Z
echo "==> ticks: test/general rotates its budget (2), the replacements time out ($NODECYCLE_REPLACEMENT_TIMEOUT),"
echo "    the release is quarantined and test/general rolls back to v20241109; prod/apps never takes it"
for pass in $(seq 1 60); do
  echo "-- tick $pass"
  tick
  if seed quarantined v20241201 && seed converged test-general 6 v20241109 >/dev/null; then break; fi
done
seed quarantined v20241201 || { echo "v20241201 was not quarantined" >&2; exit 1; }
seed converged test-general 6 v20241109 || { echo "test/general did not roll back" >&2; exit 1; }
seed converged prod-apps 4 v20241109 || { echo "prod/apps left v20241109" >&2; exit 1; }
seed pool-state test/general prod/apps
echo "==> a pipeline waiting for v20241201 in test/general is told it will not come (exit 1, with why)"
set +e
"$NODECYCLE" wait --pool test/general --for up-to-date --release v20241201 --timeout 1m --interval 1s 2>"$workdir/wait.log"
code=$?
set -e
[ "$code" = 1 ] || { echo "nodecycle wait exited $code, not 1:" >&2; cat "$workdir/wait.log" >&2; exit 1; }
echo "   nodecycle wait exited 1: $(tail -n 1 "$workdir/wait.log")"
for release in v20241109 v20241201; do
  echo "==> nodecycle promotion $release (the release's journey through the stages)"
  "$NODECYCLE" promotion "$release" -o json 2>/dev/null | seed journey
done
