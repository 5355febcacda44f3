# Sourced by the scripts: shared build cache and Python venv outside the checkout, so a fresh
# clone (CI) reuses what an earlier build on this machine left behind.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nodecycle/target}"
export NODECYCLE_VENV="${NODECYCLE_VENV:-$HOME/.cache/nodecycle/venv}"
export NODECYCLE_PYTHON="$NODECYCLE_VENV/bin/python"
export PATH="$NODECYCLE_VENV/bin:$PATH"

# nodecycle_venv_with DIR REQUIREMENTS: creates the venv DIR and installs REQUIREMENTS into it when
# missing or changed (a stamp file in DIR remembers what was installed).
nodecycle_venv_with() {
  local dir="$1" req="$2" stamp="$1/.nodecycle-requirements"
  if [ ! -x "$dir/bin/python" ]; then
    echo "==> creating Python venv at $dir" >&2
    python3 -m venv "$dir"
  fi
  if ! cmp -s "$req" "$stamp"; then
    echo "==> installing $req into $dir" >&2
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
    cp "$req" "$stamp"
  fi
}

# Creates the venv and installs the test requirements (moto server, cfn-lint) when missing or stale.
nodecycle_python_setup() {
  nodecycle_venv_with "$NODECYCLE_VENV" tests/requirements.txt
}
