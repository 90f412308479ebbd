//! Each reason code's entry in docs/verdict.md's table ("Verdict reasons"), compiled into the
//! binary: when it invalidates, its limit, its evidence and what to do. The page is the one
//! source; report.html shows a reason's entry beside it and `loader verdict DIR --all` its
//! "what to do", so the long explanations stay out of the glance and are never out of reach.
//!
//! Owns: reading the table. Does not: judge (the rules), or render (report).

/// The page, as the repository has it.
const PAGE: &str = include_str!("../../../docs/verdict.md");

/// Where an entry lives: the page and the anchor its row carries (`#reason-CODE`).
pub const DOC: &str = "docs/verdict.md";

/// One row of the table, its cells as Markdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The reason's stable code.
    pub code: &'static str,
    /// `loader`, `network` or `target`.
    pub side: &'static str,
    /// When it invalidates the run.
    pub invalidates: &'static str,
    /// Its default limit.
    pub limit: &'static str,
    /// What it is measured from.
    pub evidence: &'static str,
    /// What to do about it.
    pub action: &'static str,
}

impl Entry {
    /// `docs/verdict.md#reason-CODE`.
    pub fn link(&self) -> String {
        format!("{DOC}#{}", anchor(self.code))
    }
}

/// The anchor of `code`'s row.
pub fn anchor(code: &str) -> String {
    format!("reason-{code}")
}

/// `code`'s entry, `None` for a code the page does not have (a newer summary's).
pub fn entry(code: &str) -> Option<Entry> {
    all().into_iter().find(|e| e.code == code)
}

/// Every row of the table, in its order.
pub fn all() -> Vec<Entry> {
    PAGE.lines().filter_map(row).collect()
}

/// A row `| <a id="reason-CODE"></a>`CODE` | side | … |` of six cells (pipes inside
/// backticks are text).
fn row(line: &'static str) -> Option<Entry> {
    let rest = line.strip_prefix("| ")?;
    let rest = rest.strip_prefix("<a id=\"").and_then(|r| Some(&r[r.find("\"></a>")? + 6..])).unwrap_or(rest);
    let mut cells = Vec::new();
    let (mut start, mut tick) = (0, false);
    let body = rest.strip_suffix(" |")?;
    for (i, c) in body.char_indices() {
        match c {
            '`' => tick = !tick,
            '|' if !tick => {
                cells.push(body[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    cells.push(body[start..].trim());
    let [code, side, invalidates, limit, evidence, action] = cells[..] else { return None };
    let code = code.strip_prefix('`')?.strip_suffix('`')?;
    if code.is_empty() || !code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
        return None;
    }
    Some(Entry { code, side, invalidates, limit, evidence, action })
}

/// `text` without its Markdown: backticks and bold marks dropped, links reduced to their text.
pub fn plain(text: &str) -> String {
    unlinked(text).replace('`', "").replace("**", "")
}

/// `text` with its Markdown links reduced to their text.
pub fn unlinked(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('[') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.find("](").and_then(|j| after[j..].find(')').map(|k| (j, j + k))) {
            Some((j, end)) => {
                out.push_str(&after[..j]);
                rest = &after[end + 1..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_of_the_table_has_six_cells_and_a_code() {
        let rows = all();
        assert!(rows.len() >= 31, "{} rows", rows.len());
        let time_wait = entry("time_wait").unwrap();
        assert_eq!((time_wait.side, time_wait.invalidates), ("loader", "yes"));
        assert!(time_wait.action.contains("tcp_tw_reuse"), "{time_wait:?}");
        assert_eq!(time_wait.link(), "docs/verdict.md#reason-time_wait");
        let codes: std::collections::BTreeSet<&str> = rows.iter().map(|e| e.code).collect();
        assert_eq!(codes.len(), rows.len(), "a code twice");
        for e in &rows {
            assert!(["loader", "network", "target", "target (loader)"].contains(&e.side), "{e:?}");
            assert!(!e.action.is_empty() && !e.invalidates.is_empty(), "{e:?}");
        }
    }

    #[test]
    fn plain_drops_the_markdown() {
        assert_eq!(plain("see [calibration.md](calibration.md): `x` **y**"), "see calibration.md: x y");
        assert_eq!(plain("a [b"), "a [b");
    }
}
