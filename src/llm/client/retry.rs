//! Backoff arithmetic and `Retry-After` parsing for [`crate::llm::LlmClient`]'s retries.
//!
//! Full jitter (a uniform delay between zero and the exponential cap) spreads the
//! retries of many clients that failed together, which plain exponential backoff does
//! not; a server's `Retry-After` is a floor, since asking sooner only earns another 429.

use crate::llm::{CancelToken, LlmError, RetryPolicy};
use std::time::{Duration, Instant, SystemTime};

/// The exponential cap for retry number `attempt` (0 for the first retry).
pub fn backoff_cap(policy: &RetryPolicy, attempt: u32) -> Duration {
    let factor = 1u64.checked_shl(attempt.min(32)).unwrap_or(u64::MAX);
    Duration::from_millis(policy.base_delay_ms.saturating_mul(factor).min(policy.max_delay_ms))
}

/// The delay before retry number `attempt`: full jitter under the exponential cap,
/// never shorter than what the server asked for.
pub fn retry_delay(policy: &RetryPolicy, attempt: u32, server_asked: Option<Duration>) -> Duration {
    let cap = backoff_cap(policy, attempt).as_millis() as u64;
    let jittered = Duration::from_millis(fastrand::u64(0..=cap));
    match server_asked {
        Some(asked) => jittered.max(asked),
        None => jittered,
    }
}

/// Parse a `Retry-After` value: delay seconds (fractions accepted, as some servers
/// send them) or an HTTP date (IMF-fixdate, e.g. `Wed, 21 Oct 2015 07:28:00 GMT`).
/// A date in the past means "now". The obsolete RFC 850 and asctime date forms are not
/// understood and give `None`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let when = SystemTime::from(when.with_timezone(&chrono::Utc));
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parse a protobuf `Duration` as JSON renders it (`"30s"`, `"1.5s"`), which Gemini
/// uses for its `RetryInfo.retryDelay`.
pub fn parse_proto_duration(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().strip_suffix('s')?.parse().ok()?;
    Duration::try_from_secs_f64(secs).ok()
}

/// Sleep for `delay`, waking often enough to return `Cancelled` promptly.
pub fn sleep_cancellable(delay: Duration, cancel: &CancelToken) -> Result<(), LlmError> {
    let until = Instant::now() + delay;
    loop {
        if cancel.is_cancelled() {
            return Err(LlmError::Cancelled);
        }
        let now = Instant::now();
        if now >= until {
            return Ok(());
        }
        std::thread::sleep((until - now).min(Duration::from_millis(25)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy { max_retries: 5, base_delay_ms: 100, max_delay_ms: 1_000 }
    }

    #[test]
    fn the_cap_doubles_then_stops_at_the_maximum() {
        let caps: Vec<u64> = (0..6).map(|a| backoff_cap(&policy(), a).as_millis() as u64).collect();
        assert_eq!(caps, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff_cap(&policy(), 200).as_millis(), 1000, "no overflow on huge attempts");
    }

    #[test]
    fn jitter_stays_under_the_cap_and_honours_the_server() {
        for attempt in 0..5 {
            for _ in 0..200 {
                assert!(retry_delay(&policy(), attempt, None) <= backoff_cap(&policy(), attempt));
            }
        }
        let asked = Duration::from_millis(2_500);
        assert!(retry_delay(&policy(), 0, Some(asked)) >= asked);
    }

    #[test]
    fn jitter_is_spread_out() {
        let delays: std::collections::HashSet<_> = (0..50).map(|_| retry_delay(&policy(), 3, None)).collect();
        assert!(delays.len() > 10, "full jitter should not collapse to a few values");
    }

    #[test]
    fn retry_after_in_seconds_and_as_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_470); // 2015-10-21 07:27:50 UTC
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 0.25 ", now), Some(Duration::from_millis(250)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now), Some(Duration::from_secs(10)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn proto_durations() {
        assert_eq!(parse_proto_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_proto_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_proto_duration("30"), None);
    }

    #[test]
    fn a_cancelled_sleep_returns_at_once() {
        let cancel = CancelToken::new();
        cancel.cancel();
        let started = Instant::now();
        assert_eq!(sleep_cancellable(Duration::from_secs(10), &cancel), Err(LlmError::Cancelled));
        assert!(started.elapsed() < Duration::from_millis(100));
    }
}
