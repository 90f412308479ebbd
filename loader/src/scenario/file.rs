//! Scenario files (TOML): read, type-check, and turn into a [`Raw`] whose every value knows
//! its `path:line:column` and dotted key.
//!
//! Types and unknown keys are checked here (serde with `deny_unknown_fields`, every leaf
//! wrapped in [`toml::Spanned`]); what the values *mean* is checked in [`super::spec`], which
//! reports against the positions kept here. A TOML error is turned into one line: the
//! position, the key at fault (found by walking the document to the error's span), and
//! toml's own description. The schema is documented in `docs/scenario.md`.

use std::fmt;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::input::{Given, Origin};
use super::options::{
    CapacityTable, DataTable, GrpcTable, OutputTable, ProfileTable, SloTable, TargetTable, VerdictTable,
};
use super::raw::{Raw, RawRequest, RawWatch};
use crate::error::InputError;

/// Largest scenario file read (a guard against pointing at the wrong file).
const MAX_FILE_BYTES: u64 = 1 << 20;

type S<T> = Option<Spanned<T>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    target: S<TargetTable>,
    #[serde(default)]
    request: Vec<Spanned<RequestTable>>,
    profile: S<ProfileTable>,
    slo: S<SloTable>,
    verdict: S<VerdictTable>,
    capacity: S<CapacityTable>,
    output: S<OutputTable>,
    data: S<DataTable>,
    grpc: S<GrpcTable>,
    #[serde(default)]
    watch: Vec<Spanned<WatchTable>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchTable {
    name: S<String>,
    source: S<String>,
    metric: S<String>,
    rate: S<bool>,
    limit: S<f64>,
    idle: S<bool>,
    #[serde(rename = "self")]
    scrape_self: S<f64>,
    strict: S<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestTable {
    name: S<String>,
    method: S<String>,
    path: S<String>,
    headers: S<Headers>,
    body: S<String>,
    weight: S<i64>,
}

/// Request headers: a table (`{ Accept = "text/html" }`) or a list (`["Accept: text/html"]`).
struct Headers(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Headers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Headers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of header = \"value\" or a list of \"Name: value\" strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Headers, A::Error> {
                let mut out = Vec::new();
                while let Some((name, value)) = map.next_entry::<String, String>()? {
                    out.push((name, value));
                }
                Ok(Headers(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Headers, A::Error> {
                let mut out = Vec::new();
                while let Some(line) = seq.next_element::<String>()? {
                    let (name, value) = line
                        .split_once(':')
                        .ok_or_else(|| de::Error::custom(format!("expected \"Name: value\", got {line:?}")))?;
                    out.push((name.trim().to_string(), value.trim().to_string()));
                }
                Ok(Headers(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// Positions in one file: byte offsets to `path:line:column` (1-based, columns in chars).
struct Source<'a> {
    path: String,
    text: &'a str,
}

impl Source<'_> {
    fn at(&self, offset: usize) -> String {
        let offset = offset.min(self.text.len());
        // Step back to a char boundary so slicing cannot panic on odd spans.
        let offset = (0..=offset).rev().find(|&i| self.text.is_char_boundary(i)).unwrap_or(0);
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        format!("{}:{line}:{column}", self.path)
    }

    fn given<T>(&self, key: impl Into<String>, v: Spanned<T>) -> Given<T> {
        let origin = Origin::File { at: self.at(v.span().start), key: key.into() };
        Given { value: v.into_inner(), origin }
    }
}

/// Read and type-check the scenario file at `path`.
pub(crate) fn load(path: &Path) -> Result<Raw, InputError> {
    let name = path.display().to_string();
    let fail = |problem: String| InputError::new(name.clone(), problem);
    let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read the scenario file: {e}")))?;
    if meta.is_dir() {
        return Err(fail("is a directory, not a scenario file".into()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(fail(format!("is {} bytes; a scenario file is at most {MAX_FILE_BYTES}", meta.len())));
    }
    let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read the scenario file: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let prefix = std::str::from_utf8(&e.as_bytes()[..valid]).unwrap_or_default();
        InputError::new(Source { path: name.clone(), text: prefix }.at(valid), "the file is not UTF-8 text")
    })?;
    parse(&name, &text)
}

/// Type-check scenario text (`name` is used in positions).
pub(crate) fn parse(name: &str, text: &str) -> Result<Raw, InputError> {
    let src = Source { path: name.to_string(), text };
    let doc: Doc = toml::from_str(text).map_err(|e| toml_error(&src, &e))?;
    Ok(to_raw(&src, doc))
}

/// One line for a TOML error: position, key at fault, toml's description.
fn toml_error(src: &Source<'_>, e: &toml::de::Error) -> InputError {
    let message = e.message().trim().replace('\n', "; ");
    let Some(span) = e.span() else {
        return InputError::new(src.at(0), message);
    };
    let at = src.at(span.start);
    match key_at(src.text, &span) {
        Some(key) => InputError::new(format!("{at}: {key}"), message),
        None => InputError::new(at, message),
    }
}

/// The dotted key whose key or value holds `span` (innermost), if the text parses.
///
/// The search visits the whole tree: the span toml gives a `[section]` table covers only
/// its header, not the keys below it.
fn key_at(text: &str, span: &Range<usize>) -> Option<String> {
    let doc = DeTable::parse(text).ok()?;
    let mut path = Vec::new();
    find_in_table(doc.get_ref(), span.start, &mut path).then(|| path.concat())
}

fn find_in_table(table: &DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    for (key, value) in table {
        let sep = if path.is_empty() { "" } else { "." };
        path.push(format!("{sep}{}", key.get_ref()));
        if find_in_value(value.get_ref(), offset, path)
            || key.span().contains(&offset)
            || value.span().contains(&offset)
        {
            return true;
        }
        path.pop();
    }
    false
}

/// Whether something *inside* `value` (a table's key, an array's item) holds `offset`.
fn find_in_value(value: &DeValue<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    match value {
        DeValue::Table(t) => find_in_table(t, offset, path),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(format!("[{}]", i + 1));
                if find_in_value(item.get_ref(), offset, path) || item.span().contains(&offset) {
                    return true;
                }
                path.pop();
            }
            false
        }
        _ => false,
    }
}

fn to_raw(src: &Source<'_>, doc: Doc) -> Raw {
    let mut raw = Raw { file: Some(src.path.clone().into()), ..Default::default() };
    let at = |offset: usize| src.at(offset);
    // Each section: where it starts (for "required" errors), then its keys by the rows of
    // `options.rs`.
    macro_rules! sections {
        ($($name:ident),*) => {$(
            if let Some(t) = doc.$name {
                raw.sections.push((stringify!($name), src.at(t.span().start)));
                raw.$name = t.into_inner().into_raw(&at);
            }
        )*};
    }
    sections!(target, profile, slo, verdict, capacity, output, data, grpc);
    for (i, entry) in doc.request.into_iter().enumerate() {
        let at = Origin::File { at: src.at(entry.span().start), key: format!("request[{}]", i + 1) };
        let r = entry.into_inner();
        let key = |k: &str| format!("request[{}].{k}", i + 1);
        let headers = r.headers.map(|h| {
            let span = h.span();
            src.given(key("headers"), Spanned::new(span, h.into_inner().0))
        });
        raw.requests.push(RawRequest {
            at: Some(at),
            name: r.name.map(|v| src.given(key("name"), v)),
            method: r.method.map(|v| src.given(key("method"), v)),
            path: r.path.map(|v| src.given(key("path"), v)),
            headers,
            body: r.body.map(|v| src.given(key("body"), v)),
            weight: r.weight.map(|v| src.given(key("weight"), v)),
        });
    }
    for (i, entry) in doc.watch.into_iter().enumerate() {
        let at = Origin::File { at: src.at(entry.span().start), key: format!("watch[{}]", i + 1) };
        let (w, key) = (entry.into_inner(), |k: &str| format!("watch[{}].{k}", i + 1));
        raw.watch.push(RawWatch {
            at,
            name: w.name.map(|v| src.given(key("name"), v)),
            source: w.source.map(|v| src.given(key("source"), v)),
            metric: w.metric.map(|v| src.given(key("metric"), v)),
            rate: w.rate.map(|v| src.given(key("rate"), v)),
            limit: w.limit.map(|v| src.given(key("limit"), v)),
            idle: w.idle.map(|v| src.given(key("idle"), v)),
            scrape_self: w.scrape_self.map(|v| src.given(key("self"), v)),
            strict: w.strict.map(|v| src.given(key("strict"), v)),
        });
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::input::FractionText;

    fn err(text: &str) -> String {
        parse("s.toml", text).unwrap_err().to_string()
    }

    #[test]
    fn values_keep_their_position_and_key() {
        let raw = parse(
            "s.toml",
            "[profile]\nkind = \"step\"\nhold = \"20s\"\n\n[[request]]\npath = \"/a\"\n[[request]]\nweight = 3\n",
        )
        .unwrap();
        let hold = raw.profile.hold.unwrap();
        assert_eq!(hold.value, "20s");
        assert_eq!(hold.err("x").to_string(), "s.toml:3:8: profile.hold: x");
        assert_eq!(raw.requests[1].weight.as_ref().unwrap().err("x").to_string(), "s.toml:8:10: request[2].weight: x");
        assert_eq!(raw.sections, vec![("profile", "s.toml:1:1".to_string())]);
    }

    #[test]
    fn headers_as_table_or_list() {
        let raw = parse("s.toml", "[[request]]\nheaders = { Accept = \"a\", X-B = \"b\" }\n[[request]]\nheaders = [\"Accept: a\", \"X-B:b\"]\n").unwrap();
        let want = vec![("Accept".to_string(), "a".to_string()), ("X-B".to_string(), "b".to_string())];
        assert_eq!(raw.requests[0].headers.as_ref().unwrap().value, want);
        assert_eq!(raw.requests[1].headers.as_ref().unwrap().value, want);
    }

    #[test]
    fn fractions_as_number_or_percent() {
        let raw = parse("s.toml", "[slo]\nerror_budget = \"1%\"\ngoodput_min = 0.97\nlate_max = 0\n").unwrap();
        assert_eq!(raw.slo.error_budget.unwrap().value, FractionText::Text("1%".into()));
        assert_eq!(raw.slo.goodput_min.unwrap().value, FractionText::Number(0.97));
        assert_eq!(raw.slo.late_max.unwrap().value, FractionText::Number(0.0));
    }

    #[test]
    fn toml_errors_are_one_line_with_position_and_key() {
        let cases = [
            ("[profile]\nhld = \"1s\"\n", "s.toml:2:1: profile.hld: unknown field `hld`"),
            ("[profil]\n", "s.toml:1:2: profil: unknown field `profil`"),
            (
                "[profile]\nhold = 20\n",
                "s.toml:2:8: profile.hold: invalid type: integer `20`, expected a duration string",
            ),
            ("[profile]\nrate = \"fast\"\n", "s.toml:2:8: profile.rate: invalid type: string \"fast\""),
            ("[target]\nconnections = 99999999999999999999\n", "s.toml:2:15"),
            ("[[request]]\nweight = 1\n[[request]]\nweight = \"x\"\n", "s.toml:4:10: request[2].weight: invalid type"),
            ("[[request]]\nheaders = [\"nocolon\"]\n", "s.toml:2:11: request[1].headers: expected \"Name: value\""),
            ("[profile]\nkind = \"step\"\nkind = \"ramp\"\n", "s.toml:3:1"),
            ("[profile]\nsteps = [100, \"x\"]\n", "s.toml:2:15: profile.steps[2]: invalid type"),
            ("[profile\n", "s.toml:1:9"),
            ("[slo]\np95 = \"200ms", "s.toml:2:13: invalid basic string"),
            ("profile = 3\n", "s.toml:1:11: profile: invalid type: integer `3`"),
            (
                "[slo]\nerror_budget = true\n",
                "s.toml:2:16: slo.error_budget: invalid type: boolean `true`, expected a fraction",
            ),
        ];
        for (text, want) in cases {
            let got = err(text);
            assert!(got.starts_with(want), "{text:?}\n got: {got}\nwant: {want}");
            assert!(!got.contains('\n'), "{got}");
        }
    }

    #[test]
    fn nothing_panics_on_garbage() {
        let base = "[target]\nurl = \"http://127.0.0.1:1/\"\n[profile]\nkind = \"step\"\nsteps = [1, 2]\nhold = \"1s\"\n[[request]]\nheaders = { A = \"é\" }\n";
        for cut in 0..=base.len() {
            if base.is_char_boundary(cut) {
                let _ = parse("s.toml", &base[..cut]);
            }
        }
        for junk in ["\u{0}", "[[", "a.b.c.d = 1", "[profile]\nsteps = [[[[1]]]]", "🦀 = 1", "x = 1e999999"] {
            let _ = parse("s.toml", junk);
        }
    }
}
