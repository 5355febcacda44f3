#!/usr/bin/env bash
# The CDK app (cdk/): installs it from package-lock.json (npm ci), compiles it (tsc), synthesizes
# it offline (no account, no bootstrap; the functions get placeholder code when no release build
# is found) and checks it deploys what template.yaml deploys, and its spoke what deploy/spoke.yaml
# deploys (scripts/cfn/parity.py, for every parameter set of scripts/cfn/cfn.py). Needs Node.js >= 20 and the venv of
# scripts/lint-template.sh (run first by scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export NODECYCLE_LINT_VENV="${NODECYCLE_LINT_VENV:-$NODECYCLE_VENV-lint}"
export CDK_DISABLE_VERSION_CHECK=1 CDK_DISABLE_CLI_TELEMETRY=true SAM_CLI_TELEMETRY=0
out="${NODECYCLE_CFN_OUT:-$CARGO_TARGET_DIR/nodecycle-cfn}"
mkdir -p "$out"

cd cdk
echo "==> npm ci (cdk)" >&2
npm ci --no-audit --no-fund --loglevel=error
echo "==> tsc (cdk)" >&2
npx tsc
echo "==> cdk synth -c Clusters=prod,staging" >&2
start=$(date +%s)
npx cdk synth --quiet --output "$out/cdk.out" -c Clusters=prod,staging
echo "    synthesized in $(($(date +%s) - start)) s: $out/cdk.out/nodecycle.template.json" >&2
cd ..

echo "==> parity: CDK app vs the SAM-translated template" >&2
"$NODECYCLE_LINT_VENV/bin/python" scripts/cfn/parity.py cdk --out "$out/parity"
echo "==> parity: CDK spoke vs deploy/spoke.yaml" >&2
"$NODECYCLE_LINT_VENV/bin/python" scripts/cfn/parity.py cdk --template spoke --out "$out/parity"
