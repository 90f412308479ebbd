//! gRPC server reflection, the client side: the `.proto` descriptors of a service asked of
//! the server itself (`grpc.reflection.v1.ServerReflection/ServerReflectionInfo`, falling
//! back to `v1alpha`, which is all grpcio serves), for `--grpc` without `--proto` — what
//! grpcurl and k6's `reflect: true` do.
//!
//! One connection and one bidirectional stream before the run: ask for the file that holds
//! the service, then by name for each file it imports that did not come with it, until the
//! set is complete. The answer is the serialized `FileDescriptorProto`s; turning them into
//! a descriptor pool is the scenario's (`scenario::grpc`). It runs on the `h2` crate over a
//! small tokio runtime of its own: one exchange before the run, never the run's engine.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use prost::Message;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Most files a service's descriptors may span (its file and everything it imports).
const MAX_FILES: usize = 1_000;
/// Largest reflection answer accepted (one message).
const MAX_MESSAGE: usize = 64 << 20;
/// The reflection services, newest first.
const SERVICES: [&str; 2] = ["grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"];
/// gRPC's UNIMPLEMENTED: the server does not offer that reflection service.
const UNIMPLEMENTED: u32 = 12;

/// `ServerReflectionRequest` (grpc/reflection/v1/reflection.proto), the two questions asked.
#[derive(Clone, PartialEq, prost::Message)]
struct ReflectionRequest {
    #[prost(string, tag = "1")]
    host: String,
    #[prost(oneof = "Question", tags = "3, 4")]
    question: Option<Question>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Question {
    #[prost(string, tag = "3")]
    FileByFilename(String),
    #[prost(string, tag = "4")]
    FileContainingSymbol(String),
}

/// `ServerReflectionResponse`: descriptors, or an error.
#[derive(Clone, PartialEq, prost::Message)]
struct ReflectionResponse {
    #[prost(oneof = "Answer", tags = "4, 7")]
    answer: Option<Answer>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Answer {
    #[prost(message, tag = "4")]
    Files(FileDescriptorResponse),
    #[prost(message, tag = "7")]
    Error(ErrorResponse),
}

#[derive(Clone, PartialEq, prost::Message)]
struct FileDescriptorResponse {
    #[prost(bytes = "vec", repeated, tag = "1")]
    file_descriptor_proto: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ErrorResponse {
    #[prost(int32, tag = "1")]
    error_code: i32,
    #[prost(string, tag = "2")]
    error_message: String,
}

/// The parts of a `FileDescriptorProto` the walk needs: its name and its imports.
#[derive(Clone, PartialEq, prost::Message)]
struct FileHeader {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, repeated, tag = "3")]
    dependency: Vec<String>,
}

/// Where the server is and how to reach it.
pub struct Server<'a> {
    /// The server's address.
    pub addr: SocketAddr,
    /// `host[:port]` for `:authority`.
    pub authority: &'a str,
    /// TLS with ALPN `h2` (https), or cleartext with prior knowledge.
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// For the whole exchange.
    pub timeout: Duration,
}

/// The serialized `FileDescriptorProto`s of the file defining `symbol` (a service's full
/// name) and of every file it imports, in the order they came. Errors are one sentence.
pub fn files_for_symbol(server: &Server<'_>, symbol: &str) -> Result<Vec<Vec<u8>>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime for server reflection: {e}"))?;
    runtime.block_on(async {
        match tokio::time::timeout(server.timeout, ask(server, symbol)).await {
            Ok(result) => result,
            Err(_) => Err(format!("server reflection did not answer within {:?}", server.timeout)),
        }
    })
}

async fn ask(server: &Server<'_>, symbol: &str) -> Result<Vec<Vec<u8>>, String> {
    let tcp = TcpStream::connect(server.addr).await.map_err(|e| format!("cannot connect to {}: {e}", server.addr))?;
    let _ = tcp.set_nodelay(true);
    let Some((config, name)) = &server.tls else {
        return walk(server, tcp, "http", symbol).await;
    };
    let tls = tokio_rustls::TlsConnector::from(Arc::clone(config))
        .connect(name.clone(), tcp)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err("the server does not offer HTTP/2 in the TLS handshake (ALPN h2)".into());
    }
    walk(server, tls, "https", symbol).await
}

