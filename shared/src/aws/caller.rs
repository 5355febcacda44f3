//! Who invoked the ops function, proven rather than claimed. Lambda does not tell a function
//! which IAM principal invoked it, so the `nodecycle` CLI sends a **caller proof** in the
//! request (field [`PROOF_FIELD`]): a SigV4 query-presigned STS `GetCallerIdentity` request,
//! signed with the operator's own credentials and bound to the function by the signed header
//! [`FUNCTION_HEADER`]`: <function name>`. The function checks its shape ([`check`]), replays
//! it to its own STS endpoint with its own name in that header ([`StsCallers::verify`]), and
//! records the ARN STS answers as the audit's caller. This is how aws-iam-authenticator (EKS
//! tokens) and Vault's AWS auth learn an AWS identity without holding any secret of it.
//!
//! What a proof gives away: only the right to ask STS who signed it, for 15 minutes, with this
//! function's name in the header. It never appears in logs or audit records.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use serde::Serialize;

use crate::kube::token::{presign_caller_identity, sts_host};

/// The request field that carries the proof; taken out of the request before the handler sees it.
pub const PROOF_FIELD: &str = "callerProof";
/// Prefix of every proof (the version of its format).
pub const PROOF_PREFIX: &str = "nodecycle-caller-v1.";
/// Signed header naming the function the proof is for.
pub const FUNCTION_HEADER: &str = "x-nodecycle-function";
/// Longest proof accepted (a presigned URL with a long session token is about 3 KB).
pub const MAX_PROOF: usize = 8192;
/// How long after signing a proof is accepted (STS's own limit for presigned requests).
pub const MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// How far in the future a proof may be signed (clock skew between the CLI and Lambda).
pub const MAX_SKEW: Duration = Duration::from_secs(5 * 60);

/// The query parameters a proof may carry: exactly those of a presigned GetCallerIdentity.
const ALLOWED: [&str; 9] = [
    "Action",
    "Version",
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
    "X-Amz-Security-Token",
];

/// The IAM identity STS reported for a proof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Caller {
    /// `arn:aws:iam::<account>:user/<name>` or `arn:aws:sts::<account>:assumed-role/<role>/<session>`.
    pub arn: String,
    /// The principal's account.
    pub account: String,
    /// STS's `UserId` (`AIDA...`, or `AROA...:<session>`).
    pub user_id: String,
}

/// The STS endpoint of `config` with a trailing `/`: the configured endpoint
/// (`AWS_ENDPOINT_URL`) when there is one, else the regional host of its region; `None` without
/// a region. The CLI signs for it and the function replays to its own: the two match when both
/// use the same region's STS.
pub fn sts_base(config: &aws_config::SdkConfig) -> Option<String> {
    if let Some(url) = config.endpoint_url() {
        return Some(format!("{}/", url.trim_end_matches('/')));
    }
    let region = config.region()?;
    Some(format!("https://{}/", sts_host(region.as_ref())))
}

