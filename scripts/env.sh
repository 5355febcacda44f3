# Sourced by the scripts: shared build cache and Python venv outside the checkout, so a fresh
# clone (CI) reuses what an earlier build on this machine left behind.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nodecycle/target}"
export NODECYCLE_VENV="${NODECYCLE_VENV:-$HOME/.cache/nodecycle/venv}"
export NODECYCLE_PYTHON="$NODECYCLE_VENV/bin/python"
export PATH="$NODECYCLE_VENV/bin:$PATH"

# Creates the venv and installs the test requirements (moto server, cfn-lint) when missing or stale.
nodecycle_python_setup() {
  local req="tests/requirements.txt" stamp="$NODECYCLE_VENV/.nodecycle-requirements"
  if [ ! -x "$NODECYCLE_PYTHON" ]; then
    echo "==> creating Python venv at $NODECYCLE_VENV" >&2
    python3 -m venv "$NODECYCLE_VENV"
  fi
  if ! cmp -s "$req" "$stamp"; then
    echo "==> installing $req" >&2
    "$NODECYCLE_PYTHON" -m pip install --quiet --disable-pip-version-check -r "$req"
    cp "$req" "$stamp"
  fi
}
