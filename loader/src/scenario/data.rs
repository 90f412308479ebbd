//! Data-driven requests (`--data FILE`, `[data]`): a CSV file (header row) or NDJSON file
//! (one object per line) whose columns fill `{{name}}` placeholders in a request's path and
//! query, header values and body. Every request that uses a placeholder is encoded once per
//! row at start-up, within [`MAX_ENCODED_BYTES`]; the engine then picks a row per request
//! ([`crate::engine::keys`]: in sequence, uniformly or Zipf-skewed, reproducibly from the
//! seed).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::input::Given;
use super::raw::Raw;
use super::request::RequestSpec;
use crate::engine::keys::KeyDist;
use crate::error::InputError;

/// Largest data file read.
pub const MAX_DATA_BYTES: u64 = 256 << 20;
/// Most bytes the requests filled from a data file may take once encoded: they are kept in
/// memory for the whole run (a 100,000-row file of 200-byte requests takes 20 MiB).
pub const MAX_ENCODED_BYTES: usize = 512 << 20;

/// A data file, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct DataSpec {
    /// Where it was read from.
    pub path: PathBuf,
    /// Column names, in file order (NDJSON: the first object's keys, sorted).
    pub columns: Vec<String>,
    /// Rows, each with one value per column (shared: the plan keeps them for the report).
    pub rows: Arc<Vec<Vec<String>>>,
    /// How rows are drawn.
    pub dist: KeyDist,
    /// Seed of the draws (given, or chosen at start and reported so the run can be repeated).
    pub seed: u64,
}

/// The seed of the run's draws (data rows, Poisson arrivals): `--seed` (`[data] seed`), else
/// one chosen once per process, so the rows and the arrivals share it.
pub(crate) fn seed(raw: &Raw) -> Result<u64, InputError> {
    static CHOSEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    match &raw.data.seed {
        Some(g) => u64::try_from(g.value).map_err(|_| g.err("expected a whole number ≥ 0")),
        None => Ok(*CHOSEN.get_or_init(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 % 1_000_000_000)
        })),
    }
}

/// `--data`, `--key-dist`, `--seed` (or `[data]`), read and checked.
pub(crate) fn from_raw(raw: &Raw) -> Result<Option<DataSpec>, InputError> {
    let Some(file) = &raw.data.file else {
        if let Some(g) = raw.data.dist.as_ref() {
            return Err(g.err("applies only with a data file (--data or data.file)"));
        }
        let poisson = raw.profile.arrival.as_ref().is_some_and(|a| a.value.trim().eq_ignore_ascii_case("poisson"));
        let exp_think =
            raw.profile.think.as_ref().is_some_and(|t| t.value.trim().to_ascii_lowercase().starts_with("exp:"));
        if let Some(g) = raw.data.seed.as_ref()
            && !poisson
            && !exp_think
        {
            return Err(g.err(
                "applies only with a data file (--data or data.file), --arrival poisson or exponential think times (--think exp:MEAN)",
            ));
        }
        return Ok(None);
    };
    let dist =
        raw.data.dist.as_ref().map_or(Ok(KeyDist::Sequence), |g| KeyDist::parse(&g.value).map_err(|e| g.err(e)))?;
    let seed = seed(raw)?;
    let path = resolve(file, raw.file.as_deref());
    let (columns, rows) = read(&path).map_err(|e| file.err(format!("{}: {e}", path.display())))?;
    Ok(Some(DataSpec { path, columns, rows: Arc::new(rows), dist, seed }))
}

/// A file named in the scenario file is relative to it; a flag's, to the working directory.
fn resolve(file: &Given<PathBuf>, scenario: Option<&Path>) -> PathBuf {
    match scenario.and_then(Path::parent) {
        Some(dir) if !file.is_flag() && file.value.is_relative() => dir.join(&file.value),
        _ => file.value.clone(),
    }
}

type Table = (Vec<String>, Vec<Vec<String>>);

fn read(path: &Path) -> Result<Table, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read it: {e}"))?;
    // A regular file only: a device or a FIFO (`/dev/zero`) would never end.
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_DATA_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_DATA_BYTES {
        return Err(format!("larger than the {} MiB a data file may have", MAX_DATA_BYTES >> 20));
    }
    let text = String::from_utf8(bytes).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let ndjson = match ext.as_str() {
        "ndjson" | "jsonl" | "json" => true,
        "csv" => false,
        _ => text.trim_start().starts_with('{'),
    };
    let (columns, rows) = if ndjson { ndjson_rows(&text)? } else { csv_rows(&text)? };
    if rows.is_empty() {
        return Err("no rows (a CSV file needs a header row and at least one row below it)".into());
    }
    Ok((columns, rows))
}

fn csv_rows(text: &str) -> Result<Table, String> {
    let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(text.as_bytes());
    let columns: Vec<String> =
        reader.headers().map_err(|e| e.to_string())?.iter().map(|c| c.trim().to_string()).collect();
    check_columns(&columns)?;
    let rows = reader
        .records()
        .map(|r| r.map(|r| r.iter().map(str::to_string).collect()).map_err(|e| e.to_string()))
        .collect::<Result<Vec<Vec<String>>, String>>()?;
    Ok((columns, rows))
}