/// A proof for `function` (its name, as the stack's `OpsFunctionName` output gives it), signed
/// now with the credentials of `config` for the STS endpoint of [`sts_base`]. The error says
/// what to set.
pub async fn proof(config: &aws_config::SdkConfig, function: &str) -> Result<String, String> {
    use aws_credential_types::provider::ProvideCredentials as _;
    let region = config
        .region()
        .ok_or("no AWS region: pass --region, or set one in the context or AWS_REGION")?;
    let base = sts_base(config).ok_or("no STS endpoint for the region")?;
    let provider = config.credentials_provider().ok_or(
        "no AWS credentials provider: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    )?;
    let credentials = provider.provide_credentials().await.map_err(|e| {
        let chain = crate::port::error_chain(&e);
        match crate::port::credentials_hint(&chain) {
            Some(hint) => format!("{hint} ({chain})"),
            None => chain,
        }
    })?;
    let url = presign_caller_identity(
        &credentials,
        region.as_ref(),
        &base,
        (FUNCTION_HEADER, function),
        SystemTime::now(),
    )
    .map_err(|e| format!("signing the caller proof: {e}"))?;
    Ok(format!(
        "{PROOF_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url.as_bytes())
    ))
}

/// The presigned URL inside `proof` when it is one this function may replay: the prefix, at
/// most [`MAX_PROOF`] bytes of unpadded base64url, a URL on `base` (this function's STS
/// endpoint, so a proof cannot send the function elsewhere) whose query is a GetCallerIdentity
/// with only the allowed parameters, each once, [`FUNCTION_HEADER`] signed, signed at most
/// [`MAX_AGE`] before `now` and at most [`MAX_SKEW`] after. The error says which rule failed.
pub fn check(proof: &str, base: &str, now: SystemTime) -> Result<String, String> {
    if proof.len() > MAX_PROOF {
        return Err(format!(
            "the caller proof is {} bytes, more than {MAX_PROOF}",
            proof.len()
        ));
    }
    let encoded = proof
        .strip_prefix(PROOF_PREFIX)
        .ok_or_else(|| format!("the caller proof does not start with {PROOF_PREFIX}"))?;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or("the caller proof is not unpadded base64url of a URL")?;
    let query = url
        .strip_prefix(base)
        .and_then(|rest| rest.strip_prefix('?'))
        .ok_or_else(|| {
            format!("the caller proof is not a request to this function's STS endpoint {base}")
        })?;
    let mut seen: Vec<(String, String)> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if !ALLOWED.contains(&k.as_ref()) {
            return Err(format!(
                "the caller proof has the query parameter {k:?}, which a presigned GetCallerIdentity does not"
            ));
        }
        if seen.iter().any(|(seen, _)| *seen == k) {
            return Err(format!(
                "the caller proof has the query parameter {k:?} twice"
            ));
        }
        seen.push((k.into_owned(), v.into_owned()));
    }
    let get = |name: &str| {
        seen.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if get("Action") != Some("GetCallerIdentity") || get("Version") != Some("2011-06-15") {
        return Err(
            "the caller proof is not a GetCallerIdentity request (Version 2011-06-15)".into(),
        );
    }
    if get("X-Amz-Algorithm") != Some("AWS4-HMAC-SHA256") || get("X-Amz-Signature").is_none() {
        return Err("the caller proof is not SigV4-signed".into());
    }
    let signed = get("X-Amz-SignedHeaders").unwrap_or_default();
    if !signed.split(';').any(|h| h == FUNCTION_HEADER) {
        return Err(format!(
            "the caller proof does not sign the header {FUNCTION_HEADER}"
        ));
    }
    let date = get("X-Amz-Date").unwrap_or_default();
    let signed_at = chrono::NaiveDateTime::parse_from_str(date, "%Y%m%dT%H%M%SZ")
        .map_err(|_| format!("the caller proof's X-Amz-Date {date:?} is not a SigV4 time"))?
        .and_utc();
    let now = chrono::DateTime::<chrono::Utc>::from(now);
    let age = now.signed_duration_since(signed_at);
    if age > chrono::Duration::from_std(MAX_AGE).unwrap_or_default() {
        return Err(format!(
            "the caller proof was signed at {signed_at}, more than 15 minutes ago: sign a new one (run the command again)"
        ));
    }
    if -age > chrono::Duration::from_std(MAX_SKEW).unwrap_or_default() {
        return Err(format!(
            "the caller proof is signed at {signed_at}, in the future: check the clock of the machine that signed it"
        ));
    }
    Ok(url)
}

type Https = hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;

/// Verifies proofs for one function against its STS endpoint.
#[derive(Clone)]
pub struct StsCallers {
    base: String,
    function: String,
    client: hyper_util::client::legacy::Client<Https, http_body_util::Empty<bytes::Bytes>>,
}

impl std::fmt::Debug for StsCallers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StsCallers")
            .field("base", &self.base)
            .field("function", &self.function)
            .finish()
    }
}

