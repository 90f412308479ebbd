//! Outputs of a run: the `summary.json` contract ([`summary`]), the HDR interval log
//! ([`hdr`]) and the terminal table ([`text`]). Both read merged data; neither measures nor judges.

pub mod hdr;
pub mod summary;
pub mod text;
