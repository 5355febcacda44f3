#!/usr/bin/env bash
# The full test suite: formatting, lints, template lint, unit, property and integration tests
# (moto server and the Kubernetes API stand-in start inside the tests). No AWS account needed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
nodecycle_python_setup

echo "==> cargo fmt --check" >&2
cargo fmt --all -- --check
echo "==> cargo clippy" >&2
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "==> cfn-lint template.yaml" >&2
cfn-lint template.yaml
echo "==> fakecloud self-check (EKS node group updates)" >&2
"$NODECYCLE_PYTHON" tests/fakecloud/check_eks_updates.py
echo "==> fakecloud self-check (fault injection)" >&2
"$NODECYCLE_PYTHON" tests/fakecloud/check_faults.py
echo "==> cargo build (binaries the CLI tests run)" >&2
# cargo test builds a package's binaries only for that package's own integration tests; the
# CLI tests live in the tests crate, so build the `nodecycle` binary explicitly first.
cargo build --workspace --bins --locked
echo "==> cargo test" >&2
cargo test --workspace --locked
