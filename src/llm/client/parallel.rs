//! How many requests one profile has in flight at once.
//!
//! A self-hosted server often serves one request at a time, and some do worse than
//! queue the rest: llama.cpp's Python server (`interrupt_requests`, on by default) ends a
//! running stream with `[DONE]` the moment another request arrives, so two identity
//! agents of one wave, or a scene's Director and a chat turn, cut each other's replies
//! off again and again. The slots make the second request wait here instead, where it
//! can still be cancelled.

use crate::llm::{CancelToken, LlmError};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

/// A counting semaphore shared by every client of one profile.
pub struct Slots {
    limit: u32,
    used: Mutex<u32>,
    freed: Condvar,
}

/// A taken slot, given back when dropped.
pub struct Slot<'a> {
    slots: &'a Slots,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut used = self.slots.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(1);
        self.slots.freed.notify_one();
    }
}

impl Slots {
    pub fn new(limit: u32) -> Self {
        Self { limit: limit.max(1), used: Mutex::new(0), freed: Condvar::new() }
    }

    /// Wait for a free slot; `Cancelled` if the call is cancelled while waiting.
    pub fn acquire(&self, cancel: &CancelToken) -> Result<Slot<'_>, LlmError> {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used >= self.limit {
            if cancel.is_cancelled() {
                return Err(LlmError::Cancelled);
            }
            used = self.freed.wait_timeout(used, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
        }
        *used += 1;
        Ok(Slot { slots: self })
    }

    pub fn in_use(&self) -> u32 {
        *self.used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The slots of the profile under `key` with `limit` requests at once.
pub fn shared(key: &str, limit: u32) -> Arc<Slots> {
    static SLOTS: OnceLock<Mutex<HashMap<(String, u32), Arc<Slots>>>> = OnceLock::new();
    let mut map = SLOTS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    map.entry((key.to_string(), limit)).or_insert_with(|| Arc::new(Slots::new(limit))).clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn no_more_than_the_limit_run_at_once() {
        let slots = Arc::new(Slots::new(1));
        let running = Arc::new(AtomicU32::new(0));
        let peak = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (slots, running, peak) = (slots.clone(), running.clone(), peak.clone());
                std::thread::spawn(move || {
                    let _slot = slots.acquire(&CancelToken::new()).unwrap();
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(peak.load(Ordering::SeqCst), 1);
        assert_eq!(slots.in_use(), 0);
    }

    #[test]
    fn a_wait_for_a_slot_can_be_cancelled() {
        let slots = Slots::new(1);
        let _held = slots.acquire(&CancelToken::new()).unwrap();
        let cancel = CancelToken::new();
        cancel.cancel();
        assert!(matches!(slots.acquire(&cancel), Err(LlmError::Cancelled)));
    }
}
