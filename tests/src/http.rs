//! A minimal blocking HTTP/1.1 client for the control endpoint (plain HTTP on
//! loopback, `Connection: close`), so test support needs no HTTP crate.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A response: status code and body bytes.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Splits `http://host:port/path` into (`host:port`, `/path`).
pub(crate) fn split_url(url: &str) -> (String, String) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not an http:// URL: {url}"));
    match rest.find('/') {
        Some(i) => (rest[..i].to_string(), rest[i..].to_string()),
        None => (rest.to_string(), "/".to_string()),
    }
}

/// Sends one request and reads the whole response (the server closes).
pub(crate) fn request(
    method: &str,
    url: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<Response> {
    let (authority, path) = split_url(url);
    let mut stream = TcpStream::connect(&authority)?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// Sends `GET url` with `headers` (a `Host` among them replaces the URL's authority in the
/// `Host` header, the connection still goes to the URL's authority) and reads the whole
/// response (the server closes). Bounded: 30 s to connect and to read.
pub(crate) fn get_with_headers(url: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    let (authority, path) = split_url(url);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&authority)?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("no address for {authority}")))?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(30))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let host = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map_or(authority.as_str(), |(_, v)| *v);
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (k, v) in headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
    {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes())?;
    stream.flush()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw)
}

pub(crate) fn parse_response(raw: &[u8]) -> std::io::Result<Response> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| bad("headers not UTF-8"))?;
    let status_line = head.lines().next().ok_or_else(|| bad("empty response"))?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let mut body = raw[split + 4..].to_vec();
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    } else if let Some(len) = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())
            .flatten()
    }) {
        body.truncate(len);
    }
    Ok(Response { status, body })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_str = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_str.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}
