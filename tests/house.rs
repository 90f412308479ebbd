//! The house rules of `loader/src`, checked on the sources: the top-level modules import each
//! other without a cycle, and no source file grows past the size a reader can hold (tests and
//! tables excepted). Doc comments and `#[cfg(test)]` modules do not count as imports.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Lines of non-test code above which a file must be split (the design card says ~500).
const MAX_LINES: usize = 520;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../loader/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read loader/src") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its `#[cfg(test)]` module (by convention the last item) and
/// without comment lines.
fn code(text: &str) -> Vec<&str> {
    text.lines().take_while(|l| !l.starts_with("#[cfg(test)]")).filter(|l| !l.trim_start().starts_with("//")).collect()
}

/// The top-level module a file belongs to (`engine/shard/mod.rs` → `engine`).
fn top_module(path: &Path) -> String {
    let rel = path.strip_prefix(src()).expect("under loader/src");
    let first = rel.components().next().expect("a component").as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// `crate::NAME` references and `use crate::{A, B::…}` groups in `lines`.
fn crate_refs(lines: &[&str]) -> BTreeSet<String> {
    let text = lines.join("\n");
    let mut refs = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    refs.insert(name);
                }
            }
        } else {
            refs.insert(ident(rest));
        }
    }
    refs
}

/// Every way a node of `deps` reaches itself, as `a -> b -> a`, each named by `name`.
fn cycles<K: Ord + Clone>(deps: &BTreeMap<K, BTreeSet<K>>, name: impl Fn(&K) -> String) -> Vec<String> {
    let mut found = BTreeSet::new();
    for start in deps.keys() {
        let mut seen = BTreeSet::new();
        let mut stack = vec![(start.clone(), vec![name(start)])];
        while let Some((at, path)) = stack.pop() {
            for next in deps.get(&at).into_iter().flatten() {
                if next == start {
                    found.insert(format!("{} -> {}", path.join(" -> "), name(start)));
                } else if seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(name(next));
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    found.into_iter().collect()
}

#[test]
fn top_level_modules_have_no_import_cycle() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let tops: BTreeSet<String> = files.iter().map(|f| top_module(f)).collect();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let text = fs::read_to_string(file).expect("read a source file");
        let from = top_module(file);
        for to in crate_refs(&code(&text)) {
            if to != from && tops.contains(&to) && !["lib", "main"].contains(&to.as_str()) {
                deps.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    assert!(deps.len() >= 10, "the scan found too few modules to mean anything: {deps:?}");
    assert!(deps["commands"].contains("measure"), "the scan misses a known import: {deps:?}");
    let cycles = cycles(&deps, String::clone);
    assert!(cycles.is_empty(), "module cycles in loader/src:\n{}", cycles.join("\n"));
}

#[test]
fn no_source_file_is_oversized() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    assert!(files.len() > 50, "found only {} files", files.len());
    let mut big: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let text = fs::read_to_string(f).expect("read a source file");
            let n = code(&text).len();
            (n > MAX_LINES).then(|| format!("{}: {n} lines of code", f.strip_prefix(src()).unwrap().display()))
        })
        .collect();
    big.sort();
    assert!(big.is_empty(), "split these by responsibility (limit {MAX_LINES}):\n{}", big.join("\n"));
}

#[test]
fn the_cycle_scan_sees_a_cycle_when_there_is_one() {
    // The scanner itself: a planted pair of references is found, comments are not.
    let a = ["use crate::{report::text, summary};", "// crate::ignored", "fn f() { crate::verdict::judge() }"];
    let refs = crate_refs(&code(&a.join("\n")));
    assert_eq!(refs, ["report", "summary", "verdict"].iter().map(|s| s.to_string()).collect());
}

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Backticked tokens of `text` that read as a path of the repository: a file (`x.rs`, `x.md`)
/// or a folder (`x/`), of path characters only.
fn paths_named(text: &str) -> Vec<String> {
    let pathy = |t: &str| {
        !t.is_empty()
            && t.chars().all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
            && t.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && (t.ends_with(".rs") || t.ends_with('/') || t.ends_with(".md"))
    };
    text.split('`').skip(1).step_by(2).filter(|t| pathy(t)).map(str::to_string).collect()
}

/// Every path under `dir` (relative to it, folders with a trailing `/`).
fn tree(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).expect("read a folder").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() {
            out.push(format!("{prefix}{name}/"));
            tree(&entry.path(), &format!("{prefix}{name}/"), out);
        } else {
            out.push(format!("{prefix}{name}"));
        }
    }
}

/// Whether a path a doc names exists: from the repository's root, or as the end of a path
/// under `loader/src` (tables name `shard/ring.rs` inside the engine's row).
fn exists(named: &str, sources: &[String]) -> bool {
    root().join(named).exists() || sources.iter().any(|s| s == named || s.ends_with(&format!("/{named}")))
}

