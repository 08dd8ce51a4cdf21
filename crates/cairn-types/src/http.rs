//! Outgoing HTTP (`wasi:http/outgoing-handler`) as cairn journals it: a
//! request and its response are the `request` and `response` of one host
//! call of capability `http`, op `request`; and the allowlist patterns a
//! workspace's requests must match (`allowed_outbound_hosts`, written as
//! Spin writes them).
//!
//! A body is journaled as `body` when it is UTF-8 text, else as
//! `body_base64` (standard alphabet, padded); a header value likewise
//! (`[name, value]` pairs, in order, names lower-case).

use serde::{Deserialize, Serialize};

/// One outgoing request, as journaled (`host_call_started.request`).
/// Header values may hold `{{secret:NAME}}` templates: the journal keeps
/// the template, the host sends the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The absolute URL (`https://api.example.com/v1/x?y=1`).
    pub url: String,
    /// Headers in order (`[name, value]`).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The body, UTF-8 text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The body, when it is not UTF-8 text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

/// One response, as journaled (`host_call_finished.response`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Headers in order (`[name, value]`).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The body, UTF-8 text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The body, when it is not UTF-8 text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

/// A body as its two journaled fields (`body`, `body_base64`).
pub fn encode_body(bytes: &[u8]) -> (Option<String>, Option<String>) {
    if bytes.is_empty() {
        return (None, None);
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => (Some(text.to_string()), None),
        Err(_) => (None, Some(base64_encode(bytes))),
    }
}

/// A body's bytes from its two journaled fields.
pub fn decode_body(body: &Option<String>, body_base64: &Option<String>) -> Result<Vec<u8>, String> {
    match (body, body_base64) {
        (Some(text), None) => Ok(text.as_bytes().to_vec()),
        (None, Some(b64)) => base64_decode(b64),
        (None, None) => Ok(Vec::new()),
        (Some(_), Some(_)) => Err("a body is either `body` or `body_base64`, not both".into()),
    }
}

/// The methods a request of which may be sent again after the host died
/// while it was under way (RFC 9110's idempotent methods, TRACE aside).
pub fn idempotent_method(method: &str) -> bool {
    matches!(
        method.to_ascii_uppercase().as_str(),
        "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS"
    )
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 (padding optional) back to bytes.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("{:?} is not a base64 character", c as char)),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

