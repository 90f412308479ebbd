//! Where the load goes: a URL resolved to its address, Host header, path and TLS server name,
//! and the TLS flags (`--insecure`, `--cacert`) as given and as planned. The plan and the
//! gRPC reflection (which asks the target before the plan exists) both resolve through here.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use hyper::Uri;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::engine::tls::Verify;
use crate::error::InputError;

/// TLS flags as given (`--insecure`, `--cacert`); they apply to https URLs only.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsSpec {
    /// Skip certificate verification.
    pub insecure: bool,
    /// Trust the roots in this PEM file instead of the Mozilla roots.
    pub cacert: Option<PathBuf>,
}

/// How an https target is reached.
#[derive(Debug, Clone)]
pub struct TlsPlan {
    /// SNI and the name the certificate must carry: the URL's host (an IP literal becomes
    /// an IP address name, which rustls checks against the certificate's IP SANs).
    pub server_name: ServerName<'static>,
    /// How the certificate is verified.
    pub verify: Verify,
}

/// The URL's socket address, Host header, path and — for https — the TLS server name.
pub(super) fn resolve_url(
    url: &str,
    key: &str,
) -> Result<(SocketAddr, String, String, Option<ServerName<'static>>), InputError> {
    let bad = |problem: String| InputError::new(key, problem);
    let uri: Uri = url.parse().map_err(|e| bad(format!("{url:?} is not a URL ({e})")))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        Some(other) => return Err(bad(format!("unsupported scheme {other:?}; expected http or https"))),
        None => return Err(bad(format!("{url:?} has no scheme; write http://host:port/path"))),
    };
    let authority = uri.authority().ok_or_else(|| bad(format!("{url:?} has no host")))?;
    let host = authority.host();
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let server_name = match https {
        true => Some(
            ServerName::try_from(bare.to_string())
                .map_err(|e| bad(format!("{host} is not a valid TLS server name ({e})")))?,
        ),
        false => None,
    };
    let addr = (bare, port)
        .to_socket_addrs()
        .map_err(|e| bad(format!("cannot resolve {host}: {e}")))?
        .next()
        .ok_or_else(|| bad(format!("{host} resolves to no address")))?;
    let path = uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    Ok((addr, authority.as_str().to_string(), path, server_name))
}

/// TLS settings of an https URL: `--insecure`, or `--cacert` roots (read here, so a bad
/// file is reported against the flag before anything runs), or the Mozilla roots.
pub(super) fn tls_plan(server_name: ServerName<'static>, spec: &TlsSpec) -> Result<TlsPlan, InputError> {
    let verify = match (&spec.cacert, spec.insecure) {
        (_, true) => Verify::Insecure,
        (None, false) => Verify::WebPki,
        (Some(path), false) => {
            let bad = |problem: String| InputError::new("--cacert", problem);
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| bad(format!("cannot read PEM certificates from {}: {e}", path.display())))?;
            if certs.is_empty() {
                return Err(bad(format!("{} holds no PEM certificate", path.display())));
            }
            Verify::Roots(certs)
        }
    };
    Ok(TlsPlan { server_name, verify })
}
