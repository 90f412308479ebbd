//! `docs/scenario.md`'s key tables, made from the rows of [`super::options`].
//!
//! Each section's table sits in the page between `<!-- keys: SECTION -->` and
//! `<!-- end keys -->`; the prose around it is written by hand. `tests/house.rs` fails when a
//! table in the page differs from the one the rows make; run it with `LOADER_WRITE_DOCS=1`
//! to write the tables into the page instead:
//!
//! ```text
//! LOADER_WRITE_DOCS=1 cargo test -p loader-tests --test house key_tables
//! ```

use super::options::KEYS;

/// The header and separator lines of every key table.
const HEADER: &str = "| key | type | default | flag | meaning |\n|---|---|---|---|---|\n";

/// The sections that have keys, in the order of the rows.
fn sections() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for k in KEYS {
        if !out.contains(&k.section) {
            out.push(k.section);
        }
    }
    out
}

/// The Markdown table of `section`'s keys: key, type, default, the flags that set it, and
/// its meaning (the key's doc comment, or its flag's help).
fn key_table(section: &str) -> String {
    let mut out = HEADER.to_string();
    for k in KEYS.iter().filter(|k| k.section == section) {
        let flags = if k.flags.is_empty() {
            "—".to_string()
        } else {
            k.flags.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(" / ")
        };
        let meaning = if k.doc.trim().is_empty() { k.help.first().copied().unwrap_or("") } else { k.doc };
        out.push_str(&format!("| `{}` | {} | {} | {flags} | {} |\n", k.key, k.ty, k.default, one_line(meaning)));
    }
    out
}

/// A doc comment as one table cell: its lines joined, `|` escaped.
fn one_line(doc: &str) -> String {
    doc.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

/// `page` (`docs/scenario.md`) with each section's key table replaced by the one
/// `scenario/options.rs` makes; an error names a section whose markers are missing.
pub fn with_key_tables(page: &str) -> Result<String, String> {
    let mut out = page.to_string();
    for section in sections() {
        let begin = format!("<!-- keys: {section} -->\n");
        let start = out.find(&begin).ok_or_else(|| format!("no `{}` marker", begin.trim()))? + begin.len();
        let end = out[start..].find("<!-- end keys -->").ok_or_else(|| format!("`{section}` table has no end"))?;
        out.replace_range(start..start + end, &key_table(section));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_names_each_key_its_flags_and_its_meaning() {
        let target = key_table("target");
        assert!(target.starts_with(HEADER));
        assert!(target.contains("| `connections` | integer 1–1 000 000 | 64 | `--connections` | Keep-alive"));
        assert!(target.contains("| `http2` | bool | `false` | `--http2` / `--http1` | HTTP/2: h2c"));
        let profile = key_table("profile");
        assert!(profile.contains("| `ramp_down` | duration | = `ramp` | — | Spike: the ramp"));
        assert!(profile.contains("constant \\| step"), "a `|` in a help text is escaped: {profile}");
        assert!(with_key_tables("no markers").unwrap_err().contains("<!-- keys: target -->"));
    }
}