/// One `allowed_outbound_hosts` entry: `scheme://host[:port]`, where the
/// scheme may be `*`, the host `*` or `*.domain`, and the port a number,
/// a range `8000..8010` or `*`; with no port, the scheme's own (80, 443).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    scheme: Option<String>,
    host: HostMatch,
    ports: PortMatch,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Any,
    Exact(String),
    Subdomain(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PortMatch {
    Any,
    Default,
    Range(u16, u16),
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

impl HostPattern {
    /// Parse an entry; the error says what is wrong with it.
    pub fn parse(pattern: &str) -> Result<HostPattern, String> {
        let bad = |why: &str| format!("allowed_outbound_hosts entry {pattern:?}: {why}");
        let (scheme, rest) = pattern
            .split_once("://")
            .ok_or_else(|| bad("write it as scheme://host[:port], e.g. https://api.example.com"))?;
        let scheme = match scheme {
            "*" => None,
            "http" | "https" => Some(scheme.to_string()),
            _ => return Err(bad("the scheme must be http, https or *")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') || rest.contains('?') || rest.contains('@') {
            return Err(bad("name a host and port only, no path, query or user"));
        }
        let (host, port) = match rest.rsplit_once(':') {
            // `[::1]:8080`, or a host with a port.
            Some((h, p)) if !h.is_empty() && (!rest.starts_with('[') || h.ends_with(']')) => {
                (h, Some(p))
            }
            _ => (rest, None),
        };
        if host.is_empty() {
            return Err(bad("the host is missing"));
        }
        let host = host.to_ascii_lowercase();
        let host = if host == "*" {
            HostMatch::Any
        } else if let Some(domain) = host.strip_prefix("*.") {
            if domain.is_empty() || domain.contains('*') {
                return Err(bad("a wildcard host is `*` or `*.domain`"));
            }
            HostMatch::Subdomain(domain.to_string())
        } else if host.contains('*') {
            return Err(bad("a wildcard host is `*` or `*.domain`"));
        } else {
            HostMatch::Exact(host)
        };
        let ports = match port {
            None => {
                if scheme.is_none() {
                    return Err(bad(
                        "with scheme `*`, name the port (a number, a range a..b, or *)",
                    ));
                }
                PortMatch::Default
            }
            Some("*") => PortMatch::Any,
            Some(p) => match p.split_once("..") {
                Some((a, b)) => {
                    let a: u16 = a
                        .parse()
                        .map_err(|_| bad("the port range's start is not a port"))?;
                    let b: u16 = b
                        .parse()
                        .map_err(|_| bad("the port range's end is not a port"))?;
                    if a > b {
                        return Err(bad("the port range ends before it starts"));
                    }
                    PortMatch::Range(a, b)
                }
                None => {
                    let n: u16 = p
                        .parse()
                        .map_err(|_| bad("the port is not a number, a range a..b, or *"))?;
                    PortMatch::Range(n, n)
                }
            },
        };
        Ok(HostPattern {
            scheme,
            host,
            ports,
        })
    }

    /// Whether a request to `scheme://host:port` matches.
    pub fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        if self.scheme.as_deref().is_some_and(|s| s != scheme) {
            return false;
        }
        let host = host.to_ascii_lowercase();
        let host_ok = match &self.host {
            HostMatch::Any => true,
            HostMatch::Exact(h) => *h == host,
            HostMatch::Subdomain(d) => host
                .strip_suffix(d.as_str())
                .is_some_and(|sub| sub.ends_with('.') && sub.len() > 1),
        };
        host_ok
            && match self.ports {
                PortMatch::Any => true,
                PortMatch::Default => default_port(scheme) == Some(port),
                PortMatch::Range(a, b) => (a..=b).contains(&port),
            }
    }
}

/// Whether any of `patterns` allows a request to `scheme://host:port`
/// (an entry that does not parse allows nothing; config loading refuses
/// it first).
pub fn allowed(patterns: &[String], scheme: &str, host: &str, port: u16) -> bool {
    patterns
        .iter()
        .filter_map(|p| HostPattern::parse(p).ok())
        .any(|p| p.allows(scheme, host, port))
}

/// The port of a URL's authority, or the scheme's own.
pub fn port_of(scheme: &str, explicit: Option<u16>) -> Option<u16> {
    explicit.or_else(|| default_port(scheme))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_spin_writes_them() {
        let p = |s: &str| HostPattern::parse(s).unwrap();
        assert!(p("https://api.example.com").allows("https", "api.example.com", 443));
        assert!(!p("https://api.example.com").allows("https", "api.example.com", 8443));
        assert!(!p("https://api.example.com").allows("http", "api.example.com", 80));
        assert!(p("http://127.0.0.1:*").allows("http", "127.0.0.1", 41234));
        assert!(!p("http://127.0.0.1:*").allows("http", "127.0.0.2", 41234));
        assert!(p("https://*.example.com").allows("https", "a.b.example.com", 443));
        assert!(!p("https://*.example.com").allows("https", "example.com", 443));
        assert!(!p("https://*.example.com").allows("https", "badexample.com", 443));
        assert!(p("*://example.com:8000..8010").allows("http", "EXAMPLE.com", 8005));
        assert!(!p("*://example.com:8000..8010").allows("http", "example.com", 8011));
        assert!(p("http://[::1]:8080").allows("http", "[::1]", 8080));
        for bad in [
            "example.com",
            "ftp://x",
            "https://a/b",
            "*://x",
            "https://a*b",
            "http://x:9..1",
        ] {
            let e = HostPattern::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn bodies_round_trip() {
        for bytes in [&b""[..], b"hello", &[0xff, 0, 1, 2, 3], &[0x80; 7]] {
            let (t, b) = encode_body(bytes);
            assert_eq!(decode_body(&t, &b).unwrap(), bytes);
        }
        assert_eq!(
            base64_encode(b"any carnal pleas"),
            "YW55IGNhcm5hbCBwbGVhcw=="
        );
        assert_eq!(
            base64_decode("YW55IGNhcm5hbCBwbGVhcw==").unwrap(),
            b"any carnal pleas"
        );
        assert!(base64_decode("a$b").is_err());
    }
}
