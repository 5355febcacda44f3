//! EKS bearer tokens, as `aws eks get-token` / aws-iam-authenticator make them:
//! `k8s-aws-v1.` + base64url (no padding) of a SigV4 query-presigned
//! `GET https://sts.<region>.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15`
//! with the header `x-k8s-aws-id: <cluster>` among the signed headers. The API server's
//! authenticator replays the URL to STS; it accepts it for 15 minutes after `X-Amz-Date`.

use super::node_ops::KubeError;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use base64::Engine as _;
use std::fmt;
use std::time::{Duration, SystemTime};

/// Prefix of every EKS token.
pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// Signed header naming the cluster the token is for.
pub const CLUSTER_ID_HEADER: &str = "x-k8s-aws-id";
/// `X-Amz-Expires` of the presigned URL. STS ignores it (tokens live 15 minutes); 60 is what
/// aws-iam-authenticator sends and old authenticators insist on.
pub const PRESIGN_EXPIRES: Duration = Duration::from_secs(60);
/// How long the API server accepts a token after it was signed.
pub const TOKEN_VALIDITY: Duration = Duration::from_secs(15 * 60);
/// Age after which a cached token is replaced (well before the 14-minute mark, so a request
/// started with it still arrives in time).
pub const REFRESH_AFTER: Duration = Duration::from_secs(13 * 60);

/// A bearer token and when it was signed. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq)]
pub struct EksToken {
    value: String,
    issued_at: SystemTime,
}

impl EksToken {
    /// The bearer token (`k8s-aws-v1.…`). Never log it.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// When it was signed.
    pub fn issued_at(&self) -> SystemTime {
        self.issued_at
    }

    /// Whether it is younger than [`REFRESH_AFTER`] at `now` (a clock going backwards counts as
    /// stale too).
    pub fn is_fresh(&self, now: SystemTime) -> bool {
        now.duration_since(self.issued_at)
            .is_ok_and(|age| age < REFRESH_AFTER)
    }
}

impl fmt::Debug for EksToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EksToken")
            .field("value", &"<redacted>")
            .field("issued_at", &self.issued_at)
            .finish()
    }
}

/// The regional STS host for `region` (`sts.<region>.amazonaws.com`, `.com.cn` in China).
pub fn sts_host(region: &str) -> String {
    if region.starts_with("cn-") {
        format!("sts.{region}.amazonaws.com.cn")
    } else {
        format!("sts.{region}.amazonaws.com")
    }
}

/// The presigned STS GetCallerIdentity URL for `cluster`, signed at `time` for `region` (the
/// STS host is the regional one of the same region) with `credentials` (the session token is
/// included and signed when present).
pub fn presigned_url(
    credentials: &Credentials,
    region: &str,
    cluster: &str,
    time: SystemTime,
) -> Result<String, KubeError> {
    if cluster.is_empty() || cluster.chars().any(|c| c.is_control()) {
        return Err(KubeError::Config(format!(
            "invalid EKS cluster name {cluster:?}"
        )));
    }
    let base = format!("https://{}/", sts_host(region));
    presign_caller_identity(
        credentials,
        region,
        &base,
        (CLUSTER_ID_HEADER, cluster),
        time,
    )
    .map_err(|e| match e {
        PresignError::Region(m) => KubeError::Config(format!(
            "{m} for the EKS token; set AWS_REGION (e.g. us-east-1)"
        )),
        PresignError::Signing(m) => KubeError::Aws(format!("signing the EKS token: {m}")),
    })
}

/// Why [`presign_caller_identity`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PresignError {
    /// The region is not one (empty, or not lowercase letters, digits and `-`).
    #[error("{0}")]
    Region(String),
    /// The signer refused the request (bad URL or header).
    #[error("{0}")]
    Signing(String),
}

/// `GET <base>?Action=GetCallerIdentity&Version=2011-06-15`, SigV4 query-presigned at `time`
/// for `region` with `credentials` and with `header` (name, value) among the signed headers:
/// whoever holds the URL can ask STS who signed it, and STS answers only when the request
/// carries the same header value. `base` is the STS endpoint with its trailing `/`
/// (`https://sts.<region>.amazonaws.com/`, or the configured endpoint).
pub fn presign_caller_identity(
    credentials: &Credentials,
    region: &str,
    base: &str,
    header: (&str, &str),
    time: SystemTime,
) -> Result<String, PresignError> {
    if region.is_empty()
        || !region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(PresignError::Region(format!(
            "invalid AWS region {region:?}"
        )));
    }
    let url = format!("{base}?Action=GetCallerIdentity&Version=2011-06-15");
    let signing_error = |e: &dyn fmt::Display| PresignError::Signing(e.to_string());

    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(PRESIGN_EXPIRES);
    let identity = Identity::from(credentials.clone());
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| signing_error(&e))?
        .into();
    let signable = SignableRequest::new(
        "GET",
        url.as_str(),
        std::iter::once(header),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| signing_error(&e))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| signing_error(&e))?
        .into_parts();
    let mut request = http::Request::get(url.as_str())
        .header(header.0, header.1)
        .body(())
        .map_err(|e| signing_error(&e))?;
    instructions.apply_to_request_http1x(&mut request);
    Ok(request.uri().to_string())
}

