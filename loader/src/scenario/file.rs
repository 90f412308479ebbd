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
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::input::{FractionText, Given, Origin, Raw, RawProfile, RawRequest, RawSlo, RawVerdict, RawWatch};
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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrpcTable {
    method: S<String>,
    proto: S<Vec<String>>,
    import_paths: S<Vec<String>>,
    deadline: S<DurationText>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DataTable {
    file: S<String>,
    dist: S<String>,
    seed: S<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetTable {
    url: S<String>,
    connections: S<i64>,
    threads: S<i64>,
    timeout: S<DurationText>,
    keepalive: S<bool>,
    wake_window: S<DurationText>,
    send_ahead: S<DurationText>,
    max_header: S<SizeText>,
    max_body: S<SizeText>,
    retry_non_idempotent: S<bool>,
    http2: S<bool>,
    max_streams: S<i64>,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileTable {
    kind: S<String>,
    rate: S<f64>,
    duration: S<DurationText>,
    steps: S<Vec<f64>>,
    start: S<f64>,
    increment: S<f64>,
    count: S<i64>,
    max_rate: S<f64>,
    hold: S<DurationText>,
    ramp: S<DurationText>,
    ramp_down: S<DurationText>,
    base_hold: S<DurationText>,
    recovery: S<DurationText>,
    peak_rate: S<f64>,
    from: S<f64>,
    warmup: S<DurationText>,
    warmup_rate: S<f64>,
    repeat: S<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SloTable {
    p95: S<DurationText>,
    p99: S<DurationText>,
    error_budget: S<Fraction>,
    goodput_min: S<Fraction>,
    late_max: S<Fraction>,
    dropped_max: S<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VerdictTable {
    probes: S<bool>,
    cpu_p95_pct: S<f64>,
    runqueue_p99_ms: S<f64>,
    send_lag_p99_ms: S<f64>,
    read_lag_p99_ms: S<f64>,
    time_wait: S<i64>,
    ephemeral_ports_pct: S<f64>,
    fds_pct: S<f64>,
    cert_ceiling_pct: S<f64>,
    nic_capacity_mbps: S<f64>,
    min_tail_samples: S<i64>,
    loader_delay_pct: S<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CapacityTable {
    margin: S<f64>,
    peak: S<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputTable {
    dir: S<String>,
    plain: S<bool>,
}

/// A duration, written as a string with a unit (`"20s"`); parsed later, against its key.
struct DurationText(String);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string with a unit, like \"20s\" or \"250ms\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationText, E> {
                Ok(DurationText(v.to_string()))
            }
        }
        d.deserialize_str(V)
    }
}

/// A size in bytes: a whole number (`65536`) or a string with a unit (`"64KiB"`).
struct SizeText(String);

impl<'de> Deserialize<'de> for SizeText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SizeText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size in bytes, like 65536 or \"64KiB\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A fraction: a number (`0.01`) or a percent string (`"1%"`).
struct Fraction(FractionText);

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Fraction;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a fraction like 0.01 or a percentage like \"1%\"")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Fraction, E> {
                Ok(Fraction(FractionText::Number(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Fraction, E> {
                Ok(Fraction(FractionText::Number(v as f64)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Fraction, E> {
                Ok(Fraction(FractionText::Number(v as f64)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Fraction, E> {
                Ok(Fraction(FractionText::Text(v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
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
    macro_rules! take {
        ($dst:expr, $table:expr, $section:literal, $($field:ident),*) => {$(
            $dst.$field = $table.$field.map(|v| src.given(concat!($section, ".", stringify!($field)), v));
        )*};
    }
    macro_rules! take_text {
        ($dst:expr, $table:expr, $section:literal, $($field:ident),*) => {$(
            $dst.$field = $table.$field.map(|v| {
                let span = v.span();
                src.given(concat!($section, ".", stringify!($field)), Spanned::new(span, v.into_inner().0))
            });
        )*};
    }
    let mut section = |name: &'static str, span: Range<usize>| raw.sections.push((name, src.at(span.start)));
    let (mut target, mut profile, mut slo, mut verdict, mut capacity, mut output) =
        (None, None, None, None, None, None);
    if let Some(t) = doc.target {
        section("target", t.span());
        target = Some(t.into_inner());
    }
    if let Some(t) = doc.profile {
        section("profile", t.span());
        profile = Some(t.into_inner());
    }
    if let Some(t) = doc.slo {
        section("slo", t.span());
        slo = Some(t.into_inner());
    }
    if let Some(t) = doc.verdict {
        section("verdict", t.span());
        verdict = Some(t.into_inner());
    }
    if let Some(t) = doc.capacity {
        section("capacity", t.span());
        capacity = Some(t.into_inner());
    }
    if let Some(t) = doc.output {
        section("output", t.span());
        output = Some(t.into_inner());
    }
    let data = doc.data.map(|t| {
        section("data", t.span());
        t.into_inner()
    });

    if let Some(t) = target {
        take!(raw, t, "target", url, connections, threads, keepalive, retry_non_idempotent, http2, max_streams);
        take_text!(raw, t, "target", timeout, wake_window, send_ahead, max_header, max_body);
    }
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
        });
    }
    if let Some(t) = profile {
        let mut p = RawProfile::default();
        take!(
            p,
            t,
            "profile",
            kind,
            rate,
            steps,
            start,
            increment,
            count,
            max_rate,
            peak_rate,
            from,
            warmup_rate,
            repeat
        );
        take_text!(p, t, "profile", duration, hold, ramp, ramp_down, base_hold, recovery, warmup);
        raw.profile = p;
    }
    if let Some(t) = slo {
        let mut s = RawSlo::default();
        take_text!(s, t, "slo", p95, p99, error_budget, goodput_min, late_max);
        take!(s, t, "slo", dropped_max);
        raw.slo = s;
    }
    if let Some(t) = verdict {
        let mut v = RawVerdict::default();
        take!(
            v,
            t,
            "verdict",
            cpu_p95_pct,
            runqueue_p99_ms,
            send_lag_p99_ms,
            read_lag_p99_ms,
            time_wait,
            ephemeral_ports_pct,
            fds_pct,
            cert_ceiling_pct,
            min_tail_samples,
            loader_delay_pct,
            nic_capacity_mbps
        );
        raw.probes = t.probes.map(|v| src.given("verdict.probes", v));
        raw.verdict = v;
    }
    if let Some(t) = capacity {
        take!(raw, t, "capacity", margin, peak);
    }
    if let Some(t) = doc.grpc {
        section("grpc", t.span());
        let t = t.into_inner();
        raw.grpc = t.method.map(|v| src.given("grpc.method", v));
        let paths = |v: Option<Spanned<Vec<String>>>, key: &'static str| -> Vec<_> {
            v.map(|v| {
                let span = v.span();
                v.into_inner()
                    .into_iter()
                    .map(|p| src.given(key, Spanned::new(span.clone(), PathBuf::from(p))))
                    .collect()
            })
            .unwrap_or_default()
        };
        raw.protos = paths(t.proto, "grpc.proto");
        raw.proto_paths = paths(t.import_paths, "grpc.import_paths");
        raw.deadline = t.deadline.map(|v| {
            let span = v.span();
            src.given("grpc.deadline", Spanned::new(span, v.into_inner().0))
        });
    }
    if let Some(t) = data {
        raw.data = t.file.map(|v| {
            let span = v.span();
            src.given("data.file", Spanned::new(span, v.into_inner().into()))
        });
        raw.key_dist = t.dist.map(|v| src.given("data.dist", v));
        raw.seed = t.seed.map(|v| src.given("data.seed", v));
    }
    if let Some(t) = output {
        raw.out = t.dir.map(|v| {
            let span = v.span();
            src.given("output.dir", Spanned::new(span, v.into_inner().into()))
        });
        take!(raw, t, "output", plain);
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

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
