//! The one loop every verb waits in: print the engine's events until one of them
//! settles the verb.

use super::print::print_human;
use crate::engine::{CoreEvent, EngineHandle, Event};
use anyhow::{Result, bail};
use std::io::Write;
use std::time::Duration;

/// Print events until `done` returns a verdict for one of them. With `json` every
/// event is a JSON line on stdout; otherwise streamed text and logs go to stdout and
/// errors to stderr.
pub fn drive<T>(
    engine: &EngineHandle,
    json: bool,
    timeout: Duration,
    mut done: impl FnMut(&Event) -> Option<T>,
) -> Result<T> {
    let mut out = std::io::stdout().lock();
    until(engine, timeout, |event| {
        if json {
            writeln!(out, "{}", serde_json::to_string(event)?)?;
        } else {
            print_human(&mut out, event)?;
        }
        out.flush()?;
        Ok(done(event))
    })
}

/// Wait, printing nothing, until `done` returns a verdict for one of the events: for
/// verbs that print a result of their own rather than the event stream.
pub fn wait<T>(engine: &EngineHandle, timeout: Duration, mut done: impl FnMut(&Event) -> Option<T>) -> Result<T> {
    until(engine, timeout, |event| Ok(done(event)))
}

/// The one loop both wait in: each event goes to `seen` until it returns a verdict; an
/// engine error ends the wait as an error, and so does the deadline.
fn until<T>(engine: &EngineHandle, timeout: Duration, mut seen: impl FnMut(&Event) -> Result<Option<T>>) -> Result<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let event = match engine.events().recv_timeout(left) {
            Ok(event) => event,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => bail!("no result within {timeout:?}"),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => bail!("the engine stopped unexpectedly"),
        };
        if let Some(verdict) = seen(&event)? {
            return Ok(verdict);
        }
        if let Event::Core(CoreEvent::Error { context, message }) = &event {
            bail!("{context}: {message}");
        }
    }
}
