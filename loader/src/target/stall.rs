//! Stall window arithmetic (pure): is a moment inside a stall, and when does that stall end.
//!
//! The server side (holding a response until the returned instant) lives in `server.rs`.

use std::time::Duration;

use super::Stall;

/// If `elapsed` (time since the target started) falls inside a stall window
/// `[k·every, k·every + pause)`, k ≥ 1, the end of that window as time since start;
/// otherwise `None`. The first period `[0, every)` never stalls, so a freshly started
/// target always answers.
pub(super) fn window_end(elapsed: Duration, stall: Stall) -> Option<Duration> {
    // Nanoseconds as u128: exact for any Duration, no float rounding at window edges.
    let every = stall.every.as_nanos();
    if every == 0 {
        return None;
    }
    let t = elapsed.as_nanos();
    let k = t / every;
    if k == 0 {
        return None;
    }
    let start = k * every;
    let end = start + stall.pause.as_nanos();
    if t >= end {
        return None;
    }
    // end < (k+1)·every ≤ t + every: fits a Duration whenever `elapsed` does, short of
    // the last `every` before Duration::MAX, where saturating is the honest answer.
    let secs = u64::try_from(end / 1_000_000_000).unwrap_or(u64::MAX);
    Some(Duration::new(secs, (end % 1_000_000_000) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const STALL: Stall = Stall { every: Duration::from_secs(2), pause: Duration::from_millis(500) };

    #[test]
    fn first_period_never_stalls() {
        for t in [0, 1, 499, 500, 1999] {
            assert_eq!(window_end(ms(t), STALL), None, "t={t}ms");
        }
    }

    #[test]
    fn inside_a_window_returns_its_end() {
        assert_eq!(window_end(ms(2000), STALL), Some(ms(2500)));
        assert_eq!(window_end(ms(2250), STALL), Some(ms(2500)));
        assert_eq!(window_end(ms(2499), STALL), Some(ms(2500)));
        assert_eq!(window_end(ms(4000), STALL), Some(ms(4500)));
        assert_eq!(window_end(ms(20_100), STALL), Some(ms(20_500)));
    }

    #[test]
    fn window_is_half_open() {
        assert_eq!(window_end(Duration::from_nanos(1_999_999_999), STALL), None);
        assert_eq!(window_end(Duration::from_nanos(2_499_999_999), STALL), Some(ms(2500)));
        assert_eq!(window_end(ms(2500), STALL), None);
    }

    #[test]
    fn between_windows_is_free() {
        for t in [2500, 3000, 3999, 4500, 5999] {
            assert_eq!(window_end(ms(t), STALL), None, "t={t}ms");
        }
    }

    #[test]
    fn sub_millisecond_periods_are_exact() {
        let s = Stall { every: Duration::from_micros(300), pause: Duration::from_micros(100) };
        assert_eq!(window_end(Duration::from_micros(650), s), Some(Duration::from_micros(700)));
        assert_eq!(window_end(Duration::from_micros(700), s), None);
    }

    #[test]
    fn far_future_does_not_overflow() {
        let late = Duration::MAX - ms(100);
        let _ = window_end(late, STALL);
        let _ = window_end(Duration::MAX, STALL);
    }
}
