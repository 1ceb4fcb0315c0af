//! What a front door shows, watched for changes another process makes to the library
//! (the CLI sending a chat message or playing a round, `lorekeeper serve`, a second
//! window): their events never reach this engine, so a view built from ours alone goes
//! stale, and a control that acts on "the last" exchange or round would act on one the
//! user never saw. A [`Watch`] reads a cheap standing of its subject every [`EVERY`]
//! while the library's `PRAGMA data_version` says another connection committed, and
//! calls its owner back when the standing moved for a reason that was not ours.
//!
//! Ours is told apart by [`Watch::ours`], which the owning capability wraps around each
//! of its commands: while one runs the watch does not judge, and after it the standing
//! it left is the known one. A read that overlapped a command of ours is thrown away.
//! The owner (a capability) decides what a standing is and what to say when it moved;
//! this module knows none of them.

use crate::store::{Store, StoreError};
use rusqlite::Connection;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// How often a watched subject is read again.
pub const EVERY: std::time::Duration = std::time::Duration::from_secs(2);

type Read<S> = dyn Fn(&Connection, Option<&str>) -> Result<S, StoreError> + Send + Sync;
type Moved<S> = dyn Fn(Option<&str>, &S, &S) + Send + Sync;

/// One subject watched (or none: then only what the standing reads without one).
pub struct Watch<S> {
    store: Store,
    read: Box<Read<S>>,
    moved: Box<Moved<S>>,
    state: Mutex<Standing<S>>,
    /// Commands of ours running now, and a count bumped as each starts and ends.
    busy: AtomicUsize,
    generation: AtomicU64,
    /// Handed out in the order the subjects were asked for ([`Watch::ticket`]).
    tickets: AtomicU64,
}

struct Standing<S> {
    subject: Option<String>,
    known: Option<S>,
    /// The ticket of the [`Watch::set`] that named `subject`.
    ticket: u64,
}

impl<S: PartialEq + Clone + Send + 'static> Watch<S> {
    /// A watch of nothing yet, read on `runtime` every [`EVERY`] until it is dropped.
    /// `read` gives the subject's standing; `moved` is called with (subject, before,
    /// now) when another process changed it.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        store: Store,
        read: impl Fn(&Connection, Option<&str>) -> Result<S, StoreError> + Send + Sync + 'static,
        moved: impl Fn(Option<&str>, &S, &S) + Send + Sync + 'static,
    ) -> Arc<Self> {
        let watch = Arc::new(Self {
            store,
            read: Box::new(read),
            moved: Box::new(moved),
            state: Mutex::new(Standing { subject: None, known: None, ticket: 0 }),
            busy: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            tickets: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&watch);
        runtime.spawn(async move {
            // The reader is kept from tick to tick: `data_version` is per connection.
            let mut reader: Option<(Connection, i64)> = None;
            loop {
                tokio::time::sleep(EVERY).await;
                let Some(watch) = weak.upgrade() else { return };
                drop(watch);
                let weak: Weak<Self> = weak.clone();
                let taken = reader.take();
                match tokio::task::spawn_blocking(move || Self::tick(&weak, taken)).await {
                    Ok(Some(kept)) => reader = Some(kept),
                    Ok(None) => {}
                    // The watch is gone (or its read panicked): nothing is left to tell.
                    Err(_) => return,
                }
            }
        });
        watch
    }

    /// A place in line for [`Watch::set`], taken when the subject is asked for: the
    /// sets themselves run side by side on the runtime, and the one asked for last wins
    /// even when an earlier one (a window's "nothing open yet" at start) finishes after it.
    pub fn ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Watch `subject` from now on; its standing as it is now is the known one. A set
    /// whose `ticket` is older than the one in force changes nothing.
    pub fn set(&self, ticket: u64, subject: Option<String>) {
        let known = self.read_now(subject.as_deref());
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if ticket < state.ticket {
            return;
        }
        *state = Standing { subject, known, ticket };
    }

    /// Run a command of ours: the watch does not judge while it runs, and takes what
    /// it left as known (it was said by our own events).
    pub fn ours<T>(&self, work: impl FnOnce() -> T) -> T {
        self.busy.fetch_add(1, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
        let out = work();
        let subject = self.state.lock().unwrap_or_else(|p| p.into_inner()).subject.clone();
        let known = self.read_now(subject.as_deref());
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.subject == subject {
                state.known = known;
            }
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.busy.fetch_sub(1, Ordering::SeqCst);
        out
    }

    fn read_now(&self, subject: Option<&str>) -> Option<S> {
        let reader = self.store.reader().ok()?;
        (self.read)(&reader, subject).ok()
    }

    /// One look: the reader to keep for the next, `None` when it could not be opened.
    fn tick(weak: &Weak<Self>, reader: Option<(Connection, i64)>) -> Option<(Connection, i64)> {
        let watch = weak.upgrade()?;
        let (conn, seen) = match reader {
            Some(kept) => kept,
            None => (watch.store.reader().ok()?, -1),
        };
        let version: i64 = match conn.query_row("PRAGMA data_version", [], |r| r.get(0)) {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(error = %e, "watch: data_version");
                return None;
            }
        };
        if version == seen {
            return Some((conn, version));
        }
        let generation = watch.generation.load(Ordering::SeqCst);
        if watch.busy.load(Ordering::SeqCst) > 0 {
            // Looked at again once our command is done (the version stays unseen).
            return Some((conn, seen));
        }
        let subject = watch.state.lock().unwrap_or_else(|p| p.into_inner()).subject.clone();
        let now = match (watch.read)(&conn, subject.as_deref()) {
            Ok(now) => now,
            Err(e) => {
                tracing::debug!(error = %e, "watch: read");
                return Some((conn, seen));
            }
        };
        if watch.generation.load(Ordering::SeqCst) != generation {
            return Some((conn, seen));
        }
        let before = {
            let mut state = watch.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.subject != subject {
                return Some((conn, seen));
            }
            match state.known.as_ref() {
                Some(known) if *known == now => return Some((conn, version)),
                _ => state.known.replace(now.clone()),
            }
        };
        // Said outside the lock: the event channel may make the call wait.
        if let Some(before) = before {
            (watch.moved)(subject.as_deref(), &before, &now);
        }
        Some((conn, version))
    }
}
