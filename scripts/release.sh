#!/usr/bin/env bash
# Builds the release artifacts of nodecycle: what a team needs to deploy it without Rust.
#
#   scripts/release.sh [--zips DIR] [--cli DIR] [--s3-bucket BUCKET --regions R1,R2,...]
#                      [--s3-prefix PREFIX] [--version X.Y.Z] [--out DIR]
#
# Writes $out (default dist/<version>/):
#   <crate>.zip                   the four functions, arm64 (provided.al2023, `bootstrap` inside),
#                                 e.g. ami-watcher.zip;
#   template.release.yaml         template.yaml with each function's CodeUri set to its zip next
#                                 to it (`sam package` / `aws cloudformation package` this one
#                                 into your own bucket: no Rust needed), with LICENSE and README.md
#                                 (the Serverless Application Repository metadata names them);
#   template.packaged.<region>.yaml  `sam package` of template.release.yaml into the bucket of that
#                                 region (CodeUri, LicenseUrl, ReadmeUrl are s3:// URIs there);
#   template.packaged.yaml        the one of the first region of --regions;
#   spoke.yaml                    deploy/spoke.yaml (no code, no transform: deployed as it is);
#   nodecycle-<os>-<arch>         with --cli DIR: the operator CLI (`nodecycle status`, `doctor`,
#                                 `plan`, ...) as built for each platform, copied from DIR;
#   SHA256SUMS                    `sha256sum` of every other file.
#
# --zips DIR takes prebuilt zips instead of building (DIR/<crate>.zip, or cargo-lambda's layout
# DIR/<binary>/bootstrap.zip): CI's release job builds once, the tests package placeholders.
# Without --zips each function is built as template.yaml's Metadata says (`cargo lambda build
# --release --arm64 --output-format zip --bin <Binary>` in functions/<crate>): needs Rust with
# the aarch64-unknown-linux-gnu target and cargo-lambda (with zig); 30-50 min cold on 2 cores.
#
# --cli DIR takes the prebuilt CLI binaries DIR/nodecycle-<os>-<arch> (e.g. nodecycle-linux-x86_64,
# nodecycle-linux-arm64); each must be an executable ELF file, or nothing is written.
#
# --s3-bucket may contain {region} (e.g. nodecycle-releases-{region}): Lambda reads code only
# from a bucket in the function's region, so a release for several regions needs a bucket in
# each. --regions defaults to $AWS_REGION (or $AWS_DEFAULT_REGION). Without --s3-bucket nothing
# is uploaded and no packaged template is written. The upload uses the usual AWS configuration
# (AWS_ENDPOINT_URL too: the tests package into the fake cloud's S3).
#
# The version is the workspace's (Cargo.toml); --version (or a tag in GITHUB_REF_NAME, v0.1.0)
# must equal it and template.yaml's SemanticVersion, or nothing is written.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
source scripts/env.sh
export NODECYCLE_LINT_VENV="${NODECYCLE_LINT_VENV:-$NODECYCLE_VENV-lint}"
export SAM_CLI_TELEMETRY=0 SAM_CLI_DISABLE_UPDATE_CHECK=1

die() { echo "release.sh: $*" >&2; exit 2; }

zips="" cli="" bucket="" prefix="" version="" out="" regions="${AWS_REGION:-${AWS_DEFAULT_REGION:-}}"
while [ $# -gt 0 ]; do
  case "$1" in
    --zips) zips="$2"; shift 2 ;;
    --cli) cli="$2"; shift 2 ;;
    --s3-bucket) bucket="$2"; shift 2 ;;
    --s3-prefix) prefix="$2"; shift 2 ;;
    --regions) regions="$2"; shift 2 ;;
    --version) version="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (--help)" ;;
  esac
done

# The same pinned SAM CLI as the template checks (scripts/cfn/requirements.txt).
nodecycle_venv_with "$NODECYCLE_LINT_VENV" scripts/cfn/requirements.txt
py="$NODECYCLE_LINT_VENV/bin/python"
sam="$NODECYCLE_LINT_VENV/bin/sam"

cargo_version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
[ -n "$cargo_version" ] || die "no version in Cargo.toml [workspace.package]"
if [ -z "$version" ] && [[ "${GITHUB_REF_NAME:-}" == v* ]]; then version="${GITHUB_REF_NAME#v}"; fi
version="${version:-$cargo_version}"
[ "$version" = "$cargo_version" ] || die "version $version is not the workspace's ($cargo_version, Cargo.toml)"

# The functions as template.yaml declares them: crate directory, binary, and the template's
# SemanticVersion. One line per function: "<crate> <binary>".
functions="$("$py" - "$version" <<'EOF'
import sys
sys.path.insert(0, "scripts/cfn")
import cfn
t = cfn.load_yaml("template.yaml")
sar = t.get("Metadata", {}).get("AWS::ServerlessRepo::Application", {})
if str(sar.get("SemanticVersion")) != sys.argv[1]:
    sys.exit(f"template.yaml's SemanticVersion is {sar.get('SemanticVersion')!r}, the version is {sys.argv[1]}")
