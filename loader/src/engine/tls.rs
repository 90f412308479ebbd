//! TLS for https targets: the client configuration every shard shares ([`TlsClient`]) and
//! the per-connection state the shard loop drives ([`Tls`]).
//!
//! rustls does no I/O here. The shard hands it ciphertext straight from the provided
//! receive buffers (`read_tls`), feeds the decrypted plaintext to the same HTTP/1 parser as
//! a plain connection, and sends what `write_tls` produces through its ordinary io_uring
//! `Send` — one send in flight per connection, from [`Tls::out`], which must not move or
//! change while that send is in the kernel.
//!
//! Session resumption is rustls' default: an in-memory session cache inside the shared
//! `ClientConfig` (TLS 1.3 tickets, TLS 1.2 session ids and tickets), so every shard's
//! connections to the same server resume from the same cache.
//!
//! This module does not decide what a failure means for a request (the shard does: a failed
//! handshake fails its request as `connect`) and does not count anything (the record does).

use std::sync::Arc;
use std::time::Instant;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// What every TLS connection of a run shares.
#[derive(Debug, Clone)]
pub struct TlsClient {
    /// rustls client configuration; its session cache is what resumption draws on.
    pub config: Arc<ClientConfig>,
    /// SNI and the name the certificate is checked against (an IP literal for IP URLs).
    pub server_name: ServerName<'static>,
}

/// How the server's certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verify {
    /// Against Mozilla's roots (webpki-roots).
    WebPki,
    /// Against these roots only (`--cacert`); the Mozilla roots are not used.
    Roots(Vec<CertificateDer<'static>>),
    /// Not at all (`--insecure`).
    Insecure,
}

