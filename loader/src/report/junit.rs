//! The step judgement as JUnit XML (`--junit FILE`), for CI systems that show test results:
//! one test case per judged phase (each hold step against the SLO and error budget; a failed
//! step carries its reasons) and one for the verdict (it fails when loader-side evidence
//! invalidates the numbers, since a gate passed on untrusted numbers proves nothing).
//! Phases that are not judged (warm-up, ramps) are not test cases.

use std::fmt::Write as _;

use super::html::escape::esc as xml;
use crate::summary::Summary;

/// `s` as a JUnit XML document.
pub fn render(s: &Summary) -> String {
    let judged: Vec<_> = s.phases.iter().filter(|p| p.passed.is_some()).collect();
    let untrusted = s.verdict.trusted == Some(false);
    let tests = judged.len() + 1;
    let failures = judged.iter().filter(|p| p.passed == Some(false)).count() + usize::from(untrusted);
    let time = s.run.elapsed_s;
    let suite = xml(&format!("loader run {}", s.run.url));
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(out, "<testsuites name=\"loader\" tests=\"{tests}\" failures=\"{failures}\" time=\"{time:.3}\">");
    let _ = writeln!(
        out,
        "  <testsuite name=\"{suite}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{time:.3}\" timestamp=\"{}\">",
        xml(s.run.started_at.trim_end_matches('Z'))
    );
    let _ = writeln!(out, "    <properties>");
    for (name, value) in [
        ("profile", s.run.profile.clone()),
        ("connections", s.run.connections.to_string()),
        ("loader_version", s.run.loader_version.clone()),
        ("interrupted", s.interrupted.to_string()),
    ] {
        let _ = writeln!(out, "      <property name=\"{name}\" value=\"{}\"/>", xml(&value));
    }
    let _ = writeln!(out, "    </properties>");
    for p in &judged {
        let name = xml(&format!("{} @ {:.0}/s", p.name, p.offered_rps));
        let summary = format!(
            "p95 {:.2} ms, p99 {:.2} ms, ok {:.0}/s of {:.0}/s offered",
            p.latency_ms.p95, p.latency_ms.p99, p.ok_rps, p.offered_rps
        );
        let _ = write!(out, "    <testcase classname=\"loader.steps\" name=\"{name}\" time=\"{:.3}\"", p.duration_s);
        if p.passed == Some(false) {
            let message = xml(&p.fail_reasons.join("; "));
            let _ = writeln!(out, ">\n      <failure message=\"{message}\" type=\"gate\">{}</failure>", xml(&summary));
            let _ = writeln!(out, "    </testcase>");
        } else {
            let _ = writeln!(out, ">\n      <system-out>{}</system-out>\n    </testcase>", xml(&summary));
        }
    }
    let _ = write!(out, "    <testcase classname=\"loader.verdict\" name=\"the numbers can be trusted\" time=\"0\"");
    if untrusted {
        let invalidating: Vec<String> = s
            .verdict
            .reasons
            .iter()
            .filter(|r| r.invalidates)
            .map(|r| format!("{} ({}): {}", r.code, r.side, r.detail))
            .collect();
        let _ = writeln!(
            out,
            ">\n      <failure message=\"untrusted: loader-side evidence invalidates the numbers\" type=\"verdict\">{}</failure>\n    </testcase>",
            xml(&invalidating.join("\n"))
        );
    } else {
        let _ = writeln!(out, "/>");
    }
    let _ = writeln!(out, "  </testsuite>\n</testsuites>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_steps_and_an_untrusted_verdict_are_failures() {
        let mut s = crate::verdict::tests::clean();
        let unjudged = s.phases[0].clone();
        assert_eq!(unjudged.passed, None);
        let step = |name: &str, rate: f64, passed: bool| {
            let mut p = unjudged.clone();
            p.name = name.into();
            p.offered_rps = rate;
            p.passed = Some(passed);
            p
        };
        s.phases = vec![unjudged.clone(), step("step 1", 100.0, true), step("step 2", 200.0, false)];
        s.phases[2].fail_reasons = vec!["p99 12.00 ms > SLO 10 ms & <rising>".into()];
        let text = render(&s);
        assert!(
            text.starts_with(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"loader\" tests=\"3\" failures=\"1\""
            ),
            "{text}"
        );
        assert_eq!(text.matches("<testcase ").count(), 3, "{text}");
        assert!(
            text.contains("<failure message=\"p99 12.00 ms &gt; SLO 10 ms &amp; &lt;rising&gt;\" type=\"gate\">"),
            "{text}"
        );
        assert!(text.contains("name=\"the numbers can be trusted\" time=\"0\"/>"), "{text}");
        s.verdict.trusted = Some(false);
        s.verdict.reasons.push(crate::summary::Reason {
            code: "send_lag".into(),
            side: "loader".into(),
            invalidates: true,
            value: Some(5.0),
            limit: Some(1.0),
            detail: "sends were late".into(),
        });
        let text = render(&s);
        assert!(text.contains("failures=\"2\""), "{text}");
        assert!(text.contains("type=\"verdict\">send_lag (loader): sends were late</failure>"), "{text}");
    }

    #[test]
    fn xml_escapes_markup_and_control_characters() {
        assert_eq!(xml("a<b>&\"c'\u{1}\r"), "a&lt;b&gt;&amp;&quot;c&#39;\u{FFFD}\r");
    }
}
