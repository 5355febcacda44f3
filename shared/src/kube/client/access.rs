//! Where a cluster's API server is and how to trust it: eks:DescribeCluster's endpoint and CA,
//! or the `NODECYCLE_KUBE_*` overrides for local use (read by `crate::wiring`).

use std::net::IpAddr;
use std::path::PathBuf;

use base64::Engine as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::kube::KubeError;

/// Replaces the endpoint from eks:DescribeCluster (local use, API proxies).
pub const ENV_ENDPOINT: &str = "NODECYCLE_KUBE_ENDPOINT";
/// PEM file replacing the CA from eks:DescribeCluster.
pub const ENV_CA_FILE: &str = "NODECYCLE_KUBE_CA_FILE";
/// `true` skips TLS verification; refused unless the endpoint host is loopback.
pub const ENV_INSECURE: &str = "NODECYCLE_KUBE_INSECURE";

/// Overrides of how the API server is reached, for local use. Read from the environment by
/// `crate::wiring` (each `main` parses them with its configuration), passed to the connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeOverrides {
    /// [`ENV_ENDPOINT`].
    pub endpoint: Option<String>,
    /// [`ENV_CA_FILE`].
    pub ca_file: Option<PathBuf>,
    /// [`ENV_INSECURE`].
    pub insecure: bool,
}

impl KubeOverrides {
    /// Reads [`ENV_ENDPOINT`], [`ENV_CA_FILE`] and [`ENV_INSECURE`] through `lookup` (empty =
    /// unset). The error names the variable: `NODECYCLE_KUBE_INSECURE: ...`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, KubeError> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let insecure = match get(ENV_INSECURE)
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("false" | "0" | "no") => false,
            Some("true" | "1" | "yes") => true,
            Some(other) => {
                return Err(KubeError::Config(format!(
                    "{ENV_INSECURE}: {other:?} is not a boolean; use true or false"
                )));
            }
        };
        Ok(KubeOverrides {
            endpoint: get(ENV_ENDPOINT),
            ca_file: get(ENV_CA_FILE).map(PathBuf::from),
            insecure,
        })
    }

    /// Whether eks:DescribeCluster is needed (for the endpoint or the CA).
    pub fn needs_describe(&self) -> bool {
        match &self.endpoint {
            None => true,
            Some(endpoint) => {
                !(self.insecure || self.ca_file.is_some() || endpoint.starts_with("http://"))
            }
        }
    }
}

/// Where and how to reach one cluster's API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterAccess {
    /// EKS cluster name (signed into the token).
    pub cluster: String,
    /// API server URL.
    pub endpoint: http::Uri,
    /// DER certificates to trust (the cluster CA); empty with `insecure` or plain http.
    pub ca: Vec<Vec<u8>>,
    /// Skip TLS verification (loopback endpoints only).
    pub insecure: bool,
}

impl ClusterAccess {
    /// Combines what eks:DescribeCluster returned (`endpoint`, base64 PEM `ca_data`) with the
    /// overrides (`ca_pem` is the content of the override CA file). Refuses: no endpoint, a URL
    /// that is not http(s) with a host, plain http or skipped verification for a host that is
    /// not loopback, https without any CA.
    pub fn resolve(
        cluster: &str,
        described_endpoint: Option<&str>,
        described_ca_data: Option<&str>,
        overrides: &KubeOverrides,
        override_ca_pem: Option<&[u8]>,
    ) -> Result<Self, KubeError> {
        let endpoint = overrides
            .endpoint
            .as_deref()
            .or(described_endpoint)
            .filter(|e| !e.is_empty())
            .ok_or_else(|| {
                KubeError::Config(format!(
                    "cluster {cluster:?} has no API endpoint yet (is it still creating?); or set \
                     {ENV_ENDPOINT}"
                ))
            })?;
        let uri: http::Uri = endpoint.parse().map_err(|e| {
            KubeError::Config(format!("API endpoint {endpoint:?} is not a URL: {e}"))
        })?;
        let host = uri.host().unwrap_or_default().to_owned();
        let scheme = uri.scheme_str().unwrap_or_default().to_owned();
        if host.is_empty() || !matches!(scheme.as_str(), "http" | "https") {
            return Err(KubeError::Config(format!(
                "API endpoint {endpoint:?} must be an http(s) URL with a host, e.g. \
                 https://127.0.0.1:6443"
            )));
        }
        let loopback = is_loopback(&host);
        if overrides.insecure && !loopback {
            return Err(KubeError::Config(format!(
                "{ENV_INSECURE}=true is refused for endpoint host {host:?}: TLS verification may \
                 only be skipped for a loopback host (localhost, 127.0.0.0/8, ::1); set \
                 {ENV_CA_FILE} instead"
            )));
        }
        if scheme == "http" && !loopback {
            return Err(KubeError::Config(format!(
                "plain http to {host:?} would send the EKS token unencrypted; use https (plain http \
                 is accepted for loopback proxies only)"
            )));
        }
        let pem: Option<Vec<u8>> = match (override_ca_pem, described_ca_data) {
            (Some(pem), _) => Some(pem.to_vec()),
            (None, Some(data)) if !data.trim().is_empty() => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .map_err(|e| {
                        KubeError::Config(format!(
                            "certificateAuthority.data of cluster {cluster:?} is not base64: {e}"
                        ))
                    })?,
            ),
            _ => None,
        };
        let ca = match pem {
            Some(pem) => parse_pem_certificates(&pem)?,
            None => Vec::new(),
        };
        if scheme == "https" && ca.is_empty() && !overrides.insecure {
            return Err(KubeError::Config(format!(
                "no certificate authority for {endpoint}: eks:DescribeCluster returned none; set \
                 {ENV_CA_FILE} to a PEM file"
            )));
        }
        Ok(ClusterAccess {
            cluster: cluster.to_owned(),
            endpoint: uri,
            ca,
            insecure: overrides.insecure,
        })
    }
}

/// Whether `host` (as in a URL, IPv6 possibly bracketed) is a loopback name or address.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// DER certificates of a PEM bundle; errors when it holds none.
pub fn parse_pem_certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, KubeError> {
    let certs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(pem)
        .map(|c| c.map(|c| c.as_ref().to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|e| KubeError::Config(format!("CA is not a valid PEM certificate bundle: {e}")))?;
    if certs.is_empty() {
        return Err(KubeError::Config(
            "CA holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    Ok(certs)
}

pub(super) async fn describe_cluster(
    sdk: &aws_config::SdkConfig,
    cluster: &str,
) -> Result<(Option<String>, Option<String>), KubeError> {
    let eks = aws_sdk_eks::Client::new(sdk);
    let out = eks
        .describe_cluster()
        .name(cluster)
        .send()
        .await
        .map_err(|e| {
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception())
            {
                KubeError::ClusterNotFound(cluster.to_owned())
            } else {
                KubeError::Aws(format!(
                    "eks:DescribeCluster {cluster}: {}",
                    crate::port::error_chain(&e)
                ))
            }
        })?;
    let Some(described) = out.cluster else {
        return Err(KubeError::ClusterNotFound(cluster.to_owned()));
    };
    let ca = described.certificate_authority.and_then(|c| c.data);
    Ok((described.endpoint, ca))
}