/// The bearer token for `cluster`: [`TOKEN_PREFIX`] + base64url without padding of
/// [`presigned_url`].
pub fn token(
    credentials: &Credentials,
    region: &str,
    cluster: &str,
    time: SystemTime,
) -> Result<EksToken, KubeError> {
    let url = presigned_url(credentials, region, cluster, time)?;
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url.as_bytes());
    Ok(EksToken {
        value: format!("{TOKEN_PREFIX}{encoded}"),
        issued_at: time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed_time() -> SystemTime {
        // 2024-01-02T03:04:05Z
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_164_645)
    }

    fn credentials(session: Option<&str>) -> Credentials {
        Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            session.map(str::to_owned),
            None,
            "test",
        )
    }

    // Golden URL computed independently of aws-sigv4: canonical request = GET, /, the sorted
    // query (session token included), headers host + x-k8s-aws-id, sha256(""); signed with
    // HMAC-SHA256 over the AWS4 key chain (Python hmac/hashlib).
    const GOLDEN_URL: &str = "https://sts.us-west-2.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20240102%2Fus-west-2%2Fsts%2Faws4_request&X-Amz-Date=20240102T030405Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id&X-Amz-Signature=6486d4aa8e6ae8265427ce376d2f85514630c87d7d4cd37cde0cd9a5ad60476a&X-Amz-Security-Token=FwoGZXIvYXdzE%2Bsession%2Ftoken%3D%3D";

    #[test]
    fn presigned_url_matches_golden() {
        let url = presigned_url(
            &credentials(Some("FwoGZXIvYXdzE+session/token==")),
            "us-west-2",
            "prod",
            fixed_time(),
        )
        .unwrap();
        assert_eq!(url, GOLDEN_URL);
    }

    #[test]
    fn token_is_prefixed_base64url_of_the_url() {
        let creds = credentials(Some("FwoGZXIvYXdzE+session/token=="));
        let t = token(&creds, "us-west-2", "prod", fixed_time()).unwrap();
        let encoded = t.expose().strip_prefix(TOKEN_PREFIX).unwrap();
        assert!(!encoded.contains('=') && !encoded.contains('+') && !encoded.contains('/'));
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded)
            .unwrap();
        assert_eq!(String::from_utf8(decoded).unwrap(), GOLDEN_URL);
        assert!(
            !format!("{t:?}").contains(TOKEN_PREFIX),
            "Debug must not show the token"
        );
    }

    #[test]
    fn without_session_token_no_security_token_param() {
        let url =
            presigned_url(&credentials(None), "eu-central-1", "staging", fixed_time()).unwrap();
        assert!(url.starts_with(
            "https://sts.eu-central-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&"
        ));
        assert!(url.contains("X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"));
        assert!(url.contains("X-Amz-Expires=60"));
        assert!(!url.contains("X-Amz-Security-Token"));
    }

    #[test]
    fn regional_hosts_and_bad_input() {
        assert_eq!(sts_host("cn-north-1"), "sts.cn-north-1.amazonaws.com.cn");
        assert_eq!(sts_host("us-east-1"), "sts.us-east-1.amazonaws.com");
        assert!(presigned_url(&credentials(None), "", "prod", fixed_time()).is_err());
        assert!(presigned_url(&credentials(None), "us east", "prod", fixed_time()).is_err());
        assert!(presigned_url(&credentials(None), "us-east-1", "", fixed_time()).is_err());
    }

    #[test]
    fn freshness() {
        let t = token(&credentials(None), "us-east-1", "prod", fixed_time()).unwrap();
        assert!(t.is_fresh(fixed_time()));
        assert!(t.is_fresh(fixed_time() + Duration::from_secs(12 * 60)));
        assert!(!t.is_fresh(fixed_time() + REFRESH_AFTER));
        assert!(!t.is_fresh(fixed_time() + Duration::from_secs(14 * 60)));
        assert!(!t.is_fresh(fixed_time() - Duration::from_secs(1)));
    }
}
