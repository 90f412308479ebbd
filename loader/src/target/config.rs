//! `loader target` settings: the flags as written ([`TargetArgs`]) → a validated
//! [`TargetConfig`]. Every error is one line naming the flag; nothing here touches a socket.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::tls::TargetTls;
use crate::cli::TargetArgs;
use crate::error::InputError;

/// A periodic stall: answer nothing for `pause`, once every `every`.
///
/// Windows are `[k·every, k·every + pause)` for k = 1, 2, … measured from the target's start;
/// `pause < every` always holds for a validated value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// Period of the stalls.
    pub every: Duration,
    /// Length of each stall.
    pub pause: Duration,
}

/// Resolved settings of the built-in target.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    /// Listen address (port 0 asks the kernel for a free port).
    pub listen: SocketAddr,
    /// Delay before each response (zero: answer at once).
    pub delay: Duration,
    /// At most this many requests in service at once; `None`: no limit.
    pub workers: Option<usize>,
    /// Periodic stall, if any.
    pub stall: Option<Stall>,
    /// Runtime threads (1: a single-threaded runtime on one OS thread).
    pub threads: usize,
    /// Serve HTTPS with this (`--tls`); `None`: plain HTTP.
    pub tls: Option<TargetTls>,
    /// Serve HTTP/2 as well as HTTP/1.1 (`--http2`).
    pub http2: bool,
    /// Answer as a gRPC unary service (`--grpc`, `--grpc-status`).
    pub grpc: Option<std::sync::Arc<super::grpc::GrpcReply>>,
    /// Serve as the calibration sink (`--sink`, `sink.rs`) instead.
    pub sink: bool,
}

impl TargetConfig {
    /// Validate `loader target` flags.
    pub fn from_args(args: &TargetArgs) -> Result<Self, InputError> {
        let workers = match args.workers {
            Some(0) => return Err(InputError::new("--workers", "must be at least 1, got 0")),
            Some(n) if n > Semaphore::MAX_PERMITS => {
                return Err(InputError::new(
                    "--workers",
                    format!("must be at most {}, got {n}", Semaphore::MAX_PERMITS),
                ));
            }
            other => other,
        };
        if args.threads == 0 {
            return Err(InputError::new("--threads", "must be at least 1, got 0"));
        }
        let tls = if args.tls {
            let mut tls = TargetTls::from_flags(args.cert.as_deref(), args.key.as_deref(), args.write_cert.as_deref())?;
            if args.http2 || args.grpc {
                let mut config = (*tls.config).clone();
                config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                tls.config = std::sync::Arc::new(config);
            }
            Some(tls)
        } else {
            let given = [
                ("--cert", args.cert.is_some()),
                ("--key", args.key.is_some()),
                ("--write-cert", args.write_cert.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, on)| *on) {
                return Err(InputError::new(*flag, "needs --tls"));
            }
            None
        };
        Ok(TargetConfig {
            listen: parse_listen(&args.listen)?,
            delay: match &args.delay {
                Some(text) => parse_delay(text)?,
                None => Duration::ZERO,
            },
            workers,
            stall: args.stall.as_deref().map(parse_stall).transpose()?,
            threads: args.threads,
            tls,
            http2: args.http2 || args.grpc,
            grpc: if args.grpc {
                Some(std::sync::Arc::new(super::grpc::GrpcReply::parse(args.grpc_status.as_deref())?))
            } else {
                None
            },
            sink: args.sink,
        })
    }
}

/// `IP:PORT`, or `HOST:PORT` resolved once (first address wins).
fn parse_listen(text: &str) -> Result<SocketAddr, InputError> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let bad = || InputError::new("--listen", format!("expected IP:PORT like 127.0.0.1:8080, got {text:?}"));
    // Only try name resolution on something shaped like HOST:PORT, so a typo such as
    // `8080` gets the plain "expected IP:PORT" message instead of a resolver error.
    let (_, port) = text.rsplit_once(':').ok_or_else(bad)?;
    port.parse::<u16>().map_err(|_| bad())?;
    let mut addrs =
        text.to_socket_addrs().map_err(|e| InputError::new("--listen", format!("cannot resolve {text:?}: {e}")))?;
    addrs.next().ok_or_else(|| InputError::new("--listen", format!("{text:?} resolves to no address")))
}

fn parse_delay(text: &str) -> Result<Duration, InputError> {
    humantime::parse_duration(text.trim())
        .map_err(|_| InputError::new("--delay", format!("expected a duration like 10ms, got {text:?}")))
}