for name, r in t["Resources"].items():
    if isinstance(r, dict) and r.get("Type") == "AWS::Serverless::Function":
        uri = r["Properties"]["CodeUri"]
        binary = r.get("Metadata", {}).get("BuildProperties", {}).get("Binary")
        if not (isinstance(uri, str) and uri.startswith("functions/") and binary):
            sys.exit(f"{name}: CodeUri functions/<crate> and Metadata.BuildProperties.Binary expected")
        print(uri.removeprefix("functions/"), binary)
EOF
)" || die "template.yaml: see above"
[ "$(wc -l <<<"$functions")" -eq 4 ] || die "expected four functions in template.yaml, found: $functions"

out="${out:-dist/$version}"
rm -rf "$out"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
start=$(date +%s)

# 1. The zips.
while read -r crate binary; do
  if [ -n "$zips" ]; then
    src=""
    for candidate in "$zips/$crate.zip" "$zips/$binary/bootstrap.zip"; do
      if [ -f "$candidate" ]; then src="$candidate"; break; fi
    done
    [ -n "$src" ] || die "--zips $zips: no $crate.zip (nor $binary/bootstrap.zip)"
  else
    echo "==> cargo lambda build --release --arm64 --output-format zip --bin $binary (functions/$crate)" >&2
    (cd "functions/$crate" && cargo lambda build --release --arm64 --output-format zip --bin "$binary")
    src="$CARGO_TARGET_DIR/lambda/$binary/bootstrap.zip"
  fi
  cp "$src" "$out/$crate.zip"
done <<<"$functions"
# Lambda's provided.al2023 runtime starts the file `bootstrap` at the zip's top level.
"$py" - "$out" $(cut -d' ' -f1 <<<"$functions") <<'EOF' || die "a zip is not a Lambda custom runtime package (see above)"
import sys, zipfile
out, crates = sys.argv[1], sys.argv[2:]
bad = []
for c in crates:
    path = f"{out}/{c}.zip"
    try:
        with zipfile.ZipFile(path) as z:
            if "bootstrap" not in z.namelist():
                bad.append(f"{c}.zip has no top-level bootstrap (has {z.namelist()[:5]})")
    except zipfile.BadZipFile as e:
        bad.append(f"{c}.zip: {e}")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF

# 2. The template that names the zips, and what its metadata names.
"$py" - "$out/template.release.yaml" <<'EOF' || die "template.yaml: could not point CodeUri at the zips"
import re, sys
text = open("template.yaml", encoding="utf-8").read()
new, n = re.subn(r"(?m)^(\s+CodeUri:\s*)functions/([a-z0-9-]+)\s*$", r"\1\2.zip", text)
if n != 4:
    sys.exit(f"expected 4 CodeUri: functions/<crate> lines, found {n}")
open(sys.argv[1], "w", encoding="utf-8").write(new)
EOF
cp LICENSE README.md "$out/"
cp deploy/spoke.yaml "$out/spoke.yaml"

# The operator CLI, as built for each platform (the release job builds them; no Rust for users).
if [ -n "$cli" ]; then
  found=0
  for bin in "$cli"/nodecycle-*; do
    [ -f "$bin" ] || continue
    name=$(basename "$bin")
    [[ "$name" =~ ^nodecycle-[a-z]+-[a-z0-9_]+$ ]] || die "--cli $cli: $name is not nodecycle-<os>-<arch>"
    [ "$(head -c 4 "$bin" | od -An -c | tr -d ' \n')" = "177ELF" ] || die "--cli $cli: $name is not an ELF executable"
    install -m 0755 "$bin" "$out/$name"
    found=$((found + 1))
  done
  [ "$found" -gt 0 ] || die "--cli $cli: no nodecycle-<os>-<arch> binary"
fi

# 3. One packaged template per region.
if [ -n "$bucket" ]; then
  [ -n "$regions" ] || die "--s3-bucket needs --regions (or AWS_REGION)"
  prefix="${prefix:-nodecycle/$version}"
  first=""
  IFS=',' read -r -a region_list <<<"$regions"
  for region in "${region_list[@]}"; do
    region_bucket="${bucket//\{region\}/$region}"
    echo "==> sam package into s3://$region_bucket/$prefix ($region)" >&2
    (cd "$out" && "$sam" package --language-extensions --region "$region" \
      --template-file template.release.yaml --s3-bucket "$region_bucket" --s3-prefix "$prefix" \
      --output-template-file "template.packaged.$region.yaml" >&2)
    first="${first:-$region}"
  done
  cp "$out/template.packaged.$first.yaml" "$out/template.packaged.yaml"
fi

# 4. Checksums of everything else.
(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)

echo "==> $out ($(($(date +%s) - start)) s)" >&2
(cd "$out" && ls -l | sed 1d >&2)
