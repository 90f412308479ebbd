//! Checks of single values, each reporting against the value's own [`Given`] origin.
//!
//! The bounds here are guards against typos and overflow (nothing past them is a
//! meaningful load test on one host), not policy; policy defaults live with the types.

use std::time::Duration;

use super::input::{FractionText, Given};
use crate::error::InputError;
use crate::schedule::MAX_MACHINES;

/// Highest rate accepted, a guard against typos (10 M req/s is beyond any single host).
pub(crate) const MAX_RATE: f64 = 10_000_000.0;
/// Longest single duration (and whole run) accepted: 30 days.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(30 * 86_400);

/// Parse a humantime duration (`10s`, `1m30s`, `250ms`), naming `key` on error.
pub fn parse_duration(key: &str, text: &str) -> Result<Duration, InputError> {
    humantime::parse_duration(text.trim())
        .map_err(|e| InputError::new(key, format!("expected a duration like 10s or 250ms, got {text:?} ({e})")))
}

/// A size in bytes between `min` and `max`: a whole number, or one with a unit (`k`/`KiB`,
/// `M`/`MiB`, `G`/`GiB`, powers of 1024; `B` allowed).
pub(crate) fn size(g: &Given<String>, min: u64, max: u64) -> Result<u64, InputError> {
    let text = g.value.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(g.err(format!("expected a size like 65536, 64KiB or 256MiB, got {text:?}"))),
    };
    let n = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| g.err(format!("expected a size like 65536, 64KiB or 256MiB, got {text:?}")))?;
    if n < min || n > max {
        return Err(g.err(format!("{text} is outside {min}..={max} bytes")));
    }
    Ok(n)
}

/// A duration of at most [`MAX_DURATION`] (zero allowed).
pub(crate) fn duration(g: &Given<String>) -> Result<Duration, InputError> {
    let d = humantime::parse_duration(g.value.trim())
        .map_err(|e| g.err(format!("expected a duration like 10s or 250ms, got {:?} ({e})", g.value)))?;
    if d > MAX_DURATION {
        return Err(g.err(format!("{} is longer than the 30-day limit", g.value.trim())));
    }
    Ok(d)
}

/// A duration longer than zero.
pub(crate) fn positive_duration(g: &Given<String>) -> Result<Duration, InputError> {
    let d = duration(g)?;
    if d.is_zero() {
        return Err(g.err("must be longer than zero"));
    }
    Ok(d)
}

/// A duration no longer than `max` (`what` names the limit in the message).
pub(crate) fn duration_at_most(g: &Given<String>, max: Duration, what: &str) -> Result<Duration, InputError> {
    let d = duration(g)?;
    if d > max {
        return Err(g.err(format!("{} is above the {what} limit", g.value.trim())));
    }
    Ok(d)
}

/// An arrival rate: finite, > 0 (≥ 0 with `zero_ok`), at most [`MAX_RATE`].
pub(crate) fn rate_of<T>(g: &Given<T>, rate: f64, zero_ok: bool) -> Result<f64, InputError> {
    let low_ok = if zero_ok { rate >= 0.0 } else { rate > 0.0 };
    if !rate.is_finite() || !low_ok {
        let want = if zero_ok { "zero or a positive number" } else { "a positive number" };
        return Err(g.err(format!("rate must be {want}, got {rate}")));
    }
    if rate > MAX_RATE {
        return Err(g.err(format!("rate {rate} is above the {MAX_RATE} req/s limit")));
    }
    Ok(rate)
}

/// `g`'s own value as a rate.
pub(crate) fn rate(g: &Given<f64>) -> Result<f64, InputError> {
    rate_of(g, g.value, false)
}

/// A whole number in `[min, max]`.
pub(crate) fn count(g: &Given<i64>, min: i64, max: i64) -> Result<u64, InputError> {
    if g.value < min {
        return Err(g.err(format!("must be at least {min}, got {}", g.value)));
    }
    if g.value > max {
        return Err(g.err(format!("{} is above the {max} limit", g.value)));
    }
    Ok(g.value as u64)
}

/// A finite number in `(low, high]` (`low` itself allowed with `low_ok`).
pub(crate) fn number_in(g: &Given<f64>, low: f64, low_ok: bool, high: f64) -> Result<f64, InputError> {
    let v = g.value;
    let above_low = if low_ok { v >= low } else { v > low };
    if !v.is_finite() || !above_low || v > high {
        let open = if low_ok { "[" } else { "(" };
        return Err(g.err(format!("must be a number in {open}{low}, {high}], got {v}")));
    }
    Ok(v)
}

