//! gRPC outcomes: the status codes of the answers (`grpc-status`), counted per phase.

use std::borrow::Cow;

use super::{ErrorClass, ShardRecord};

/// Status codes 0 (OK) to 16 (UNAUTHENTICATED); an unknown code counts as UNKNOWN (2), as
/// gRPC's clients read it.
pub const GRPC_CODES: usize = 17;

/// The canonical name of a status code.
pub fn code_name(code: usize) -> &'static str {
    const NAMES: [&str; GRPC_CODES] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(code).copied().unwrap_or("UNKNOWN")
}

impl ShardRecord {
    /// A gRPC answer with status `code` completed at `done_ns`: recorded like an HTTP
    /// response (latency, service time), ok when the code is OK, else the `grpc` error class
    /// with the code and the server's message in the detail, its ids and numbers taken out
    /// ([`super::errors::normalise`]) so that one cause is one line.
    pub fn on_grpc(&mut self, phase: usize, intended_ns: u64, sent_ns: u64, done_ns: u64, code: u32, message: &str) {
        let code = if (code as usize) < GRPC_CODES { code as usize } else { 2 };
        self.phases[phase].grpc[code] += 1;
        let class = (code != 0).then_some(ErrorClass::Grpc);
        self.on_answer(phase, intended_ns, sent_ns, done_ns, class, || {
            if message.is_empty() {
                Cow::Borrowed(code_name(code))
            } else {
                let message: String = message.chars().take(120).collect();
                Cow::Owned(format!("{}: {}", code_name(code), super::errors::normalise(&message)))
            }
        });
    }
}
