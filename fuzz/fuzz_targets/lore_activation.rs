//! Lore activation on any World Info book and any chat text: the first two bytes give
//! where the book ends and the text begins. Hostile keys (huge or catastrophic regular
//! expressions, thousands of entries, recursion loops, zero-width matches, odd Unicode)
//! must neither panic nor run unbounded: the time budget is short, and a report that
//! names an entry must name one that exists.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lorekeeper_fuzz::interop::format::{parse_json, world_info};
use lorekeeper_fuzz::lorebook::activation::{self, ActivationOptions, ActivationState, ScanInput};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let split = (usize::from(data[0]) << 8 | usize::from(data[1])).min(data.len() - 2) + 2;
    let (book, text) = (&data[2..split], &data[split..]);
    let Ok(json) = parse_json(book, "input") else { return };
    let Ok(book) = world_info::decode_world_info(json) else { return };
    let text = String::from_utf8_lossy(text);
    let messages: Vec<&str> = text.split('\n').collect();
    let entries = activation::book_entries("fuzz", &book);
    let input = ScanInput { messages, message_number: 3, ..Default::default() };
    let options = ActivationOptions { time_budget: Some(std::time::Duration::from_millis(50)), ..Default::default() }.with_book(&book);
    let mut state = ActivationState::default();
    let started = std::time::Instant::now();
    let report = activation::activate(&entries, &input, &mut state, &options);
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "activation ran {:?}", started.elapsed());
    assert_eq!(report.outcomes.len(), entries.len(), "every entry has an outcome");
    for activated in &report.activated {
        assert!(activated.index < entries.len());
    }
    // The same timers carried into the next message behave (sticky, cooldown, delay).
    let next = ScanInput { message_number: 4, ..input };
    let _ = activation::activate(&entries, &next, &mut state, &options);
});
