//! A tiny blocking HTTPS client for talking to the Kubernetes stand-in in
//! tests (rustls, trusting only the stand-in's CA; `Connection: close`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

/// A response from the stand-in.
#[derive(Debug, Clone)]
pub struct KubeResponse {
    /// HTTP status.
    pub status: u16,
    /// The JSON body (`Value::Null` if the body was not JSON).
    pub body: Value,
    /// The raw body.
    pub raw: String,
}

/// A client for one stand-in endpoint with one (or no) bearer token.
#[derive(Clone)]
pub struct KubeClient {
    authority: String,
    config: Arc<rustls::ClientConfig>,
    token: Option<String>,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient")
            .field("authority", &self.authority)
            .field("has_token", &self.token.is_some())
            .finish()
    }
}

impl KubeClient {
    /// `endpoint` is `https://127.0.0.1:PORT`; `ca_pem` the CA bundle.
    pub fn new(endpoint: &str, ca_pem: &[u8], token: Option<String>) -> KubeClient {
        let authority = endpoint
            .strip_prefix("https://")
            .unwrap_or_else(|| panic!("not an https endpoint: {endpoint}"))
            .trim_end_matches('/')
            .to_string();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            roots
                .add(cert.expect("CA PEM parses"))
                .expect("CA certificate is acceptable");
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        KubeClient {
            authority,
            config: Arc::new(config),
            token,
        }
    }

    /// The same endpoint and CA with another token (or none).
    pub fn with_token(&self, token: Option<String>) -> KubeClient {
        KubeClient {
            token,
            ..self.clone()
        }
    }

    /// GET `path` (with query string).
    pub fn get(&self, path: &str) -> KubeResponse {
        self.request("GET", path, None, None)
    }

    /// POST a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> KubeResponse {
        self.request("POST", path, Some("application/json"), Some(body))
    }

    /// PUT a JSON body.
    pub fn put(&self, path: &str, body: &Value) -> KubeResponse {
        self.request("PUT", path, Some("application/json"), Some(body))
    }

    /// PATCH with the given patch content type.
    pub fn patch(&self, path: &str, content_type: &str, body: &Value) -> KubeResponse {
        self.request("PATCH", path, Some(content_type), Some(body))
    }

    /// DELETE, optionally with a DeleteOptions body.
    pub fn delete(&self, path: &str, body: Option<&Value>) -> KubeResponse {
        self.request("DELETE", path, body.map(|_| "application/json"), body)
    }

    /// Any request. Panics on transport errors (test setup).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> KubeResponse {
        self.try_request(method, path, content_type, body)
            .unwrap_or_else(|e| panic!("{method} {path} on the stand-in failed: {e}"))
    }

    /// Any request; transport errors (e.g. a TLS failure) are returned.
    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> std::io::Result<KubeResponse> {
        let io_err = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
        let tcp = TcpStream::connect(&self.authority)?;
        tcp.set_read_timeout(Some(Duration::from_secs(60)))?;
        let host = self
            .authority
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(&self.authority)
            .to_string();
        let name = ServerName::try_from(host).map_err(|e| io_err(&e))?;
        let conn =
            rustls::ClientConnection::new(self.config.clone(), name).map_err(|e| io_err(&e))?;
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let payload = body
            .map(|b| serde_json::to_vec(b).expect("JSON body"))
            .unwrap_or_default();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\n\
             User-Agent: nodecycle-tests\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.authority,
            payload.len()
        );
        if let Some(ct) = content_type {
            head.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        if let Some(t) = &self.token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        head.push_str("\r\n");
        tls.write_all(head.as_bytes())?;
        tls.write_all(&payload)?;
        tls.flush()?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 16384];
        loop {
            match tls.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    raw.extend_from_slice(&buf[..n]);
                    if response_complete(&raw) {
                        break;
                    }
                }
                // The server may close without TLS close_notify.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            }
        }
        let resp = crate::http::parse_response(&raw)?;
        let raw_body = String::from_utf8_lossy(&resp.body).to_string();
        Ok(KubeResponse {
            status: resp.status,
            body: serde_json::from_str(&raw_body).unwrap_or(Value::Null),
            raw: raw_body,
        })
    }
}

fn response_complete(raw: &[u8]) -> bool {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..split]);
    let len = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())
            .flatten()
    });
    matches!(len, Some(n) if raw.len() >= split + 4 + n)
}