/// The TLS client configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsSetupError {
    /// A `--cacert` certificate is not a usable trust anchor.
    #[error("certificate {0} of the CA file is not a usable root: {1}")]
    Root(usize, rustls::Error),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsClient {
    /// A client for `server_name`, verifying as `verify` says, resumption on.
    pub fn new(server_name: ServerName<'static>, verify: &Verify) -> Result<TlsClient, TlsSetupError> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(TlsSetupError::Config)?;
        let config = match verify {
            Verify::WebPki => {
                let roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            Verify::Roots(certs) => {
                let mut roots = RootCertStore::empty();
                for (i, cert) in certs.iter().enumerate() {
                    roots.add(cert.clone()).map_err(|e| TlsSetupError::Root(i + 1, e))?;
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            Verify::Insecure => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
                .with_no_client_auth(),
        };
        // `config.resumption` is left at rustls' default (in-memory cache, 256 servers,
        // TLS 1.2 session ids and tickets): one target host needs no more.
        Ok(TlsClient { config: Arc::new(config), server_name })
    }

    /// The same client offering `protocols` in ALPN (`h2` for an `--http2` run), with a
    /// session cache of its own.
    pub fn with_alpn(&self, protocols: &[&[u8]]) -> TlsClient {
        let mut config = (*self.config).clone();
        config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        TlsClient { config: Arc::new(config), server_name: self.server_name.clone() }
    }

    /// A fresh client session (its ClientHello is ready to be written).
    pub fn connect(&self) -> Result<ClientConnection, rustls::Error> {
        let mut session = ClientConnection::new(Arc::clone(&self.config), self.server_name.clone())?;
        // Requests are written whole; their size is bounded by the plan, not by rustls.
        session.set_buffer_limit(None);
        Ok(session)
    }
}

/// The TLS side of one connection.
#[derive(Debug)]
pub struct Tls {
    /// The rustls session of the current socket.
    pub session: ClientConnection,
    /// Encrypted bytes of the send in flight. Never touched while `sending`: the kernel
    /// reads from it.
    pub out: Vec<u8>,
    /// Bytes of `out` the kernel has taken so far.
    pub out_sent: usize,
    /// A send of `out` is in flight.
    pub sending: bool,
    /// The handshake has not finished yet.
    pub handshaking: bool,
    /// When the TCP connect completed (the handshake's start).
    pub handshake_started: Instant,
    /// Ciphertext bytes read from this socket so far (the probes' segment record counts the
    /// same bytes).
    pub received: u64,
    /// Where the records those bytes carry begin and end.
    pub records: Records,
    /// The socket offset where the record just fed to rustls ended, while the read that
    /// brought it agreed with the segment record: its answers arrived with that byte.
    pub record_end: Option<u64>,
}

/// Where TLS records begin and end in the byte stream, from their 5-byte headers (type,
/// version, length), so that rustls can be fed one record at a time and each answer's last
/// byte found on the wire: the plaintext a record yields exists only once its last byte did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Records {
    /// Bytes of the current record's body still to come (0: at a header).
    left: usize,
    /// The header read so far.
    header: [u8; 5],
    have: u8,
}

impl Records {
    /// How many of `avail`'s bytes reach at most the end of the current record (its header
    /// first, if one is due), taken as read.
    pub fn take(&mut self, avail: &[u8]) -> usize {
        let mut n = 0;
        if self.left == 0 {
            while usize::from(self.have) < self.header.len() && n < avail.len() {
                self.header[usize::from(self.have)] = avail[n];
                self.have += 1;
                n += 1;
            }
            if usize::from(self.have) < self.header.len() {
                return n;
            }
            self.have = 0;
            self.left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
            if self.left == 0 {
                return n;
            }
        }
        let body = (avail.len() - n).min(self.left);
        self.left -= body;
        n + body
    }

    /// The bytes taken so far end a record.
    pub fn at_end(&self) -> bool {
        self.left == 0 && self.have == 0
    }
}

impl Tls {
    /// State for a socket that just connected.
    pub fn new(session: ClientConnection) -> Box<Tls> {
        Box::new(Tls {
            session,
            out: Vec::with_capacity(4096),
            out_sent: 0,
            sending: false,
            handshaking: true,
            handshake_started: Instant::now(),
            received: 0,
            records: Records::default(),
            record_end: None,
        })
    }

    /// Reuse this state (and its buffer) for a new socket.
    pub fn restart(&mut self, session: ClientConnection) {
        self.session = session;
        self.out.clear();
        self.out_sent = 0;
        self.sending = false;
        self.handshaking = true;
        self.handshake_started = Instant::now();
        self.received = 0;
        self.records = Records::default();
        self.record_end = None;
    }

    /// Move everything rustls wants to send into `out`; false if there is nothing (or a
    /// send is still in flight). The caller submits `out` when this returns true.
    pub fn fill_out(&mut self) -> bool {
        if self.sending || !self.session.wants_write() {
            return false;
        }
        self.out.clear();
        self.out_sent = 0;
        while self.session.wants_write() {
            // Writing into a Vec cannot fail.
            if self.session.write_tls(&mut self.out).is_err() {
                break;
            }
        }
        self.sending = !self.out.is_empty();
        self.sending
    }
}

/// The handshake of `tls` began; for the kernel's uprobe (see [`loader_tls_handshake_start`]).
pub fn mark_handshake_start(tls: &Tls) {
    loader_tls_handshake_start(handshake_id(tls));
}

/// The handshake of `tls` ended with `outcome` (`probes_ebpf::tls_outcome`).
pub fn mark_handshake_end(tls: &Tls, outcome: u32) {
    loader_tls_handshake_end(handshake_id(tls), outcome);
}

/// A handshake's id for the probe: the address of its connection's TLS state, which lives
/// (boxed, never moved) as long as the connection slot and holds one handshake at a time.
fn handshake_id(tls: &Tls) -> u64 {
    std::ptr::from_ref(tls) as u64
}

/// Marker for the `tls_handshake_start` uprobe (`probes_ebpf::names::TLS_START_SYMBOL`):
/// does nothing but exist under this exact symbol and be called, C calling convention (the
/// probe reads `handshake` from the first argument register).
///
/// On x86-64 its body is a 5-byte NOP and `ret`, as a USDT probe site: Linux 6.18+ replaces a
/// uprobe on that NOP by a call into its uprobe trampoline after the first hit, which costs
/// far less than the int3 trap of an ordinary uprobe. Without a probe attached a call costs a
/// few ns.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn loader_tls_handshake_start(handshake: u64) {
    // `nopl 0x0(%rax,%rax,1)`, spelled as bytes: an assembler may shorten the encoding.
    core::arch::naked_asm!(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00", "ret")
}

/// Marker for the `tls_handshake_end` uprobe (`probes_ebpf::names::TLS_END_SYMBOL`); as
/// [`loader_tls_handshake_start`].
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn loader_tls_handshake_end(handshake: u64, outcome: u32) {
    core::arch::naked_asm!(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00", "ret")
}

/// Marker for the `tls_handshake_start` uprobe (other architectures: an ordinary function
/// the compiler may not inline or drop).
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn loader_tls_handshake_start(handshake: u64) {
    std::hint::black_box(handshake);
}

/// Marker for the `tls_handshake_end` uprobe (other architectures).
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn loader_tls_handshake_end(handshake: u64, outcome: u32) {
    std::hint::black_box((handshake, outcome));
}

/// `--insecure`: accepts any certificate and any handshake signature.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of bodies 3, 0 and 4 bytes, split at every possible pair of cut points: the
    /// chunks taken end exactly at each record's end, wherever the reads end.
    #[test]
    fn records_are_cut_at_their_ends_however_the_reads_split_them() {
        let stream: Vec<u8> =
            [&[23, 3, 3, 0, 3][..], &[1, 2, 3], &[23, 3, 3, 0, 0], &[23, 3, 3, 0, 4], &[4, 5, 6, 7]].concat();
        let ends = [8, 13, 22];
        for a in 0..=stream.len() {
            for b in a..=stream.len() {
                let mut records = Records::default();
                let mut at = 0;
                let mut seen = Vec::new();
                for read in [&stream[..a], &stream[a..b], &stream[b..]] {
                    let mut off = 0;
                    while off < read.len() {
                        let n = records.take(&read[off..]);
                        assert!(n > 0, "progress at {at}");
                        off += n;
                        at += n;
                        if records.at_end() {
                            seen.push(at);
                        }
                    }
                }
                assert_eq!(seen, ends, "reads cut at {a} and {b}");
            }
        }
    }

    #[test]
    fn every_verification_mode_builds_and_names_ip_literals() {
        let ip = ServerName::try_from("127.0.0.1").unwrap();
        assert!(matches!(ip, ServerName::IpAddress(_)));
        for verify in [Verify::WebPki, Verify::Insecure, Verify::Roots(Vec::new())] {
            let client = TlsClient::new(ServerName::try_from("localhost").unwrap(), &verify).unwrap();
            let session = client.connect().unwrap();
            assert!(session.is_handshaking() && session.wants_write(), "ClientHello is ready");
        }
    }

    #[test]
    fn fill_out_holds_one_send_at_a_time() {
        let client = TlsClient::new(ServerName::try_from("localhost").unwrap(), &Verify::Insecure).unwrap();
        let mut tls = Tls::new(client.connect().unwrap());
        assert!(tls.fill_out());
        let hello = tls.out.len();
        assert!(hello > 0);
        // While the send is in flight nothing more is written into `out`.
        assert!(!tls.fill_out());
        assert_eq!(tls.out.len(), hello);
    }
}