/// A fraction from `0.01` or `"1%"`, in `[low, high]` (`high_ok`: `high` itself allowed).
pub(crate) fn fraction(g: &Given<FractionText>, low: f64, high: f64, high_ok: bool) -> Result<f64, InputError> {
    let v = match &g.value {
        FractionText::Number(v) => *v,
        FractionText::Text(t) => {
            let t = t.trim();
            let parsed = match t.strip_suffix('%') {
                Some(pct) => pct.trim().parse::<f64>().map(|p| p / 100.0),
                None => t.parse::<f64>(),
            };
            parsed.map_err(|_| g.err(format!("expected a fraction like 0.01 or a percentage like 1%, got {t:?}")))?
        }
    };
    let below_high = if high_ok { v <= high } else { v < high };
    if !v.is_finite() || v < low || !below_high {
        let close = if high_ok { "]" } else { ")" };
        return Err(g.err(format!("must be a fraction in [{low}, {high}{close} (or a percentage), got {v}")));
    }
    Ok(v)
}

/// `--shard INDEX/COUNT`: this machine's part of a run spread over `COUNT` machines.
pub(crate) fn share(g: &Given<String>) -> Result<crate::schedule::Share, InputError> {
    let bad =
        || g.err(format!("expected INDEX/COUNT with 0 ≤ INDEX < COUNT ≤ {MAX_MACHINES}, e.g. 0/4, got {:?}", g.value));
    let (i, n) = g.value.trim().split_once('/').ok_or_else(bad)?;
    let (index, count) = (i.trim().parse::<u64>().map_err(|_| bad())?, n.trim().parse::<u64>().map_err(|_| bad())?);
    if count == 0 || count > MAX_MACHINES || index >= count {
        return Err(bad());
    }
    Ok(crate::schedule::Share { index, count })
}

/// `--start-at`: an RFC 3339 time (`2026-12-01T19:00:00Z`, fractions allowed) or `@SECONDS`
/// since the Unix epoch (`@1764615600.5`).
pub(crate) fn instant(g: &Given<String>) -> Result<std::time::SystemTime, InputError> {
    let text = g.value.trim();
    let bad = |why: String| {
        g.err(format!("expected an RFC 3339 time like 2026-12-01T19:00:00Z or @UNIX_SECONDS, got {text:?} ({why})"))
    };
    match text.strip_prefix('@') {
        Some(secs) => {
            let s: f64 = secs.parse().map_err(|_| bad("not a number".into()))?;
            if !(s.is_finite() && s > 0.0 && s < 1e11) {
                return Err(bad("out of range".into()));
            }
            Ok(std::time::UNIX_EPOCH + Duration::from_secs_f64(s))
        }
        None => humantime::parse_rfc3339_weak(text).map_err(|e| bad(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g<T>(v: T) -> Given<T> {
        Given::flag("--x", v)
    }

    #[test]
    fn fractions_read_numbers_and_percentages() {
        let f = |t: FractionText| fraction(&g(t), 0.0, 1.0, false);
        assert_eq!(f(FractionText::Text("1%".into())).unwrap(), 0.01);
        assert_eq!(f(FractionText::Text(" 0.05 ".into())).unwrap(), 0.05);
        assert_eq!(f(FractionText::Number(0.0)).unwrap(), 0.0);
        for bad in [
            FractionText::Number(1.0),
            FractionText::Number(-0.1),
            FractionText::Text("x%".into()),
            FractionText::Number(f64::NAN),
            FractionText::Text("150%".into()),
        ] {
            assert!(f(bad.clone()).unwrap_err().to_string().starts_with("--x:"), "{bad:?}");
        }
    }

    #[test]
    fn rates_durations_counts_are_bounded() {
        assert!(rate(&g(-1.0)).is_err());
        assert!(rate(&g(0.0)).is_err());
        assert_eq!(rate_of(&g(0.0), 0.0, true).unwrap(), 0.0);
        assert!(rate(&g(f64::INFINITY)).is_err());
        assert!(rate(&g(1e12)).is_err());
        assert!(duration(&g("100000years".into())).is_err());
        assert!(duration(&g("99999999999999999999999s".into())).is_err());
        assert!(positive_duration(&g("0s".into())).is_err());
        assert_eq!(count(&g(3), 1, 10).unwrap(), 3);
        assert!(count(&g(0), 1, 10).is_err());
        assert!(count(&g(-5), 1, 10).is_err());
        assert!(count(&g(i64::MAX), 1, 10).is_err());
    }
}