/// The HTTP/2 connection, then each reflection service in turn until one is offered.
async fn walk<T>(server: &Server<'_>, io: T, scheme: &str, symbol: &str) -> Result<Vec<Vec<u8>>, String>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = h2::client::handshake(io).await.map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let driver = tokio::spawn(connection);
    let mut refused = Vec::new();
    let mut result = None;
    for service in SERVICES {
        match stream(server, send.clone(), scheme, service, symbol).await {
            Err(Refusal::Unimplemented(text)) => refused.push(format!("{service}: {text}")),
            Err(Refusal::Other(text)) => {
                result = Some(Err(text));
                break;
            }
            Ok(files) => {
                result = Some(Ok(files));
                break;
            }
        }
    }
    driver.abort();
    result.unwrap_or_else(|| {
        Err(format!(
            "the server does not offer gRPC server reflection (UNIMPLEMENTED for {}); give the service's .proto with --proto FILE",
            refused.join("; ")
        ))
    })
}

enum Refusal {
    /// This reflection service is not offered (try the next).
    Unimplemented(String),
    Other(String),
}

/// One reflection stream: the question for `symbol`, then one per missing import.
async fn stream(
    server: &Server<'_>,
    send: h2::client::SendRequest<Bytes>,
    scheme: &str,
    service: &str,
    symbol: &str,
) -> Result<Vec<Vec<u8>>, Refusal> {
    let other = |e: String| Refusal::Other(e);
    let uri = format!("{scheme}://{}/{service}/ServerReflectionInfo", server.authority);
    let request = http::Request::post(uri)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .map_err(|e| other(format!("reflection request: {e}")))?;
    let mut send = send.ready().await.map_err(|e| other(format!("HTTP/2: {e}")))?;
    let (response, mut out) =
        send.send_request(request, false).map_err(|e| other(format!("reflection request: {e}")))?;
    let host = server.authority.to_string();
    let question = |q: Question| frame(&ReflectionRequest { host: host.clone(), question: Some(q) });
    out.send_data(question(Question::FileContainingSymbol(symbol.into())), false)
        .map_err(|e| other(format!("reflection request: {e}")))?;

    let response = response.await.map_err(|e| other(format!("reflection answer: {e}")))?;
    if response.status() != http::StatusCode::OK {
        return Err(other(format!("reflection answered HTTP {}", response.status())));
    }
    if let Some(status) = grpc_status(response.headers()) {
        return Err(refusal(status));
    }
    let mut body = response.into_body();
    let mut buffer = BytesMut::new();
    let mut files: Vec<Vec<u8>> = Vec::new();
    let mut have = BTreeSet::new();
    let mut asked = BTreeSet::new();
    let mut pending = 1;
    while pending > 0 {
        let Some(chunk) = body.data().await else {
            let trailers = body.trailers().await.map_err(|e| other(format!("reflection answer: {e}")))?;
            return Err(match trailers.as_ref().and_then(grpc_status) {
                Some(status) if status.0 != 0 => refusal(status),
                _ => other("the reflection stream ended before it answered".into()),
            });
        };
        let chunk = chunk.map_err(|e| other(format!("reflection answer: {e}")))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        buffer.extend_from_slice(&chunk);
        while let Some(message) = next_message(&mut buffer).map_err(other)? {
            pending -= 1;
            let answer = ReflectionResponse::decode(message).map_err(|e| other(format!("reflection answer: {e}")))?;
            match answer.answer {
                Some(Answer::Files(f)) => {
                    for bytes in f.file_descriptor_proto {
                        let header =
                            FileHeader::decode(bytes.as_slice()).map_err(|e| other(format!("descriptor: {e}")))?;
                        if have.insert(header.name.clone()) {
                            asked.extend(header.dependency.iter().cloned());
                            files.push(bytes);
                        }
                    }
                }
                Some(Answer::Error(e)) => {
                    return Err(other(format!(
                        "server reflection: {} (code {})",
                        e.error_message.trim(),
                        e.error_code
                    )));
                }
                None => return Err(other("server reflection answered neither descriptors nor an error".into())),
            }
            if files.len() > MAX_FILES {
                return Err(other(format!("the service's descriptors span more than {MAX_FILES} files")));
            }
        }
        if pending == 0 {
            // Imports that did not come with the files: ask for each by name, once.
            let missing: Vec<String> = asked.iter().filter(|n| !have.contains(*n)).cloned().collect();
            for name in missing {
                have.insert(name.clone());
                out.send_data(question(Question::FileByFilename(name)), false)
                    .map_err(|e| other(format!("reflection request: {e}")))?;
                pending += 1;
            }
        }
    }
    let _ = out.send_data(Bytes::new(), true);
    Ok(files)
}

