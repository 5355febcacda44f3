#!/usr/bin/env bash
# Builds the `nodecycle` CLI of the release a rollback goes back to (scripts/rollback-baseline:
# the commit) for tests/tests/rollback.rs, and prints the binary's path on stdout (everything
# else goes to stderr), so `bin=$(scripts/baseline.sh)` works.
#
# The commit's tree is extracted (git archive: no worktree bookkeeping) to
# ~/.cache/nodecycle/baseline/<commit>, its binary renamed `nodecycle-baseline` there so that
# building it in the shared target directory never replaces this version's `nodecycle`; only
# the release's own crates compile (the dependencies are this version's, already built). Needs
# the commit in the repository's history (a shallow clone: `git fetch --unshallow`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
commit=$(grep -v '^#' scripts/rollback-baseline | grep -v '^[[:space:]]*$' | head -1 | tr -d '[:space:]')
if ! git cat-file -e "${commit}^{commit}" 2>/dev/null; then
  echo "baseline.sh: commit $commit (scripts/rollback-baseline) is not in this repository's history; fetch it (git fetch --unshallow)" >&2
  exit 1
fi
root="${NODECYCLE_BASELINE_CACHE:-$HOME/.cache/nodecycle/baseline}/$commit"
if [ ! -f "$root/.extracted" ]; then
  rm -rf "$root"
  mkdir -p "$root"
  git archive "$commit" | tar -x -C "$root"
  # The binary's own name: this version's `nodecycle` in the shared target dir stays its own.
  sed -i 's/^name = "nodecycle"$/name = "nodecycle-baseline"/' "$root/functions/ops/Cargo.toml"
  grep -q '^name = "nodecycle-baseline"$' "$root/functions/ops/Cargo.toml" || {
    echo "baseline.sh: cannot rename the nodecycle binary in $root/functions/ops/Cargo.toml" >&2
    exit 1
  }
  touch "$root/.extracted"
fi
echo "==> building the rollback baseline ${commit:0:12} (nodecycle-baseline)" >&2
(cd "$root" && cargo build -p ops --bin nodecycle-baseline --locked >&2)
echo "$CARGO_TARGET_DIR/debug/nodecycle-baseline"
