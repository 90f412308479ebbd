//! One kind of request of a run's mix, as given (validated by `spec.rs`, encoded by
//! `plan.rs`, filled from data rows by `data.rs`).

/// One kind of request to send; a run mixes them by weight.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpec {
    /// Name in reports (`GET /` when not given).
    pub name: String,
    /// Path and query; `None` = the target URL's.
    pub path: Option<String>,
    /// Share of the mix, relative to the other requests' weights (≥ 1).
    pub weight: u32,
    /// HTTP method, upper case.
    pub method: String,
    /// Extra headers in order.
    pub headers: Vec<(String, String)>,
    /// Body, if any.
    pub body: Option<Vec<u8>>,
}
