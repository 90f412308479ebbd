//! Outputs of a run: the `summary.json` contract ([`summary`]) and the terminal table
//! ([`text`]). Both read merged data; neither measures nor judges.

pub mod summary;
pub mod text;
