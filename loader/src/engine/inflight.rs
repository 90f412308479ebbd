//! The request a connection carries: when it was due, sent and taken, its deadline, and where
//! it stood in the instant-reading pool. The HTTP/1.1 connections (`conn.rs`) and the HTTP/2
//! streams (`http2/wire/`) carry the same record.

/// The request a connection carries.
#[derive(Debug, Clone, Copy)]
pub struct InFlight {
    /// Phase the request belongs to.
    pub phase: usize,
    /// Which entry of the request table it is.
    pub request: u32,
    /// When it should have been sent (ns since run start).
    pub intended_ns: u64,
    /// When it was handed to the kernel (ns since run start); until then, when the shard
    /// took it from the schedule.
    pub sent_ns: u64,
    /// Its deadline: intended time + the client timeout. Not answered by then, it is a
    /// timeout (or, never sent, dropped), recorded at exactly this instant.
    pub deadline_ns: u64,
    /// Bytes of the request already written.
    pub written: usize,
    /// It was already retried once after a stale keep-alive connection.
    pub retried: bool,
    /// When the shard took it from the schedule, the pool had been exhausted since its
    /// intended time: its lateness up to then is the pool's, not the loader's.
    pub waited: bool,
    /// When it would have left had the loader read every answer the instant the kernel
    /// stamped it and sent at once (ns since run start): its intended time, or, when it
    /// waited for a connection, the moment a connection came free in that instant-reading
    /// pool (see `Conn::free_since_ns`). Its lag up to this is the target's (the pool was
    /// busy with answers the kernel had not received); past it, the loader's.
    pub free_ns: u64,
    /// When the shard took it from the schedule (`sent_ns` is that until it is sent).
    pub taken_ns: u64,
}
