//! EKS bearer tokens (`k8s-aws-v1.` + base64url of a presigned STS
//! GetCallerIdentity URL), signed with the real `aws-sigv4` crate.
//!
//! This is an independent implementation for tests of the stand-in itself;
//! code under test makes its own tokens.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use base64::Engine as _;

/// Credentials and time for [`eks_token`].
#[derive(Debug, Clone)]
pub struct TokenParams<'a> {
    /// Cluster name (signed as header `x-k8s-aws-id`).
    pub cluster: &'a str,
    /// STS region (host `sts.<region>.amazonaws.com`).
    pub region: &'a str,
    /// Access key id.
    pub access_key: &'a str,
    /// Secret access key.
    pub secret_key: &'a str,
    /// Session token, if any.
    pub session_token: Option<&'a str>,
    /// Signing time.
    pub time: SystemTime,
}

fn encode_query_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The presigned URL inside a token.
pub fn presigned_url(p: &TokenParams<'_>) -> String {
    let host = format!("sts.{}.amazonaws.com", p.region);
    let base = format!("https://{host}/?Action=GetCallerIdentity&Version=2011-06-15");
    let creds = Credentials::new(
        p.access_key,
        p.secret_key,
        p.session_token.map(str::to_string),
        None,
        "nodecycle-tests",
    );
    let identity = creds.into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(60));
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(p.region)
        .name("sts")
        .time(p.time)
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let headers = [("host", host.as_str()), ("x-k8s-aws-id", p.cluster)];
    let request = SignableRequest::new(
        "GET",
        base.as_str(),
        headers.into_iter(),
        SignableBody::Bytes(&[]),
    )
    .expect("signable request");
    let (instructions, _signature) = sign(request, &params).expect("sign").into_parts();
    let mut url = base.clone();
    for (name, value) in instructions.params() {
        url.push('&');
        url.push_str(name);
        url.push('=');
        url.push_str(&encode_query_value(value));
    }
    url
}

/// A bearer token as `aws eks get-token` makes it.
pub fn eks_token(p: &TokenParams<'_>) -> String {
    let url = presigned_url(p);
    format!(
        "k8s-aws-v1.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url)
    )
}
