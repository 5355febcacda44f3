#!/usr/bin/env bash
# Checks template.yaml and deploy/spoke.yaml as CloudFormation sees them, no AWS account needed:
#   * cfn-lint (current and 1.51) on the source and on the translated template (the
#     AWS::LanguageExtensions and AWS::Serverless transforms applied, for the parameter sets of
#     scripts/cfn/cfn.py: cfn-lint on the source does not look inside Fn::ForEach bodies the way
#     CloudFormation expands them, nor at what SAM generates);
#   * `sam validate --lint`;
#   * checkov on the translated template, every accepted finding in scripts/cfn/checkov-baseline.yaml;
#   * parliament (an IAM policy linter) on every role policy of the translated template, for each
#     parameter set, every accepted finding in scripts/cfn/parliament-baseline.yaml.
# Installs its tools into venvs of their own next to NODECYCLE_VENV (moto's venv is untouched):
# $NODECYCLE_LINT_VENV (default "$NODECYCLE_VENV-lint"), "$NODECYCLE_LINT_VENV-cfn-lint-1.51",
# "$NODECYCLE_LINT_VENV-checkov". Translated templates are left in $NODECYCLE_CFN_OUT
# (default $CARGO_TARGET_DIR/nodecycle-cfn).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export NODECYCLE_LINT_VENV="${NODECYCLE_LINT_VENV:-$NODECYCLE_VENV-lint}"
out="${NODECYCLE_CFN_OUT:-$CARGO_TARGET_DIR/nodecycle-cfn}"
mkdir -p "$out"
# No telemetry, no update checks, no credentials: the checks are offline.
export SAM_CLI_TELEMETRY=0 SAM_CLI_DISABLE_UPDATE_CHECK=1 AWS_DEFAULT_REGION=us-east-1 BC_SKIP_MAPPING=TRUE

nodecycle_venv_with "$NODECYCLE_LINT_VENV" scripts/cfn/requirements.txt
nodecycle_venv_with "$NODECYCLE_LINT_VENV-cfn-lint-1.51" scripts/cfn/requirements-cfn-lint-1.51.txt
nodecycle_venv_with "$NODECYCLE_LINT_VENV-checkov" scripts/cfn/requirements-checkov.txt
lint_current="$NODECYCLE_LINT_VENV/bin/cfn-lint"
lint_151="$NODECYCLE_LINT_VENV-cfn-lint-1.51/bin/cfn-lint"

for lint in "$lint_current" "$lint_151"; do
  echo "==> $("$lint" --version) template.yaml deploy/spoke.yaml" >&2
  "$lint" template.yaml deploy/spoke.yaml
done

echo "==> sam validate --lint" >&2
"$NODECYCLE_LINT_VENV/bin/sam" validate --lint --region us-east-1 --template template.yaml

translated=()
for set in minimal full cell; do
  echo "==> translate template.yaml ($set parameters)" >&2
  "$NODECYCLE_LINT_VENV/bin/python" scripts/cfn/translate.py --set "$set" --out "$out/translated-$set.json" template.yaml
  translated+=("$out/translated-$set.json")
done
# The spoke (no transform: service-managed StackSets refuse them) resolved for its own sets.
for set in minimal full cell; do
  echo "==> resolve deploy/spoke.yaml ($set parameters)" >&2
  "$NODECYCLE_LINT_VENV/bin/python" scripts/cfn/translate.py --set "$set" --out "$out/translated-spoke-$set.json" deploy/spoke.yaml
  translated+=("$out/translated-spoke-$set.json")
done
for lint in "$lint_current" "$lint_151"; do
  echo "==> $("$lint" --version) on the translated templates" >&2
  "$lint" "${translated[@]}"
done

echo "==> checkov (baseline scripts/cfn/checkov-baseline.yaml)" >&2
"$NODECYCLE_LINT_VENV/bin/python" scripts/cfn/scan.py "$NODECYCLE_LINT_VENV-checkov/bin/checkov" "${translated[@]}"

echo "==> parliament on the role policies (baseline scripts/cfn/parliament-baseline.yaml)" >&2
"$NODECYCLE_LINT_VENV/bin/python" scripts/cfn/iam_lint.py template.yaml
"$NODECYCLE_LINT_VENV/bin/python" scripts/cfn/iam_lint.py deploy/spoke.yaml
