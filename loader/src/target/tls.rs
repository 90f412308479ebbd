//! `loader target --tls`: the server side of HTTPS, for tests and demos.
//!
//! By default a fresh self-signed certificate (rcgen) for `localhost`, `127.0.0.1` and `::1`
//! is made at start-up; `--cert`/`--key` serve a given one instead, and `--write-cert FILE`
//! writes the served certificate out as PEM so that `loader run --cacert FILE` can verify it.
//! Session resumption is on: stateless tickets (TLS 1.3 and 1.2) plus rustls' session cache.
//!
//! It does not do client certificates, ALPN other than http/1.1, or certificate reloading.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::ServerSessionMemoryCache;

use crate::error::InputError;

/// Names the self-signed certificate is valid for.
const SELF_SIGNED_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
/// Server-side session cache entries (TLS 1.2 session ids).
const SESSION_CACHE: usize = 16 * 1024;

/// What `--tls` serves.
#[derive(Debug, Clone)]
pub struct TargetTls {
    /// rustls server configuration.
    pub config: Arc<ServerConfig>,
    /// The served certificate chain, PEM (for `--write-cert`).
    pub chain_pem: String,
    /// Write the chain here before listening.
    pub write_cert: Option<PathBuf>,
}

impl TargetTls {
    /// `--tls` with `--cert`/`--key` (both or neither) and `--write-cert`.
    pub fn from_flags(
        cert: Option<&Path>,
        key: Option<&Path>,
        write_cert: Option<&Path>,
    ) -> Result<TargetTls, InputError> {
        let (chain, key, chain_pem) = match (cert, key) {
            (Some(cert), Some(key)) => load(cert, key)?,
            (None, None) => self_signed()?,
            (Some(_), None) => return Err(InputError::new("--cert", "needs --key")),
            (None, Some(_)) => return Err(InputError::new("--key", "needs --cert")),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
            .map_err(|e| InputError::new(if cert.is_some() { "--cert" } else { "--tls" }, e.to_string()))?;
        config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| InputError::new("--tls", e.to_string()))?;
        config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TargetTls { config: Arc::new(config), chain_pem, write_cert: write_cert.map(Path::to_path_buf) })
    }

    /// Write the certificate chain to `--write-cert`'s file, if asked.
    pub fn write_out(&self) -> Result<(), InputError> {
        if let Some(path) = &self.write_cert {
            std::fs::write(path, &self.chain_pem)
                .map_err(|e| InputError::new("--write-cert", format!("cannot write {}: {e}", path.display())))?;
        }
        Ok(())
    }
}

type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, String);

fn self_signed() -> Result<Identity, InputError> {
    let names: Vec<String> = SELF_SIGNED_NAMES.iter().map(|s| s.to_string()).collect();
    let made = rcgen::generate_simple_self_signed(names)
        .map_err(|e| InputError::new("--tls", format!("cannot make a self-signed certificate: {e}")))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
    Ok((vec![made.cert.der().clone()], key, made.cert.pem()))
}

fn load(cert: &Path, key: &Path) -> Result<Identity, InputError> {
    let pem = std::fs::read_to_string(cert)
        .map_err(|e| InputError::new("--cert", format!("cannot read {}: {e}", cert.display())))?;
    let chain = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| InputError::new("--cert", format!("{}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(InputError::new("--cert", format!("{} holds no PEM certificate", cert.display())));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| InputError::new("--key", format!("cannot read a PEM private key from {}: {e}", key.display())))?;
    Ok((chain, key_der, pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_certificate_round_trips_through_cert_and_key_files() {
        let dir = std::env::temp_dir().join(format!("loader-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (_, key, pem) = self_signed().unwrap();
        let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_path, &pem).unwrap();
        let PrivateKeyDer::Pkcs8(k) = key else { panic!("pkcs8") };
        let key_pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, k.secret_pkcs8_der())
        );
        std::fs::write(&key_path, key_pem).unwrap();
        let tls = TargetTls::from_flags(Some(&cert_path), Some(&key_path), None).unwrap();
        assert_eq!(tls.chain_pem, pem);
        let err = TargetTls::from_flags(Some(&dir.join("missing.pem")), Some(&key_path), None).unwrap_err();
        assert!(err.to_string().starts_with("--cert:"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
