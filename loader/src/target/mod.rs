//! The built-in target: any request → 200 with a small fixed JSON body, keep-alive.
//! (Placeholder: being written.)

use std::net::SocketAddr;
use std::time::Duration;

use crate::cli::TargetArgs;
use crate::error::InputError;

/// A periodic stall: answer nothing for `pause`, once every `every`.
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
    /// Listen address.
    pub listen: SocketAddr,
    /// Delay before each response.
    pub delay: Duration,
    /// At most this many requests in service at once.
    pub workers: Option<usize>,
    /// Periodic stall.
    pub stall: Option<Stall>,
    /// Runtime threads.
    pub threads: usize,
}

impl TargetConfig {
    /// Validate `loader target` flags.
    pub fn from_args(_args: &TargetArgs) -> Result<Self, InputError> {
        Err(InputError::new("target", "not yet built"))
    }
}

/// A target running inside this process.
#[derive(Debug)]
pub struct TargetHandle {
    /// Where it listens.
    pub addr: SocketAddr,
}

impl TargetHandle {
    /// Stop serving and join its threads.
    pub fn stop(self) {}
}

/// Start the target on its own threads inside this process.
pub fn spawn(_cfg: TargetConfig) -> anyhow::Result<TargetHandle> {
    anyhow::bail!("built-in target not yet built")
}

/// Serve until SIGINT/SIGTERM (the `loader target` command).
pub fn serve(_cfg: TargetConfig) -> anyhow::Result<()> {
    anyhow::bail!("built-in target not yet built")
}
