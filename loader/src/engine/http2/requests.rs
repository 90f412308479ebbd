//! The run's requests in HTTP/2 form: each entry of the [`RequestTable`] (an encoded HTTP/1.1
//! request) read back once at start-up into an HPACK header block and a body, so the scenario,
//! the mix, the data rows and the request numbering stay exactly those of HTTP/1.1.
//!
//! HTTP/2 forbids the connection-specific headers (RFC 9113 §8.2.2): `Connection`,
//! `Keep-Alive`, `Proxy-Connection`, `Transfer-Encoding`, `Upgrade` are dropped, and `Host`
//! becomes the `:authority` pseudo-header.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri};

use crate::engine::RequestTable;

/// Headers a request head may carry (the scenario's limit is lower).
const MAX_HEADERS: usize = 128;

/// One request, ready to open a stream with.
#[derive(Debug)]
struct Entry {
    body: Bytes,
    /// The head as an HPACK header block (`hpack::encode_block`).
    block: Vec<u8>,
}

/// Every entry of the run's request table, in HTTP/2 form (same indexes).
#[derive(Debug)]
pub struct Http2Requests {
    entries: Vec<Entry>,
}

impl Http2Requests {
    /// Read back every entry of `table`; `scheme` is `http` or `https`. An entry that is not
    /// a request head this module can read is an error naming it (the scenario encodes them,
    /// so this is a bug, not user input).
    pub fn from_table(table: &RequestTable, scheme: &str) -> Result<Http2Requests, String> {
        let entries = table
            .bytes
            .iter()
            .enumerate()
            .map(|(i, bytes)| convert(bytes, scheme).map_err(|e| format!("request entry {i}: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Http2Requests { entries })
    }

    /// Entry `i` as its header block and body.
    pub(crate) fn wire(&self, i: u32) -> (&[u8], &Bytes) {
        let e = &self.entries[i as usize];
        (&e.block, &e.body)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// One encoded HTTP/1.1 request → its HTTP/2 parts.
fn convert(bytes: &[u8], scheme: &str) -> Result<Entry, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let len = match head.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Err("incomplete request head".into()),
        Err(e) => return Err(format!("unreadable request head: {e}")),
    };
    let method = Method::from_bytes(head.method.unwrap_or("GET").as_bytes()).map_err(|e| e.to_string())?;
    let path = head.path.unwrap_or("/");
    let mut authority = None;
    let mut map = HeaderMap::new();
    for h in head.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        match name.as_str() {
            "host" => authority = Some(String::from_utf8_lossy(h.value).into_owned()),
            "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade" => {}
            // `te` may only say "trailers" in HTTP/2.
            "te" if !h.value.eq_ignore_ascii_case(b"trailers") => {}
            _ => {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("header {name}: {e}"))?;
                let value = HeaderValue::from_bytes(h.value).map_err(|e| format!("header {name}: {e}"))?;
                map.append(name, value);
            }
        }
    }
    let authority = authority.ok_or("no Host header")?;
    // What a server would refuse as a URI is refused here, once.
    Uri::builder()
        .scheme(scheme)
        .authority(authority.as_str())
        .path_and_query(path)
        .build()
        .map_err(|e| format!("URI {scheme}://{authority}{path}: {e}"))?;
    let block = super::hpack::encode_block(
        method.as_str(),
        scheme,
        &authority,
        path,
        map.iter().map(|(name, value)| (name.as_str(), value.as_bytes())),
    );
    Ok(Entry { body: Bytes::copy_from_slice(&bytes[len..]), block })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http1_request_becomes_its_http2_parts() {
        let wire = b"POST /api/items?id=7 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: keep-alive\r\n\
            Content-Type: application/json\r\nX-Trace: a\r\nX-Trace: b\r\nContent-Length: 9\r\n\r\n{\"a\": 1}\n";
        let e = convert(wire, "http").unwrap();
        let mut fields = Vec::new();
        super::super::hpack::Decoder::default()
            .decode(&e.block, |name, value| {
                fields.push((String::from_utf8_lossy(name).into_owned(), String::from_utf8_lossy(value).into_owned()))
            })
            .unwrap();
        let get = |name: &str| fields.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_str()).collect::<Vec<_>>();
        assert_eq!(get(":method"), ["POST"]);
        assert_eq!(
            (get(":scheme"), get(":authority"), get(":path")),
            (vec!["http"], vec!["127.0.0.1:8080"], vec!["/api/items?id=7"])
        );
        assert!(get("connection").is_empty() && get("host").is_empty(), "{fields:?}");
        assert_eq!(get("x-trace"), ["a", "b"], "repeated headers kept");
        assert_eq!(get("content-type"), ["application/json"]);
        assert_eq!(&e.body[..], b"{\"a\": 1}\n");
    }

    #[test]
    fn a_head_without_host_is_refused() {
        assert!(convert(b"GET / HTTP/1.1\r\n\r\n", "http").unwrap_err().contains("Host"));
        assert!(convert(b"GET / HTTP/1.1\r\nHost: a\r\n", "https").unwrap_err().contains("incomplete"));
    }
}