fn parse_stall(text: &str) -> Result<Stall, InputError> {
    let bad = || InputError::new("--stall", format!("expected EVERY:FOR like 10s:1s, got {text:?}"));
    let (every, pause) = text.split_once(':').ok_or_else(bad)?;
    let every = humantime::parse_duration(every.trim()).map_err(|_| bad())?;
    let pause = humantime::parse_duration(pause.trim()).map_err(|_| bad())?;
    if pause.is_zero() {
        return Err(InputError::new("--stall", format!("FOR must be more than zero, got {text:?}")));
    }
    if pause >= every {
        return Err(InputError::new(
            "--stall",
            format!(
                "FOR ({}) must be shorter than EVERY ({}), got {text:?}",
                humantime::format_duration(pause),
                humantime::format_duration(every)
            ),
        ));
    }
    Ok(Stall { every, pause })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> TargetArgs {
        TargetArgs {
            listen: "127.0.0.1:0".into(),
            delay: None,
            workers: None,
            stall: None,
            threads: 1,
            tls: false,
            cert: None,
            key: None,
            write_cert: None,
            http2: false,
            grpc: false,
            grpc_status: None,
            sink: false,
        }
    }

    fn err(a: TargetArgs) -> String {
        TargetConfig::from_args(&a).unwrap_err().to_string()
    }

    #[test]
    fn defaults_answer_at_once_without_limits() {
        let cfg = TargetConfig::from_args(&args()).unwrap();
        assert_eq!(cfg.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(cfg.delay, Duration::ZERO);
        assert_eq!(cfg.workers, None);
        assert_eq!(cfg.stall, None);
        assert_eq!(cfg.threads, 1);
    }

    #[test]
    fn all_flags_resolve() {
        let cfg = TargetConfig::from_args(&TargetArgs {
            listen: "[::1]:8080".into(),
            delay: Some("50ms".into()),
            workers: Some(4),
            stall: Some("10s:1s".into()),
            threads: 2,
            ..args()
        })
        .unwrap();
        assert_eq!(cfg.listen, "[::1]:8080".parse().unwrap());
        assert_eq!(cfg.delay, Duration::from_millis(50));
        assert_eq!(cfg.workers, Some(4));
        assert_eq!(cfg.stall, Some(Stall { every: Duration::from_secs(10), pause: Duration::from_secs(1) }));
        assert_eq!(cfg.threads, 2);
        assert!(cfg.tls.is_none());
    }

    #[test]
    fn tls_flags_need_tls() {
        for (args, flag) in [
            (TargetArgs { cert: Some("c.pem".into()), key: Some("k.pem".into()), ..args() }, "--cert"),
            (TargetArgs { write_cert: Some("c.pem".into()), ..args() }, "--write-cert"),
        ] {
            let e = err(args);
            assert_eq!(e, format!("{flag}: needs --tls"));
        }
        let cfg = TargetConfig::from_args(&TargetArgs { tls: true, ..args() }).unwrap();
        assert!(cfg.tls.is_some_and(|t| t.chain_pem.starts_with("-----BEGIN CERTIFICATE-----")));
    }

    #[test]
    fn listen_accepts_a_host_name() {
        let cfg = TargetConfig::from_args(&TargetArgs { listen: "localhost:0".into(), ..args() });
        assert!(cfg.unwrap().listen.ip().is_loopback());
    }

    #[test]
    fn bad_listen_names_the_flag() {
        for text in ["8080", "abc", "127.0.0.1:99999", ""] {
            let e = err(TargetArgs { listen: text.into(), ..args() });
            assert!(e.starts_with("--listen: expected IP:PORT"), "{text:?} → {e}");
        }
    }

    #[test]
    fn bad_delay_names_the_flag() {
        let e = err(TargetArgs { delay: Some("abc".into()), ..args() });
        assert_eq!(e, r#"--delay: expected a duration like 10ms, got "abc""#);
    }

    #[test]
    fn zero_delay_is_allowed() {
        let cfg = TargetConfig::from_args(&TargetArgs { delay: Some("0s".into()), ..args() });
        assert_eq!(cfg.unwrap().delay, Duration::ZERO);
    }

    #[test]
    fn bad_stall_shapes_name_the_flag() {
        for text in ["abc", "10s", "10s:", ":1s", "10s:x", "1s:2s:3s"] {
            let e = err(TargetArgs { stall: Some(text.into()), ..args() });
            assert_eq!(e, format!("--stall: expected EVERY:FOR like 10s:1s, got {text:?}"));
        }
    }

    #[test]
    fn stall_for_must_be_shorter_than_every() {
        let e = err(TargetArgs { stall: Some("1s:1s".into()), ..args() });
        assert_eq!(e, r#"--stall: FOR (1s) must be shorter than EVERY (1s), got "1s:1s""#);
        let e = err(TargetArgs { stall: Some("1s:2s".into()), ..args() });
        assert!(e.starts_with("--stall: FOR (2s) must be shorter than EVERY (1s)"), "{e}");
        let e = err(TargetArgs { stall: Some("10s:0s".into()), ..args() });
        assert!(e.starts_with("--stall: FOR must be more than zero"), "{e}");
    }

    #[test]
    fn zero_workers_and_threads_are_rejected() {
        assert_eq!(err(TargetArgs { workers: Some(0), ..args() }), "--workers: must be at least 1, got 0");
        assert_eq!(err(TargetArgs { threads: 0, ..args() }), "--threads: must be at least 1, got 0");
        let e = err(TargetArgs { workers: Some(usize::MAX), ..args() });
        assert!(e.starts_with("--workers: must be at most"), "{e}");
    }
}