fn ndjson_rows(text: &str) -> Result<Table, String> {
    let mut columns: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        let serde_json::Value::Object(map) = value else {
            return Err(format!("line {}: expected a JSON object per line", i + 1));
        };
        if columns.is_empty() {
            columns = map.keys().cloned().collect();
            check_columns(&columns).map_err(|e| format!("line {}: {e}", i + 1))?;
        }
        let row = columns
            .iter()
            .map(|c| match map.get(c) {
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                Some(other) => Ok(other.to_string()),
                None => Err(format!("line {}: no `{c}` (the first object has {})", i + 1, columns.join(", "))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        rows.push(row);
    }
    Ok((columns, rows))
}

fn check_columns(columns: &[String]) -> Result<(), String> {
    if let Some(c) = columns.iter().find(|c| c.is_empty() || c.contains(['{', '}'])) {
        return Err(format!("column name {c:?}: names must be non-empty and free of braces"));
    }
    if let Some((i, c)) = columns.iter().enumerate().find(|(i, c)| columns[..*i].contains(c)) {
        return Err(format!("column {} repeats the name `{c}`", i + 1));
    }
    Ok(())
}

/// Text with `{{column}}` placeholders.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Column(usize),
}

/// Split `text` into literal parts and columns; `None` when it has no placeholder.
fn template(text: &str, columns: &[String]) -> Result<Option<Vec<Part>>, String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let Some(len) = rest[open + 2..].find("}}") else { break };
        let name = rest[open + 2..open + 2 + len].trim();
        let Some(column) = columns.iter().position(|c| c == name) else {
            return Err(format!("{{{{{name}}}}} names no column of the data file (columns: {})", columns.join(", ")));
        };
        parts.push(Part::Text(rest[..open].to_string()));
        parts.push(Part::Column(column));
        rest = &rest[open + 2 + len + 2..];
    }
    if parts.is_empty() {
        return Ok(None);
    }
    parts.push(Part::Text(rest.to_string()));
    Ok(Some(parts))
}

fn fill(parts: &[Part], row: &[String]) -> String {
    parts
        .iter()
        .map(|p| match p {
            Part::Text(t) => t.as_str(),
            Part::Column(c) => row[*c].as_str(),
        })
        .collect()
}

/// Where a filled value goes, for the check that it fits there.
#[derive(Clone, Copy)]
enum Into {
    Path,
    Header,
    Body,
}

/// A filled value that would break the request's framing.
fn unfit(value: &str, into: Into) -> Option<&'static str> {
    match into {
        Into::Path if value.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) => {
            Some("a request path (no spaces or control characters: percent-encode them in the file)")
        }
        Into::Header if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') => {
            Some("a header value (no line breaks or control characters)")
        }
        _ => None,
    }
}

