#!/usr/bin/env bash
# The figures of docs/development.md (section Figures): per function, init time, cold and warm handle time and
# peak RSS of the release binaries under a Lambda Runtime API emulator against the fake cloud
# (x86_64 binaries: this machine's architecture, a proxy for arm64), the memory headroom over
# template.yaml's MemorySize, and the zipped arm64 artefact sizes.
#
#   scripts/figures.sh [--build | --cargo] [--crates] [--runs N] [--warm N]
#
# --build   first builds what it measures, with cargo-lambda as `sam build` does (release
#           profile, `--release` adds codegen-units=1; each function from its own crate
#           directory, template.yaml's CodeUri, so Cargo enables only that function's features of
#           nodecycle-shared): the arm64 zips into
#           $CARGO_TARGET_DIR/lambda-arm64 and the x86_64 binaries into
#           $CARGO_TARGET_DIR/lambda-x86_64, those unstripped (CARGO_PROFILE_RELEASE_STRIP=none;
#           symbols are not loaded, the code is the same) so --crates can name what weighs what.
#           Cold, on 2 cores: about 30 minutes per architecture.
# --cargo   builds what it measures without cargo-lambda: `cargo build --release -p <crate>`
#           per function (one crate at a time, so Cargo enables only that function's features,
#           as `sam build` does from its CodeUri), with codegen-units=1 as `cargo lambda build
#           --release` sets it, for this machine's architecture; the binaries (unstripped) into
#           $CARGO_TARGET_DIR/lambda-x86_64 and their stripped copies zipped as bootstrap.zip into
#           $CARGO_TARGET_DIR/lambda-zip (the sizes then are x86_64 zips, a proxy for arm64).
#           Cold, on 2 shared cores: about 40 minutes.
# --crates  also prints, per x86_64 binary, the crates its named symbols belong to.
# Not part of scripts/test.sh (release builds); it only checks that this script parses.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
nodecycle_python_setup

build=false cargo=false crates=false runs=4 warm=3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=true ;;
    --cargo) cargo=true ;;
    --crates) crates=true ;;
    --runs) runs="$2"; shift ;;
    --warm) warm="$2"; shift ;;
    *) echo "usage: scripts/figures.sh [--build | --cargo] [--crates] [--runs N] [--warm N]" >&2; exit 2 ;;
  esac
  shift
done

arm="$CARGO_TARGET_DIR/lambda-arm64"
x86="$CARGO_TARGET_DIR/lambda-x86_64"
functions=(ami-watcher rotator interruption-handler ops)

if $build; then
  # cargo-lambda and the zig it links with (Python package ziglang, found through `python3`) from
  # the deploy venv docs/getting-started.md makes, when not on PATH already.
  deploy="$HOME/.cache/nodecycle/deploy/bin"
  if ! command -v cargo-lambda >/dev/null && [ -x "$deploy/cargo-lambda" ]; then
    export PATH="$deploy:$PATH"
  fi
  command -v cargo-lambda >/dev/null || {
    echo "cargo-lambda not found: pip install cargo-lambda==1.9.2 (docs/getting-started.md, Prerequisites)" >&2
    exit 1
  }
  for f in "${functions[@]}"; do
    echo "==> functions/$f: cargo lambda build --release --arm64 (zip)" >&2
    (cd "functions/$f" && cargo lambda build --release --arm64 --output-format zip --lambda-dir "$arm" --bin "$f")
    echo "==> functions/$f: cargo lambda build --release --x86-64 (unstripped binary to run here)" >&2
    (cd "functions/$f" && CARGO_PROFILE_RELEASE_STRIP=none cargo lambda build --release --x86-64 --lambda-dir "$x86" --bin "$f")
  done
fi

if $cargo; then
  arm="$CARGO_TARGET_DIR/lambda-zip"
  for f in "${functions[@]}"; do
    echo "==> $f: cargo build --release -p $f (codegen-units=1, unstripped)" >&2
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_STRIP=none cargo build --release --locked -p "$f"
    mkdir -p "$x86/$f" "$arm/$f"
    cp "$CARGO_TARGET_DIR/release/$f" "$x86/$f/bootstrap"
    strip -o "$arm/$f/bootstrap" "$x86/$f/bootstrap"
    rm -f "$arm/$f/bootstrap.zip"
    (cd "$arm/$f" && zip -q -9 bootstrap.zip bootstrap && rm bootstrap)
  done
fi

echo "## Runtime figures (x86_64 release binaries, $(nproc) cores, $(uname -m))"
echo
"$NODECYCLE_PYTHON" scripts/figures.py measure --bin-dir "$x86" --runs "$runs" --warm "$warm"
echo
if $cargo; then echo "## Zipped artefacts (x86_64, cargo build --release per crate)"; else echo "## Zipped arm64 artefacts"; fi
echo
"$NODECYCLE_PYTHON" scripts/figures.py sizes --zip-dir "$arm"
if $crates; then
  for b in ami-watcher rotator interruption-handler ops; do
    echo
    "$NODECYCLE_PYTHON" scripts/figures.py crates "$x86/$b/bootstrap" --top 15
  done
fi
