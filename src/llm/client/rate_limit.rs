//! The client-side rate limit: a token bucket of capacity one, i.e. requests spaced at
//! least `60 / requests_per_minute` seconds apart.
//!
//! Capacity one rather than a minute's worth because providers enforce their
//! per-minute quotas over much shorter windows (a limit of 600 a minute is really ten a
//! second), so a burst of a whole minute's quota would be refused anyway. Limiters are
//! shared: every clone of a client uses the same one, and clients built from the same
//! profile share one through [`shared`], so the identity pipeline's parallel agents
//! together stay under the limit.

use crate::llm::retry::sleep_cancellable;
use crate::llm::{CancelToken, LlmError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    /// When the next request may start.
    next_slot: Mutex<Option<Instant>>,
}

impl RateLimiter {
    /// A limiter allowing `per_minute` requests a minute; `None` for zero (no limit).
    pub fn per_minute(per_minute: u32) -> Option<Self> {
        (per_minute > 0).then(|| Self { interval: Duration::from_secs(60) / per_minute, next_slot: Mutex::new(None) })
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Wait for this request's slot. Slots are handed out in call order, so waiting
    /// callers are served first come, first served. A cancelled wait returns at once
    /// (its slot stays taken, which only errs on the slow side).
    pub fn acquire(&self, cancel: &CancelToken) -> Result<(), LlmError> {
        let now = Instant::now();
        let start = {
            let mut next = self.next_slot.lock().unwrap_or_else(|p| p.into_inner());
            let start = next.map_or(now, |slot| slot.max(now));
            *next = Some(start + self.interval);
            start
        };
        if start > now {
            tracing::debug!(wait_ms = (start - now).as_millis() as u64, "rate limit: waiting for a slot");
            sleep_cancellable(start - now, cancel)?;
        }
        Ok(())
    }
}

/// The process-wide limiter for `key` (a profile's identity) at `per_minute`; `None`
/// for no limit. A profile edited to a new rate gets a fresh limiter.
pub fn shared(key: &str, per_minute: u32) -> Option<Arc<RateLimiter>> {
    static LIMITERS: OnceLock<Mutex<HashMap<(String, u32), Arc<RateLimiter>>>> = OnceLock::new();
    let limiter = RateLimiter::per_minute(per_minute)?;
    let mut map = LIMITERS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    Some(map.entry((key.to_string(), per_minute)).or_insert_with(|| Arc::new(limiter)).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_no_limit() {
        assert!(RateLimiter::per_minute(0).is_none());
        assert!(shared("zero", 0).is_none());
    }

    #[test]
    fn requests_are_spaced_by_the_interval() {
        let limiter = RateLimiter::per_minute(1200).unwrap(); // 50 ms apart
        let cancel = CancelToken::new();
        let started = Instant::now();
        for _ in 0..5 {
            limiter.acquire(&cancel).unwrap();
        }
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(200), "five requests took only {elapsed:?}");
    }

    #[test]
    fn threads_share_one_limiter() {
        let limiter = Arc::new(RateLimiter::per_minute(1200).unwrap());
        let started = Instant::now();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let limiter = limiter.clone();
                std::thread::spawn(move || limiter.acquire(&CancelToken::new()).unwrap())
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(started.elapsed() >= Duration::from_millis(150));
    }

    #[test]
    fn shared_limiters_are_per_key_and_rate() {
        let a = shared("profile-a", 60).unwrap();
        assert!(Arc::ptr_eq(&a, &shared("profile-a", 60).unwrap()));
        assert!(!Arc::ptr_eq(&a, &shared("profile-b", 60).unwrap()));
        assert!(!Arc::ptr_eq(&a, &shared("profile-a", 120).unwrap()));
    }

    #[test]
    fn a_cancelled_wait_returns_promptly() {
        let limiter = RateLimiter::per_minute(1).unwrap();
        let cancel = CancelToken::new();
        limiter.acquire(&cancel).unwrap();
        cancel.cancel();
        let started = Instant::now();
        assert_eq!(limiter.acquire(&cancel), Err(LlmError::Cancelled));
        assert!(started.elapsed() < Duration::from_millis(200));
    }
}
