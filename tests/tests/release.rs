//! The release artifacts (scripts/release.sh) as the release workflow makes them, from
//! placeholder zips (the real arm64 build takes 30-50 minutes), packaged into the fake cloud's S3:
//! the packaged template passes cfn-lint as CloudFormation sees it (as written, and translated
//! through AWS::LanguageExtensions and AWS::Serverless for the parameter sets of
//! scripts/cfn/cfn.py), every S3 location it names is an object of its region's bucket whose
//! content is the released file of SHA256SUMS, and the script refuses zips Lambda could not run.
//!
//! Needs the template tools' venv (`scripts/lint-template.sh` installs it; scripts/test.sh runs it
//! first): `$NODECYCLE_LINT_VENV`, default `${NODECYCLE_VENV:-~/.cache/nodecycle/venv}-lint`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use nodecycle_tests::FakeCloud;
use serde_json::Value;

const CRATES: [&str; 4] = ["ami-watcher", "rotator", "interruption-handler", "ops"];
/// Two regions: Lambda reads code only from a bucket of its own region.
const REGIONS: [&str; 2] = ["us-east-2", "eu-west-1"];

/// The platforms the release attaches the operator CLI for.
const CLI_PLATFORMS: [&str; 2] = ["linux-x86_64", "linux-arm64"];

