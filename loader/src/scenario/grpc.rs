//! gRPC unary calls (`--grpc package.Service/Method`): the method looked up in `.proto` files
//! compiled in-process (protox: no `protoc` needed), and each request's JSON message (the
//! request body, filled from a data row like any body) encoded once at start-up from the
//! method's input descriptor (prost-reflect) into a gRPC length-prefixed message.
//!
//! A gRPC call is an HTTP/2 POST to `/package.Service/Method` with `content-type:
//! application/grpc` and `te: trailers`; `--deadline` travels as `grpc-timeout`, `-H`
//! headers as metadata. The answer's `grpc-status` (in the trailers, or in the headers of a
//! trailers-only answer) decides the outcome; the engine reads it (engine/http2).

use std::path::PathBuf;
use std::time::Duration;

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};

use super::raw::Raw;
use super::values::duration_at_most;
use crate::error::InputError;

/// Longest `--deadline` (gRPC's `grpc-timeout` carries at most 8 digits of its unit).
const MAX_DEADLINE: Duration = Duration::from_secs(3600);
/// Largest `.proto` file read.
const MAX_PROTO_BYTES: u64 = 16 << 20;

/// A validated gRPC method.
#[derive(Debug, Clone)]
pub struct GrpcSpec {
    /// The HTTP/2 path: `/package.Service/Method`.
    pub path: String,
    /// `package.Service` and `Method`, as given.
    service: String,
    method: String,
    /// The method's input message, to encode requests with; `None` until server reflection
    /// has fetched it (no `--proto`: [`GrpcSpec::reflect`], before the plan is resolved).
    pub input: Option<MessageDescriptor>,
    /// Sent as `grpc-timeout`, if given.
    pub deadline: Option<Duration>,
}

impl GrpcSpec {
    /// The headers every call carries (before the user's metadata).
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut h = vec![("content-type".into(), "application/grpc".into()), ("te".into(), "trailers".into())];
        if let Some(d) = self.deadline {
            // Milliseconds, rounded up: a deadline is never shortened.
            h.push(("grpc-timeout".into(), format!("{}m", d.as_micros().div_ceil(1000))));
        }
        h
    }

    /// Whether the method's descriptor is still to be fetched by server reflection.
    pub fn needs_reflection(&self) -> bool {
        self.input.is_none()
    }

    /// Ask the server at `url` for the service's descriptors (gRPC server reflection, v1 or
    /// v1alpha), as grpcurl does when it is given no .proto; `tls` as for the run.
    pub fn reflect(&mut self, url: &str, tls: &super::target::TlsSpec, timeout: Duration) -> Result<(), InputError> {
        let key = "--grpc";
        let (addr, authority, _, https) = super::target::resolve_url(url, "--url")?;
        let tls = match https {
            Some(name) => {
                let plan = super::target::tls_plan(name, tls)?;
                let client = crate::engine::tls::TlsClient::new(plan.server_name.clone(), &plan.verify)
                    .map_err(|e| InputError::new("--cacert", e.to_string()))?;
                let mut config = (*client.config).clone();
                config.alpn_protocols = vec![b"h2".to_vec()];
                Some((std::sync::Arc::new(config), plan.server_name))
            }
            None => None,
        };
        let server = crate::reflect::Server { addr, authority: &authority, tls, timeout };
        let files = crate::reflect::files_for_symbol(&server, &self.service)
            .map_err(|e| InputError::new(key, format!("server reflection at {url}: {e}")))?;
        let mut protos = Vec::with_capacity(files.len());
        for bytes in &files {
            let file = <prost_reflect::prost_types::FileDescriptorProto as prost::Message>::decode(bytes.as_slice())
                .map_err(|e| {
                    InputError::new(key, format!("server reflection at {url}: a descriptor that does not decode: {e}"))
                })?;
            protos.push(file);
        }
        let mut pool = DescriptorPool::new();
        pool.add_file_descriptor_protos(protos)
            .map_err(|e| InputError::new(key, format!("server reflection at {url}: {}", one_line(&e.to_string()))))?;
        self.input = Some(self.input_in(&pool, "the server's reflection").map_err(|e| InputError::new(key, e))?);
        Ok(())
    }

    /// The method's input message in `pool` (`source` names where the pool came from).
    fn input_in(&self, pool: &DescriptorPool, source: &str) -> Result<MessageDescriptor, String> {
        let (service, name) = (&self.service, &self.method);
        let svc = pool.get_service_by_name(service).ok_or_else(|| {
            let known: Vec<String> = pool.services().map(|s| s.full_name().to_string()).collect();
            format!("no service {service} in {source} (services: {})", known.join(", "))
        })?;
        let m = svc.methods().find(|m| m.name() == name).ok_or_else(|| {
            let known: Vec<String> = svc.methods().map(|m| m.name().to_string()).collect();
            format!("no method {name} in {service} (methods: {})", known.join(", "))
        })?;
        if m.is_client_streaming() || m.is_server_streaming() {
            return Err(format!("{service}/{name} is a streaming method; only unary calls are supported"));
        }
        Ok(m.input())
    }

    /// A JSON message → a gRPC length-prefixed message (uncompressed).
    pub fn frame(&self, json: &[u8]) -> Result<Vec<u8>, String> {
        let input = self.input.as_ref().ok_or_else(|| {
            format!("{} has no descriptor: give --proto, or let server reflection fetch it first", self.service)
        })?;
        let mut de = serde_json::Deserializer::from_slice(json);
        let message = DynamicMessage::deserialize(input.clone(), &mut de)
            .and_then(|m| de.end().map(|()| m))
            .map_err(|e| format!("not a {} in JSON: {e}", input.full_name()))?;
        let bytes = prost::Message::encode_to_vec(&message);
        let len = u32::try_from(bytes.len()).map_err(|_| "message larger than 4 GiB".to_string())?;
        let mut out = Vec::with_capacity(5 + bytes.len());
        out.push(0);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&bytes);
        Ok(out)
    }
}