/// The docs match the code: `docs/architecture.md` names every module of `loader/src` — each
/// top-level file and folder, every folder below, and each file of the engine's folders — and
/// every page of `docs/`; and no path that it, `docs/design.md` or `docs/http2.md` names in
/// backticks is missing from the repository.
#[test]
fn the_architecture_page_names_every_module_and_no_missing_file() {
    let mut sources = Vec::new();
    tree(&src(), "", &mut sources);
    let architecture = fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let named: BTreeSet<String> = paths_named(&architecture).into_iter().collect();
    // A doc names a module by a path that ends its own (`shard/ring.rs`, `loader/src/engine/`),
    // or by its bare file name when no other module has that name (`ring.rs`).
    let base = |p: &str| p.trim_end_matches('/').rsplit('/').next().unwrap_or("").to_string();
    let unique =
        |n: &str| sources.iter().filter(|s| base(s) == base(n) && s.ends_with('/') == n.ends_with('/')).count() == 1;
    let mentions = |path: &str| {
        named.iter().any(|n| {
            n == path
                || n.ends_with(&format!("/{path}"))
                || (path.ends_with(&format!("/{n}"))
                    && (n.contains('/') && n.trim_end_matches('/').contains('/') || unique(n)))
        })
    };
    let mut missing = Vec::new();
    for path in &sources {
        let depth = path.trim_end_matches('/').matches('/').count();
        let folder = path.ends_with('/');
        let engine_file = ["engine/", "engine/shard/", "engine/http2/"]
            .iter()
            .any(|d| path.strip_prefix(d).is_some_and(|rest| !rest.contains('/')));
        let wanted = match () {
            _ if path.contains("tests") || path.ends_with("mod.rs") || path == "lib.rs" || path == "main.rs" => false,
            _ if depth == 0 => true,
            _ if folder => true,
            _ => engine_file && path.ends_with(".rs") && !path.ends_with("fuzz.rs"),
        };
        if wanted && !mentions(path) {
            missing.push(path.clone());
        }
    }
    for page in fs::read_dir(root().join("docs")).expect("docs/").flatten() {
        let name = page.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && name != "architecture.md" && !architecture.contains(&name) {
            missing.push(format!("docs/{name}"));
        }
    }
    assert!(missing.is_empty(), "docs/architecture.md does not name: {missing:?}");
    let mut dangling = Vec::new();
    for doc in ["docs/architecture.md", "docs/design.md", "docs/http2.md"] {
        let text = fs::read_to_string(root().join(doc)).expect("a doc");
        for path in paths_named(&text) {
            let beside = root().join(doc).parent().expect("docs/").join(&path);
            if !beside.exists() && !exists(&path, &sources) && !exists(path.trim_start_matches("loader/src/"), &sources)
            {
                dangling.push(format!("{doc}: `{path}`"));
            }
        }
    }
    assert!(dangling.is_empty(), "paths the docs name that do not exist: {dangling:#?}");
}

/// A file's module path (`engine/shard/h2.rs` → `engine::shard::h2`, `engine/shard/mod.rs` →
/// `engine::shard`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The path at the start of `rest`: identifiers joined by `::`, up to a group or its end; and
/// what follows it.
fn path_at(mut rest: &str) -> (Vec<String>, &str) {
    let mut path = Vec::new();
    loop {
        let name = ident(rest);
        if name.is_empty() {
            return (path, rest);
        }
        rest = &rest[name.len()..];
        path.push(name);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => return (path, rest),
        }
    }
}

/// The module paths `lines` (the code of module `at`) refers to through `crate::` and
/// `super::` (groups `{a, b::c}` included), each as written, made absolute.
fn module_refs(lines: &[&str], at: &[String]) -> Vec<Vec<String>> {
    let text = lines.join("\n");
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::").chain(text.match_indices("super::")) {
        // Not the tail of a longer path (`super::super::`) or of an identifier.
        if text[..i].ends_with("super::") || text[..i].chars().last().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let mut base: Vec<String> = Vec::new();
        let mut rest = &text[i..];
        if let Some(r) = rest.strip_prefix("crate::") {
            rest = r;
        } else {
            base = at.to_vec();
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
        }
        let (path, after) = path_at(rest);
        let mut full = base.clone();
        full.extend(path);
        if let Some(group) = after.strip_prefix('{') {
            for item in group[..group.find('}').unwrap_or(group.len())].split(',') {
                let (p, _) = path_at(item.trim());
                let mut one = full.clone();
                one.extend(p);
                out.push(one);
            }
        } else {
            out.push(full);
        }
    }
    out
}

/// Import cycles between the files of each top-level folder: a file that refers to a module
/// which refers back to it, directly or through others of the folder. A file's use of its
/// own ancestors (`use super::*` in a file that adds to its parent's type) is not an import.
fn folder_cycles(files: &[(Vec<String>, String)]) -> Vec<String> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut deps: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (at, text) in files {
        for r in module_refs(&code(text), at) {
            // The longest prefix that is a module of the crate.
            let Some(to) = (1..=r.len()).rev().map(|n| r[..n].to_vec()).find(|p| modules.contains(p)) else { continue };
            let ancestor = at.starts_with(&to);
            if to != *at && !ancestor && to.first() == at.first() && to.len() > 1 {
                deps.entry(at.clone()).or_default().insert(to);
            }
        }
    }
    cycles(&deps, |m| m.join("::"))
}