impl StsCallers {
    /// For `function` (this function's name, `AWS_LAMBDA_FUNCTION_NAME`) and the STS endpoint
    /// of `config`. The error says what is missing (a region, the system's root certificates).
    pub fn new(config: &aws_config::SdkConfig, function: &str) -> Result<Self, String> {
        let base = sts_base(config).ok_or("no AWS region for the STS endpoint")?;
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider)
            .map_err(|e| format!("no TLS root certificates for STS: {e}"))?
            .https_or_http()
            .enable_http1()
            .build();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(https);
        Ok(StsCallers {
            base,
            function: function.to_string(),
            client,
        })
    }

    /// The IAM identity that signed `proof`: [`check`] at `now`, then the request replayed to
    /// STS with this function's name in [`FUNCTION_HEADER`] (STS refuses it when the proof was
    /// signed for another function, with other credentials, or has expired). The error says
    /// why the caller is not known.
    pub async fn verify(&self, proof: &str, now: SystemTime) -> Result<Caller, String> {
        use http_body_util::BodyExt as _;
        let url = check(proof, &self.base, now)?;
        let request = http::Request::get(url.as_str())
            .header(FUNCTION_HEADER, self.function.as_str())
            .header(http::header::ACCEPT, "application/json")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| format!("the caller proof is not a request: {e}"))?;
        let response = tokio::time::timeout(Duration::from_secs(10), self.client.request(request))
            .await
            .map_err(|_| "STS did not answer the caller proof within 10 s".to_string())?
            .map_err(|e| {
                format!(
                    "cannot reach STS to verify the caller: {}",
                    crate::port::error_chain(&e)
                )
            })?;
        let status = response.status();
        let body = tokio::time::timeout(
            Duration::from_secs(10),
            http_body_util::Limited::new(response.into_body(), 64 * 1024).collect(),
        )
        .await
        .map_err(|_| "STS did not finish its answer within 10 s".to_string())?
        .map_err(|e| format!("reading STS's answer: {e}"))?
        .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "STS refused the caller proof (HTTP {}): {}",
                status.as_u16(),
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("STS's answer is not JSON: {e}"))?;
        let r = &v["GetCallerIdentityResponse"]["GetCallerIdentityResult"];
        let field = |k: &str| r[k].as_str().map(str::to_string);
        match (field("Arn"), field("Account"), field("UserId")) {
            (Some(arn), Some(account), Some(user_id)) => Ok(Caller {
                arn,
                account,
                user_id,
            }),
            _ => Err("STS's answer names no Arn, Account and UserId".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_credential_types::Credentials;

    const BASE: &str = "https://sts.eu-west-1.amazonaws.com/";

    fn at(secs: u64) -> SystemTime {
        // 2026-12-05T00:00:00Z plus `secs`.
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_428_800 + secs)
    }

    fn signed(base: &str, function: &str, time: SystemTime) -> String {
        let creds = Credentials::new("AKIDEXAMPLE", "secret", Some("token+/=".into()), None, "t");
        let url =
            presign_caller_identity(&creds, "eu-west-1", base, (FUNCTION_HEADER, function), time)
                .unwrap_or_else(|e| panic!("{e}"));
        format!(
            "{PROOF_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url)
        )
    }

    fn wrap(url: &str) -> String {
        format!(
            "{PROOF_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url)
        )
    }

    #[test]
    fn a_fresh_proof_for_this_endpoint_is_replayable() {
        let proof = signed(BASE, "nodecycle-ops", at(0));
        let url = check(&proof, BASE, at(60)).unwrap_or_else(|e| panic!("{e}"));
        assert!(url.starts_with(BASE), "{url}");
        assert!(
            url.contains("X-Amz-SignedHeaders=host%3Bx-nodecycle-function"),
            "{url}"
        );
        assert!(url.contains("X-Amz-Security-Token="), "{url}");
    }

    #[test]
    fn proofs_that_must_not_be_replayed_are_refused_with_the_rule() {
        let good = signed(BASE, "f", at(0));
        let url = check(&good, BASE, at(0)).unwrap_or_else(|e| panic!("{e}"));
        let cases: Vec<(String, SystemTime, &str)> = vec![
            (
                signed(BASE, "f", at(0)),
                at(16 * 60),
                "more than 15 minutes ago",
            ),
            (signed(BASE, "f", at(10 * 60)), at(0), "in the future"),
            (
                signed("https://evil.example/", "f", at(0)),
                at(0),
                "STS endpoint",
            ),
            (
                good.replacen(PROOF_PREFIX, "k8s-aws-v1.", 1),
                at(0),
                "does not start with",
            ),
            (format!("{PROOF_PREFIX}!!"), at(0), "base64url"),
            (
                wrap(&url.replace("GetCallerIdentity", "AssumeRole")),
                at(0),
                "not a GetCallerIdentity",
            ),
            (wrap(&format!("{url}&Foo=1")), at(0), "\"Foo\""),
            (
                wrap(&format!("{url}&Action=GetCallerIdentity")),
                at(0),
                "twice",
            ),
            (
                wrap(&url.replace("host%3Bx-nodecycle-function", "host")),
                at(0),
                "does not sign",
            ),
            (
                format!("{PROOF_PREFIX}{}", "A".repeat(MAX_PROOF)),
                at(0),
                "more than",
            ),
        ];
        for (proof, now, want) in cases {
            match check(&proof, BASE, now) {
                Ok(u) => panic!("accepted {u}, want {want}"),
                Err(e) => assert!(e.contains(want), "{e:?} does not say {want:?}"),
            }
        }
    }
}
