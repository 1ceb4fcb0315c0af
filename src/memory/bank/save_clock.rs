//! The graph's save clock: a long-running process (the workbench, `serve`) saves the
//! graph once the changes its file lacks are `[memory.graph] save_after_secs` old.
//!
//! Why: the file was written only every `save_after` (5,000) changes, on a rebuild, or
//! when a process closed; a process that ran for hours and was killed lost every change
//! since, and the next one replayed them all on open. The save is the background one
//! (graph marked busy so writes go to the exact-scan tail, the file written under a read
//! lock so searches go on, no transaction open while it is written), run on the clock's
//! own low-priority thread. The thread holds only a weak handle and ends with its bank.

use super::MemoryBank;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The clock's sender: a message wakes it to read a changed interval; dropped with the
/// bank, it ends the thread at once.
pub(super) type ClockStop = mpsc::Sender<()>;

/// How often the clock looks: a quarter of the interval, at most 30 s (a save comes at
/// most 30 s after it is due) and at least 20 ms.
fn tick(save_after_secs: f64) -> Duration {
    if save_after_secs <= 0.0 || !save_after_secs.is_finite() {
        return Duration::from_secs(30);
    }
    Duration::from_secs_f64((save_after_secs / 4.0).clamp(0.02, 30.0))
}

/// Start the clock of `bank`; keep the returned sender in the bank.
pub(super) fn start(bank: &Arc<MemoryBank>) -> Option<ClockStop> {
    let (poke, poked) = mpsc::channel::<()>();
    let weak: Weak<MemoryBank> = Arc::downgrade(bank);
    let started = std::thread::Builder::new().name("memory-graph-clock".into()).spawn(move || {
        super::graph::lower_this_threads_priority();
        // When this clock first saw changes the file lacks (none: it has seen none).
        let mut dirty_since: Option<Instant> = None;
        loop {
            let wait = match weak.upgrade() {
                Some(bank) => tick(bank.config().graph.save_after_secs),
                None => return,
            };
            match poked.recv_timeout(wait) {
                // A poke: the interval changed.
                Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            let Some(bank) = weak.upgrade() else { return };
            bank.save_if_stale(&mut dirty_since);
        }
    });
    match started {
        Ok(_) => Some(poke),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the vector graph's save clock; it is saved on close and every `save_after` changes");
            None
        }
    }
}

impl MemoryBank {
    /// Wake the clock to read a changed interval (a short one set on a bank whose clock
    /// waits out a long tick).
    pub(super) fn poke_save_clock(&self) {
        if let Some(clock) = self.save_clock.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = clock.send(());
        }
    }

    /// Save the graph when the changes its file lacks have waited `save_after_secs` since
    /// the clock first saw them; returns whether it saved. Gives way to a build or a save
    /// under way (the next tick tries again).
    fn save_if_stale(&self, dirty_since: &mut Option<Instant>) -> bool {
        let secs = self.config().graph.save_after_secs;
        if secs <= 0.0 || !secs.is_finite() || self.changes.load(Ordering::SeqCst) == 0 || !self.index.has_graph() {
            *dirty_since = None;
            return false;
        }
        let since = *dirty_since.get_or_insert_with(Instant::now);
        if since.elapsed() < Duration::from_secs_f64(secs) || self.rebuilding.swap(true, Ordering::SeqCst) {
            return false;
        }
        let pending = self.changes.load(Ordering::SeqCst);
        let outcome = self.save_graph_claimed();
        // Changes made while it saved start their own wait.
        *dirty_since = None;
        match outcome {
            Ok(()) => {
                tracing::debug!(pending, "vector graph saved by its clock");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "saving the vector graph on its clock failed; trying again after the next interval");
                false
            }
        }
    }
}