/// A fresh directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nodecycle-release-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs Python of the lint venv (boto3, zipfile, the template loader) against the cloud.
fn python(cloud: &FakeCloud, script: &str, args: &[&str]) -> String {
    let out = Command::new(support::lint_venv().join("bin/python"))
        .arg("-c")
        .arg(script)
        .args(args)
        .envs(cloud.env_vars())
        .current_dir(nodecycle_tests::repo_path(""))
        .output()
        .unwrap();
    assert!(out.status.success(), "python: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Placeholder zips as cargo lambda names them (`bootstrap` at the top), or `entry` instead.
fn placeholder_zips(cloud: &FakeCloud, dir: &Path, entry: &str) {
    const ZIPS: &str = r##"
import sys, zipfile
d, entry = sys.argv[1], sys.argv[2]
for c in sys.argv[3:]:
    with zipfile.ZipFile(f"{d}/{c}.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(entry, f"#!/bin/sh\necho placeholder {c}\n")
"##;
    let mut args = vec![dir.to_str().unwrap(), entry];
    args.extend(CRATES);
    python(cloud, ZIPS, &args);
}

fn release(cloud: &FakeCloud, args: &[&str]) -> Output {
    Command::new(nodecycle_tests::repo_path("scripts/release.sh"))
        .args(args)
        .envs(cloud.env_vars())
        .env("NODECYCLE_LINT_VENV", support::lint_venv())
        .output()
        .unwrap()
}

/// Every S3 location of a packaged template, with the sha256 of the object there (null when
/// there is none), and each function's zip by logical id (from template.release.yaml).
const LOCATIONS: &str = r#"
import hashlib, json, sys
sys.path.insert(0, "scripts/cfn")
import boto3, cfn
packaged, release = cfn.load_yaml(sys.argv[1]), cfn.load_yaml(sys.argv[2])
s3 = boto3.client("s3")
found = []
def walk(v, at):
    if isinstance(v, dict):
        if "S3Bucket" in v and "S3Key" in v:
            found.append((at, v["S3Bucket"], v["S3Key"]))
        for k, x in v.items():
            walk(x, f"{at}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            walk(x, f"{at}[{i}]")
    elif isinstance(v, str) and v.startswith("s3://"):
        bucket, _, key = v[5:].partition("/")
        found.append((at, bucket, key))
walk(packaged, "")
objects = []
for at, bucket, key in found:
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        digest = hashlib.sha256(body).hexdigest()
    except s3.exceptions.NoSuchKey:
        digest = None
    objects.append({"at": at, "bucket": bucket, "key": key, "sha256": digest})
zips = {n: r["Properties"]["CodeUri"] for n, r in release["Resources"].items()
        if isinstance(r, dict) and r.get("Type") == "AWS::Serverless::Function"}
print(json.dumps({"objects": objects, "zips": zips}))
"#;

/// SHA256SUMS as file -> digest, each line checked against the file it names.
fn checked_sums(dist: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let out = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(dist)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "SHA256SUMS does not match the files: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    text.lines()
        .map(|l| {
            let (digest, file) = l.split_once("  ").unwrap();
            (file.to_string(), digest.to_string())
        })
        .collect()
}

fn cfn_lint(files: &[PathBuf]) {
    let out = Command::new(support::lint_venv().join("bin/cfn-lint"))
        .args(files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cfn-lint {files:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
}

#[test]
fn release_artifacts_deploy_as_cloudformation_sees_them() {
    let cloud = FakeCloud::start();
    let zips = scratch("zips");
    let dist = scratch("dist");
    placeholder_zips(&cloud, &zips, "bootstrap");
    // The operator CLI per platform: any small ELF executable stands for it.
    let cli = scratch("cli");
    for platform in CLI_PLATFORMS {
        std::fs::copy("/bin/true", cli.join(format!("nodecycle-{platform}"))).unwrap();
    }
    python(
        &cloud,
        r#"
import sys, boto3
for r in sys.argv[1:]:
    boto3.client("s3", region_name=r).create_bucket(
        Bucket=f"nodecycle-releases-{r}", CreateBucketConfiguration={"LocationConstraint": r})
"#,
        &REGIONS,
    );

    let started = Instant::now();
    let regions = REGIONS.join(",");
    let out = release(
        &cloud,
        &[
            "--zips",
            zips.to_str().unwrap(),
            "--cli",
            cli.to_str().unwrap(),
            "--s3-bucket",
            "nodecycle-releases-{region}",
            "--regions",
            &regions,
            "--out",
            dist.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "release.sh: {}", stderr(&out));
    eprintln!(
        "release.sh packaged {} regions in {:?}",
        REGIONS.len(),
        started.elapsed()
    );

    let sums = checked_sums(&dist);
    for platform in CLI_PLATFORMS {
        let name = format!("nodecycle-{platform}");
        assert!(
            sums.contains_key(&name),
            "SHA256SUMS lacks {name}: {sums:?}"
        );
        let mode = std::fs::metadata(dist.join(&name)).unwrap().permissions();
        assert!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o111 != 0,
            "{name} is executable"
        );
    }
    for file in CRATES.iter().map(|c| format!("{c}.zip")).chain(
        [
            "template.packaged.yaml",
            "spoke.yaml",
            "template.release.yaml",
        ]
        .map(String::from),
    ) {
        assert!(
            sums.contains_key(&file),
            "SHA256SUMS lacks {file}: {sums:?}"
        );
    }

    // The template of each region names only objects of that region's bucket, each the released
    // file: the functions' zips (one each, all four), LICENSE and README.md (the SAR metadata).
    let release_template = dist.join("template.release.yaml");
    for region in REGIONS {
        let packaged = dist.join(format!("template.packaged.{region}.yaml"));
        let found: Value = serde_json::from_str(&python(
            &cloud,
            LOCATIONS,
            &[
                packaged.to_str().unwrap(),
                release_template.to_str().unwrap(),
            ],
        ))
        .unwrap();
        let objects = found["objects"].as_array().unwrap();
        let mut functions = BTreeMap::new();
        for o in objects {
            let at = o["at"].as_str().unwrap();
            assert_eq!(o["bucket"], format!("nodecycle-releases-{region}"), "{o}");
            let digest = o["sha256"]
                .as_str()
                .unwrap_or_else(|| panic!("{region}: {at} names no object: {o}"));
            let released = if let Some(name) = at
                .strip_prefix(".Resources.")
                .and_then(|r| r.strip_suffix(".Properties.CodeUri"))
            {
                let zip = found["zips"][name].as_str().unwrap().to_string();
                functions.insert(name.to_string(), zip.clone());
                zip
            } else if at.ends_with(".LicenseUrl") {
                "LICENSE".to_string()
            } else if at.ends_with(".ReadmeUrl") {
                "README.md".to_string()
            } else {
                panic!("{region}: unexpected S3 location {at}: {o}")
            };
            assert_eq!(
                Some(&digest.to_string()),
                sums.get(&released),
                "{region}: {at} is not the released {released}"
            );
        }
        let mut zips: Vec<&String> = functions.values().collect();
        zips.sort();
        let mut expected: Vec<String> = CRATES.iter().map(|c| format!("{c}.zip")).collect();
        expected.sort();
        assert_eq!(
            zips,
            expected.iter().collect::<Vec<_>>(),
            "{region}: {functions:?}"
        );
    }
    assert_eq!(
        std::fs::read(dist.join("template.packaged.yaml")).unwrap(),
        std::fs::read(dist.join(format!("template.packaged.{}.yaml", REGIONS[0]))).unwrap(),
        "template.packaged.yaml is the first region's"
    );

    // As CloudFormation sees it: as written, then both transforms applied for each parameter set.
    let packaged = dist.join("template.packaged.yaml");
    let mut lint = vec![packaged.clone(), dist.join("spoke.yaml")];
    for set in ["minimal", "full"] {
        let translated = dist.join(format!("translated-{set}.json"));
        let out = Command::new(support::lint_venv().join("bin/python"))
            .arg(nodecycle_tests::repo_path("scripts/cfn/translate.py"))
            .args(["--set", set, "--out"])
            .arg(&translated)
            .arg(&packaged)
            .output()
            .unwrap();
        assert!(out.status.success(), "translate ({set}): {}", stderr(&out));
        lint.push(translated);
    }
    cfn_lint(&lint);
    let _ = std::fs::remove_dir_all(&zips);
    let _ = std::fs::remove_dir_all(&cli);
    let _ = std::fs::remove_dir_all(&dist);
}

#[test]
fn release_refuses_what_lambda_could_not_run() {
    let cloud = FakeCloud::start();
    let dist = scratch("refused");
    let dist_arg = dist.to_str().unwrap();

    // A zip without `bootstrap` at its top level (the provided.al2023 runtime starts that file).
    let nested = scratch("nested");
    placeholder_zips(&cloud, &nested, "target/bootstrap");
    let out = release(
        &cloud,
        &["--zips", nested.to_str().unwrap(), "--out", dist_arg],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ami-watcher.zip has no top-level bootstrap"),
        "{}",
        stderr(&out)
    );

    // A function's zip missing.
    std::fs::remove_file(nested.join("rotator.zip")).unwrap();
    let out = release(
        &cloud,
        &["--zips", nested.to_str().unwrap(), "--out", dist_arg],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no rotator.zip"), "{}", stderr(&out));

    // A CLI "binary" that is no executable (a text file named like one).
    let good = scratch("good-zips");
    placeholder_zips(&cloud, &good, "bootstrap");
    let cli = scratch("bad-cli");
    std::fs::write(cli.join("nodecycle-linux-x86_64"), "#!/bin/sh\n").unwrap();
    let out = release(
        &cloud,
        &[
            "--zips",
            good.to_str().unwrap(),
            "--cli",
            cli.to_str().unwrap(),
            "--out",
            dist_arg,
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not an ELF executable"),
        "{}",
        stderr(&out)
    );

    // A version that is not the workspace's (a tag pushed on the wrong commit).
    let out = release(&cloud, &["--version", "99.0.0", "--out", dist_arg]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not the workspace's"),
        "{}",
        stderr(&out)
    );
    assert!(
        !dist.join("SHA256SUMS").exists(),
        "nothing is written when refused"
    );
    let _ = std::fs::remove_dir_all(&nested);
    let _ = std::fs::remove_dir_all(&dist);
}
