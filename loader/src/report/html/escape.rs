//! Text into HTML: escaping every string that came from the summary (a URL, a header, an
//! error message the target sent — any of it may hold markup), and the number formats the
//! page uses. Nothing here knows the page's layout.

use std::fmt::Write as _;

/// `text` safe as HTML or XML element content and as a quoted attribute value (the JUnit
/// report's too: `&#39;` and the characters kept are valid in both).
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Other control characters have no business in the page, and XML 1.0 allows none.
            c if c.is_control() && !matches!(c, '\n' | '\t' | '\r') => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// A figure for reading: at most 3 decimals, fewer as it grows; `-` for a non-finite value.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "-".to_string();
    }
    let a = x.abs();
    let text = if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    };
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text }
}

/// `num(x)` followed by `unit`, or "not measured".
pub fn opt(x: Option<f64>, unit: &str) -> String {
    match x {
        Some(v) => format!("{}{unit}", num(v)),
        None => NOT_MEASURED.to_string(),
    }
}

/// `x` as a percentage of 1 (0.42 → "42%"), or "not measured".
pub fn pct(x: Option<f64>) -> String {
    opt(x.map(|r| r * 100.0), "%")
}

/// What the page says where the summary has no figure.
pub const NOT_MEASURED: &str = "not measured";

/// A coordinate in an SVG attribute: one decimal is a tenth of a pixel.
pub fn px(x: f64) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:.1}", if x.is_finite() { x } else { 0.0 });
    if s.ends_with(".0") {
        s.truncate(s.len() - 2);
    }
    if s == "-0" { "0".to_string() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_from_the_summary_is_inert() {
        assert_eq!(
            esc(r#"http://x/?a=<script>alert("1")</script>&b='c'"#),
            "http://x/?a=&lt;script&gt;alert(&quot;1&quot;)&lt;/script&gt;&amp;b=&#39;c&#39;"
        );
        assert_eq!(esc("µs → ok"), "µs → ok");
        assert_eq!(esc("a\u{0}b\u{1b}[31m"), "a\u{FFFD}b\u{FFFD}[31m");
    }

    #[test]
    fn numbers_read_short() {
        assert_eq!(num(1234.56), "1235");
        assert_eq!(num(123.45), "123.5");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(0.0626), "0.063");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(f64::NAN), "-");
        assert_eq!(opt(None, " ms"), "not measured");
        assert_eq!(opt(Some(2.5), " ms"), "2.5 ms");
        assert_eq!(pct(Some(0.4231)), "42.31%");
        assert_eq!(px(10.04), "10");
        assert_eq!(px(-0.01), "0");
        assert_eq!(px(3.26), "3.3");
    }
}
