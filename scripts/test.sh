#!/usr/bin/env bash
# The full test suite: formatting, lints, template checks and CDK parity, unit, property and
# integration tests (moto server and the Kubernetes API stand-in start inside the tests, and a real
# control plane built from the Go module proxy: Go needed). No AWS account needed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
nodecycle_python_setup

echo "==> cargo fmt --check" >&2
cargo fmt --all -- --check
echo "==> scripts/figures.sh parses (it runs release builds: not here)" >&2
bash -n scripts/figures.sh
"$NODECYCLE_PYTHON" -m py_compile scripts/figures.py
echo "==> layers (shared/src/lib.rs's layer list: no upward reference, no circle)" >&2
"$NODECYCLE_PYTHON" scripts/layers.py --allow scripts/layers-allow.txt
echo "==> function length (the rotator pass: at most 100 lines a function)" >&2
"$NODECYCLE_PYTHON" scripts/function_length.py --max 100 shared/src/handlers/rotator
echo "==> cargo clippy" >&2
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "==> cargo check the pure core alone (nodecycle-shared without default features)" >&2
# About 1 s warm, 30 s cold: the core must build without the AWS and Kubernetes adapters.
cargo check -p nodecycle-shared --no-default-features --locked
# Template checks as CloudFormation sees it (cfn-lint current and 1.51 on the source and the
# translated template, sam validate --lint, checkov with its baseline), then the CDK app (offline
# synth, parity with the SAM-translated template). Their venvs are NODECYCLE_LINT_VENV*; the role
# tests in tests/tests/template.rs translate the template with that venv too.
export NODECYCLE_LINT_VENV="${NODECYCLE_LINT_VENV:-$NODECYCLE_VENV-lint}"
scripts/lint-template.sh
scripts/check-cdk.sh
# The release workflow runs on GitHub only (on a tag): actionlint checks its syntax, expressions
# and action inputs here (and its shell steps when shellcheck is installed). Built once from the
# Go module proxy, pinned, then cached.
echo "==> actionlint .github/workflows" >&2
actionlint_dir="$HOME/.cache/nodecycle/go-bin/actionlint-v1.7.12"
if [ ! -x "$actionlint_dir/actionlint" ]; then
  GOBIN="$actionlint_dir" go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
fi
"$actionlint_dir/actionlint" .github/workflows/*.yml
# The fake cloud's self-checks, every tests/fakecloud/check_*.py (each says in its docstring
# what it checks: EKS node group updates, faults, Auto Scaling and the Cluster Autoscaler actor,
# indexed lookups, transactions, forked clouds).
for check in tests/fakecloud/check_*.py; do
  echo "==> fakecloud self-check $check" >&2
  "$NODECYCLE_PYTHON" "$check"
done
echo "==> cargo build (binaries the CLI tests run)" >&2
# cargo test builds a package's binaries only for that package's own integration tests; the
# CLI tests live in the tests crate, so build the `nodecycle` binary explicitly first.
cargo build --workspace --bins --locked
echo "==> the real Kubernetes control plane (scripts/controlplane.sh: built once, then cached)" >&2
# The tests in tests/tests/controlplane.rs start etcd, kube-apiserver, the controller manager,
# the scheduler and KWOK from this directory, and fail without it.
NODECYCLE_CONTROLPLANE_BIN="$(scripts/controlplane.sh)"
export NODECYCLE_CONTROLPLANE_BIN
echo "==> the previous release's CLI (scripts/baseline.sh: the rollback test runs it)" >&2
# tests/tests/rollback.rs runs the release a rollback goes back to (scripts/rollback-baseline)
# over a table this version wrote, and fails without it. Only its own crates compile.
NODECYCLE_BASELINE_BIN="$(scripts/baseline.sh)"
export NODECYCLE_BASELINE_BIN
echo "==> cargo test" >&2
# The integration tests mostly wait, not compute: on the Kubernetes stand-in's clock (pod
# grace periods, node registration), on the SDK's retry backoff, on moto. Three at a time per
# core keeps the cores busy (docs/development.md, Tests, has the figures). RUST_TEST_THREADS
# set by the caller wins.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-$(( $(getconf _NPROCESSORS_ONLN) * 3 ))}"
cargo test --workspace --locked