/// A message in gRPC's length-prefixed framing (uncompressed).
fn frame(message: &impl Message) -> Bytes {
    let bytes = message.encode_to_vec();
    let mut out = BytesMut::with_capacity(5 + bytes.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&bytes);
    out.freeze()
}

/// The next whole message of `buffer`, if it holds one.
fn next_message(buffer: &mut BytesMut) -> Result<Option<Bytes>, String> {
    if buffer.len() < 5 {
        return Ok(None);
    }
    if buffer[0] != 0 {
        return Err("the reflection answer is compressed, which is not supported".into());
    }
    let len = u32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]) as usize;
    if len > MAX_MESSAGE {
        return Err(format!("a reflection answer of {len} bytes (at most {MAX_MESSAGE})"));
    }
    if buffer.len() < 5 + len {
        return Ok(None);
    }
    buffer.advance(5);
    Ok(Some(buffer.split_to(len).freeze()))
}

/// A non-OK status on the reflection stream: UNIMPLEMENTED means "try the next service".
fn refusal((code, message): (u32, String)) -> Refusal {
    let text = format!("grpc-status {} {message}", crate::record::grpc::code_name(code as usize)).trim().to_string();
    if code == UNIMPLEMENTED {
        Refusal::Unimplemented(text)
    } else {
        Refusal::Other(format!("server reflection: {text}"))
    }
}

/// A gRPC answer's `grpc-status` and `grpc-message` from `headers` (a head or trailers), if
/// it has one; a status that is not a number is UNKNOWN (2).
fn grpc_status(headers: &http::HeaderMap) -> Option<(u32, String)> {
    let code = headers.get("grpc-status")?.to_str().ok()?.trim().parse().unwrap_or(2);
    let message = headers.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or_default();
    Some((code, message.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_framed_and_read_back_whole() {
        let q = ReflectionRequest { host: "h".into(), question: Some(Question::FileByFilename("a.proto".into())) };
        let framed = frame(&q);
        let mut buffer = BytesMut::from(&framed[..3]);
        assert_eq!(next_message(&mut buffer), Ok(None));
        buffer.extend_from_slice(&framed[3..]);
        buffer.extend_from_slice(&framed[..2]);
        let one = next_message(&mut buffer).unwrap().unwrap();
        assert_eq!(ReflectionRequest::decode(one).unwrap(), q);
        assert_eq!(buffer.len(), 2, "the next message's start stays");
        let mut compressed = BytesMut::from(&[1u8, 0, 0, 0, 0][..]);
        assert!(next_message(&mut compressed).unwrap_err().contains("compressed"));
    }

    #[test]
    fn a_file_header_reads_name_and_imports_of_a_full_descriptor() {
        let file = prost_reflect::prost_types::FileDescriptorProto {
            name: Some("a/b.proto".into()),
            package: Some("p".into()),
            dependency: vec!["google/protobuf/empty.proto".into()],
            ..Default::default()
        };
        let h = FileHeader::decode(file.encode_to_vec().as_slice()).unwrap();
        assert_eq!(
            (h.name.as_str(), h.dependency.as_slice()),
            ("a/b.proto", &["google/protobuf/empty.proto".to_string()][..])
        );
    }
}
