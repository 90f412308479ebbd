//! HTTP/2 (`--http2`): the same schedule, record, deadlines and accounting as the HTTP/1.1
//! shards, with requests multiplexed as streams over each shard's connections.
//!
//! One engine, on the io_uring shards (`engine/shard/h2.rs`): h2c (`http://`, prior
//! knowledge) writes the frames of [`wire`] straight to the socket; HTTP/2 over TLS
//! (`https://`, ALPN `h2`) passes the same frames through the shard's rustls session
//! (`engine/shard/tls.rs`), as HTTPS HTTP/1.1 does. HPACK decoding is [`hpack`]'s. No runtime
//! stands between the schedule and the socket. What the shard adds around the frames:
//!
//! - **Streams as the pool.** A connection takes at most `min(--max-streams, the server's
//!   SETTINGS_MAX_CONCURRENT_STREAMS)` requests at once; a due request with no stream free
//!   waits at the head of the schedule (its latency counting from the intended time), and
//!   is attributed to the pool exactly as a wait for an HTTP/1.1 connection is.
//! - **Sleeping through answers.** With a send coming, a stream free and no connection
//!   carrying two streams, the shard sleeps and reads the answers when it wakes; each stream
//!   ends at the kernel's receive stamp of the read that carried it. With the probes on, each
//!   connection's segments are followed, so answers sharing a connection keep their own
//!   arrival too (`engine/shard/stamps.rs`; over TLS by the record each answer ended in);
//!   without them a connection carrying two streams or more is read as its answers come.
//! - **GOAWAY and REFUSED_STREAM.** A request the server says it did not process (a stream
//!   above a graceful GOAWAY's last stream id, or reset with REFUSED_STREAM) is sent again on
//!   another connection before its deadline — never counted twice; the connection that went
//!   away is replaced. Other resets are `stream_reset`, connection errors `connection_error`,
//!   both with the HTTP/2 error code in the detail.
//! - **One deadline per request** (intended time + timeout): not sent by then it is
//!   `dropped`, not answered by then `timeout` (its stream reset with CANCEL), recorded at
//!   exactly the deadline. A stopped run records what was in flight as `aborted` and what
//!   was not yet due as `unsent`, so `planned = ok + Σ errors` holds here too.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | what every HTTP/2 shard of a run shares |
//! | `hpack.rs` | HPACK: the request blocks encoded once, the answers' blocks decoded |
//! | `requests.rs` | the request table in HTTP/2 form |
//! | `wire/` | one connection's HTTP/2 without I/O: frames out (`mod.rs`), frames in (`read.rs`) |

pub(crate) mod hpack;
mod requests;
pub(crate) mod wire;

pub use wire::outcome_of_wire;

pub use requests::Http2Requests;

/// Default of `--max-streams`: requests in flight per connection.
pub const DEFAULT_MAX_STREAMS: u32 = 100;
/// Highest `--max-streams` accepted.
pub const MAX_MAX_STREAMS: u32 = 10_000;

/// What every HTTP/2 shard of a run shares.
#[derive(Debug)]
pub struct Http2 {
    /// The request table in HTTP/2 form.
    pub requests: Http2Requests,
    /// Streams in flight per connection at most (`--max-streams`), lowered to the server's
    /// SETTINGS_MAX_CONCURRENT_STREAMS when that is lower.
    pub max_streams: u32,
    /// The requests are gRPC calls: `grpc-status` decides each outcome.
    pub grpc: bool,
}