#[test]
fn no_file_imports_a_file_of_its_folder_that_imports_it_back() {
    let mut paths = Vec::new();
    rust_files(&src(), &mut paths);
    let files: Vec<(Vec<String>, String)> = paths
        .iter()
        .map(|p| (module_of(p.strip_prefix(src()).unwrap()), fs::read_to_string(p).expect("a source file")))
        .collect();
    let cycles = folder_cycles(&files);
    assert!(cycles.is_empty(), "files that import each other in a circle:\n{}", cycles.join("\n"));
}

#[test]
fn the_folder_cycle_scan_finds_a_planted_cycle_and_ignores_a_parent() {
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let files = vec![
        (m("engine::conn"), "use super::http2::wire::Wire;\npub struct Conn;".to_string()),
        (m("engine::http2::wire"), "use crate::engine::{conn::Conn, inflight};\n// crate::engine::shard".to_string()),
        (m("engine::inflight"), "pub struct InFlight;".to_string()),
        (m("engine::shard"), "mod h2;\nuse super::conn::Conn;\nfn f() { h2::go() }".to_string()),
        (m("engine::shard::h2"), "use super::*;\npub fn go() {}".to_string()),
    ];
    assert_eq!(
        folder_cycles(&files),
        [
            "engine::conn -> engine::http2::wire -> engine::conn",
            "engine::http2::wire -> engine::conn -> engine::http2::wire"
        ]
    );
    let untangled: Vec<_> = files.into_iter().filter(|(at, _)| at != &m("engine::http2::wire")).collect();
    assert!(folder_cycles(&untangled).is_empty(), "a child's `use super::*` is no cycle");
}

/// CI builds the fuzz targets with `--locked`: a dependency the loader gained must be in
/// `fuzz/Cargo.lock` too, or the fuzz build fails after the whole test run (it did, once).
#[test]
fn the_fuzz_lockfile_holds_every_dependency_of_the_loader() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--locked", "--format-version", "1", "--manifest-path"])
        .arg(root().join("fuzz/Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "fuzz/Cargo.lock is out of date: run `cargo metadata --manifest-path fuzz/Cargo.toml` and commit it\n{err}"
    );
}

/// `docs/scenario.md`'s key tables are the ones `loader/src/scenario/options.rs` makes;
/// `LOADER_WRITE_DOCS=1` writes them into the page instead of failing.
#[test]
fn the_scenario_key_tables_match_the_options() {
    let path = root().join("docs/scenario.md");
    let page = fs::read_to_string(&path).expect("docs/scenario.md");
    let made = loader::scenario::with_key_tables(&page).expect("every section has its markers");
    if std::env::var_os("LOADER_WRITE_DOCS").is_some() {
        fs::write(&path, &made).expect("write docs/scenario.md");
        return;
    }
    let first_difference = page.lines().zip(made.lines()).find(|(a, b)| a != b);
    assert!(
        page == made,
        "docs/scenario.md's key tables differ from loader/src/scenario/options.rs (first difference: \
         {first_difference:?}); write them with LOADER_WRITE_DOCS=1 cargo test -p loader-tests --test house key_tables"
    );
}

/// The codes a rule of `loader/src/verdict` gives its reasons: the first string of each
/// `reason("code", …)` call, and each `code: "code"` field.
fn reason_codes() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&src().join("verdict"), &mut files);
    let mut codes = BTreeSet::new();
    for f in files {
        let text = fs::read_to_string(&f).expect("read a source file");
        let text = code(&text).join("\n");
        for marker in ["reason(", "code:"] {
            for (at, _) in text.match_indices(marker) {
                let Some(rest) = text[at + marker.len()..].trim_start().strip_prefix('"') else { continue };
                let Some(end) = rest.find('"') else { continue };
                let word = &rest[..end];
                if !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                    codes.insert(word.to_string());
                }
            }
        }
    }
    codes
}

/// Every reason code the verdict can give has its row in docs/verdict.md's table, with the
/// anchor report.html and `loader verdict --all` point to (`#reason-CODE`), and every row is
/// a code the verdict gives.
#[test]
fn every_reason_code_has_its_entry_in_the_verdict_page() {
    let codes = reason_codes();
    assert!(codes.len() >= 30 && codes.contains("time_wait") && codes.contains("host_steal"), "{codes:?}");
    let page = fs::read_to_string(root().join("docs/verdict.md")).expect("read docs/verdict.md");
    let rows: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| <a id=\"reason-"))
        .filter_map(|l| {
            let (anchor, rest) = l.split_once("\"></a>`")?;
            let code = rest.split('`').next()?;
            (anchor == code).then(|| code.to_string())
        })
        .collect();
    let missing: Vec<&String> = codes.difference(&rows).collect();
    let stale: Vec<&String> = rows.difference(&codes).collect();
    assert!(
        missing.is_empty(),
        "reason codes without a row (| <a id=\"reason-CODE\"></a>`CODE` | …) in docs/verdict.md: {missing:?}"
    );
    assert!(stale.is_empty(), "rows of docs/verdict.md no rule gives: {stale:?}");
}
