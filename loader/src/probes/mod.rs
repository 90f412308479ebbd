//! eBPF probes on the loader's own process. (Placeholder: being written.)

use std::collections::BTreeMap;

/// Loaded and attached probes; dropping detaches them.
#[derive(Debug)]
pub struct Probes {}

impl Probes {
    /// Load and attach the probes, filtered to process `tgid`.
    pub fn start(_tgid: u32) -> anyhow::Result<Probes> {
        anyhow::bail!("probes not yet built")
    }

    /// TCP state transitions of the loader's sockets, `"OLD->NEW" → count`.
    pub fn tcp_states(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        Ok(BTreeMap::new())
    }
}