/// `r` once per row of `data`, encoded by `encode(request, path)`, when the request uses a
/// placeholder (`None` when it uses none). `budget` is what is left of [`MAX_ENCODED_BYTES`].
pub(crate) fn expand(
    data: &DataSpec,
    r: &RequestSpec,
    path: &str,
    budget: &mut usize,
    encode: impl Fn(&RequestSpec, &str) -> Result<Vec<u8>, String>,
) -> Result<Option<Vec<Arc<[u8]>>>, InputError> {
    let at = |e: String| InputError::new(format!("request {:?}", r.name), e);
    let cols = &data.columns;
    let path_t = template(path, cols).map_err(at)?;
    let headers_t = r.headers.iter().map(|(_, v)| template(v, cols)).collect::<Result<Vec<_>, _>>().map_err(at)?;
    let body_text = r.body.as_deref().map(String::from_utf8_lossy);
    let body_t = body_text.as_deref().map(|b| template(b, cols)).transpose().map_err(at)?.flatten();
    if path_t.is_none() && body_t.is_none() && headers_t.iter().all(Option::is_none) {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(data.rows.len());
    for (i, row) in data.rows.iter().enumerate() {
        let checked = |parts: &[Part], into: Into| -> Result<String, InputError> {
            let value = fill(parts, row);
            match unfit(&value, into) {
                Some(what) => Err(InputError::new(
                    format!("{} row {}", data.path.display(), i + 1),
                    format!("{value:?} cannot go into {what}"),
                )),
                None => Ok(value),
            }
        };
        let mut filled = r.clone();
        let path = path_t.as_deref().map_or(Ok(path.to_string()), |p| checked(p, Into::Path))?;
        for ((_, value), t) in filled.headers.iter_mut().zip(&headers_t) {
            if let Some(t) = t {
                *value = checked(t, Into::Header)?;
            }
        }
        if let Some(t) = &body_t {
            filled.body = Some(checked(t, Into::Body)?.into_bytes());
        }
        let bytes =
            encode(&filled, &path).map_err(|e| InputError::new(format!("{} row {}", data.path.display(), i + 1), e))?;
        *budget = budget.checked_sub(bytes.len() + std::mem::size_of::<Arc<[u8]>>()).ok_or_else(|| {
            InputError::new(
                format!("{}", data.path.display()),
                format!(
                    "the requests filled from its {} rows take more than the {} MiB loader keeps encoded in memory (stopped at row {}); use fewer rows",
                    data.rows.len(),
                    MAX_ENCODED_BYTES >> 20,
                    i + 1
                ),
            )
        })?;
        out.push(Arc::from(bytes));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(c: &[&str]) -> Vec<String> {
        c.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn templates_split_on_known_columns_and_say_which_name_is_unknown() {
        let c = cols(&["id", "name"]);
        assert_eq!(template("/items", &c), Ok(None));
        let t = template("/items/{{id}}?n={{ name }}", &c).unwrap().unwrap();
        assert_eq!(fill(&t, &cols(&["7", "x"])), "/items/7?n=x");
        assert_eq!(template("/a{{id", &c), Ok(None));
        let e = template("/{{sku}}", &c).unwrap_err();
        assert!(e.contains("{{sku}} names no column") && e.contains("id, name"), "{e}");
    }

    #[test]
    fn csv_and_ndjson_read_into_columns_and_rows() {
        let (c, r) = csv_rows("id,name\n1,\"a, b\"\n2,c\n").unwrap();
        assert_eq!((c, r), (cols(&["id", "name"]), vec![cols(&["1", "a, b"]), cols(&["2", "c"])]));
        assert!(csv_rows("id,name\n1\n").unwrap_err().contains("record"));
        assert!(csv_rows("id,id\n1,2\n").unwrap_err().contains("repeats"));
        let (c, r) =
            ndjson_rows("{\"id\": 1, \"tag\": \"x\"}\n\n{\"id\": \"2\", \"tag\": null, \"more\": 0}\n").unwrap();
        assert_eq!((c, r), (cols(&["id", "tag"]), vec![cols(&["1", "x"]), cols(&["2", "null"])]));
        assert!(ndjson_rows("{\"id\": 1}\n{\"x\": 2}\n").unwrap_err().starts_with("line 2: no `id`"));
        assert!(ndjson_rows("[1]\n").unwrap_err().contains("object"));
        // A device would never end: refused before reading.
        assert_eq!(read(Path::new("/dev/zero")).unwrap_err(), "not a regular file");
        assert!(read(Path::new("/nonexistent/k.csv")).unwrap_err().starts_with("cannot read it"));
    }

    fn spec(rows: &[&[&str]]) -> DataSpec {
        DataSpec {
            path: "keys.csv".into(),
            columns: cols(&["id", "tok"]),
            rows: Arc::new(rows.iter().map(|r| cols(r)).collect()),
            dist: KeyDist::Sequence,
            seed: 1,
        }
    }

    fn request(path: &str, header: &str, body: Option<&str>) -> RequestSpec {
        RequestSpec {
            name: "r".into(),
            path: Some(path.into()),
            weight: 1,
            method: "POST".into(),
            headers: vec![("X-Token".into(), header.into())],
            body: body.map(|b| b.as_bytes().to_vec()),
        }
    }

    fn encode(r: &RequestSpec, path: &str) -> Result<Vec<u8>, String> {
        let (_, token) = &r.headers[0];
        Ok(format!("{path}|{token}|{}", String::from_utf8_lossy(r.body.as_deref().unwrap_or_default())).into_bytes())
    }

    #[test]
    fn requests_fill_per_row_everywhere_or_stay_single() {
        let d = spec(&[&["1", "a"], &["2", "b"]]);
        let mut budget = MAX_ENCODED_BYTES;
        let plain = expand(&d, &request("/x", "t", None), "/x", &mut budget, encode).unwrap();
        assert_eq!(plain, None);
        let r = request("/i/{{id}}", "{{tok}}", Some("{\"id\": {{id}}}"));
        let out = expand(&d, &r, "/i/{{id}}", &mut budget, encode).unwrap().unwrap();
        let text: Vec<String> = out.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect();
        assert_eq!(text, ["/i/1|a|{\"id\": 1}", "/i/2|b|{\"id\": 2}"]);
    }

    #[test]
    fn values_that_break_the_request_and_the_memory_bound_are_refused() {
        let r = request("/i/{{id}}", "{{tok}}", None);
        let mut budget = MAX_ENCODED_BYTES;
        let e = expand(&spec(&[&["1", "a"], &["a b", "c"]]), &r, "/i/{{id}}", &mut budget, encode).unwrap_err();
        assert!(e.to_string().starts_with("keys.csv row 2: \"/i/a b\" cannot go into a request path"), "{e}");
        let e = expand(&spec(&[&["1", "a\r\nX: y"]]), &r, "/i/{{id}}", &mut budget, encode).unwrap_err();
        assert!(e.to_string().contains("cannot go into a header value"), "{e}");
        let mut budget = 40;
        let e = expand(&spec(&[&["1", "a"], &["2", "b"]]), &r, "/i/{{id}}", &mut budget, encode).unwrap_err();
        assert!(e.to_string().contains("MiB loader keeps encoded") && e.to_string().contains("row 2"), "{e}");
    }
}