/// `--grpc` with `--proto` (and `--proto-path`), `--deadline`; `None` without `--grpc`.
pub(crate) fn from_raw(raw: &Raw) -> Result<Option<GrpcSpec>, InputError> {
    let g = &raw.grpc;
    let protos = g.proto.as_ref().filter(|p| !p.value.is_empty());
    let Some(method) = &g.method else {
        let stray = protos.map(|p| p.origin.label()).or_else(|| g.deadline.as_ref().map(|d| d.origin.label()));
        if let Some(key) = stray {
            return Err(InputError::new(key, "only with a gRPC method (--grpc package.Service/Method)"));
        }
        return Ok(None);
    };
    let key = method.origin.label();
    let (service, name) = method
        .value
        .trim_start_matches('/')
        .rsplit_once('/')
        .filter(|(s, m)| !s.is_empty() && !m.is_empty())
        .ok_or_else(|| InputError::new(&key, format!("expected package.Service/Method, got {:?}", method.value)))?;
    let deadline = g.deadline.as_ref().map(|d| duration_at_most(d, MAX_DEADLINE, "1 hour")).transpose()?;
    if deadline.is_some_and(|d| d.is_zero()) {
        return Err(InputError::new(
            g.deadline.as_ref().map_or(String::new(), |d| d.origin.label()),
            "must be above zero",
        ));
    }
    let mut spec = GrpcSpec {
        path: format!("/{service}/{name}"),
        service: service.to_string(),
        method: name.to_string(),
        input: None,
        deadline,
    };
    let Some(protos) = protos else {
        if raw.target.url.is_none() {
            return Err(InputError::new(
                &key,
                "the built-in target does not offer server reflection: give the method's .proto with --proto FILE",
            ));
        }
        // Server reflection fetches the descriptors once the target is known.
        return Ok(Some(spec));
    };
    let files: Vec<PathBuf> = protos.value.clone();
    let mut includes: Vec<PathBuf> = g.import_paths.as_ref().map(|p| p.value.clone()).unwrap_or_default();
    if includes.is_empty() {
        // Each file's own directory, as `protoc -I` would be told.
        for f in &files {
            let dir =
                f.parent().filter(|p| !p.as_os_str().is_empty()).map_or_else(|| PathBuf::from("."), PathBuf::from);
            if !includes.contains(&dir) {
                includes.push(dir);
            }
        }
    }
    // Only regular files of a sane size: a FIFO or a device would never end.
    let proto_key = protos.origin.label();
    for f in &files {
        match std::fs::metadata(f) {
            Ok(m) if m.is_file() && m.len() <= MAX_PROTO_BYTES => {}
            Ok(m) if m.is_file() => {
                return Err(InputError::new(&proto_key, format!("{} is larger than 16 MiB", f.display())));
            }
            Ok(_) => return Err(InputError::new(&proto_key, format!("{} is not a regular file", f.display()))),
            Err(e) => return Err(InputError::new(&proto_key, format!("cannot read {}: {e}", f.display()))),
        }
    }
    let set = protox::compile(&files, &includes).map_err(|e| InputError::new(&proto_key, one_line(&e.to_string())))?;
    let pool = DescriptorPool::from_file_descriptor_set(set)
        .map_err(|e| InputError::new(&proto_key, one_line(&e.to_string())))?;
    spec.input = Some(spec.input_in(&pool, "the .proto files").map_err(|e| InputError::new(&key, e))?);
    Ok(Some(spec))
}

/// A multi-line compiler message on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
