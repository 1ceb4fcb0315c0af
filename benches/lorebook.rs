//! How long lorebook activation takes for a big book.
//!
//! `cargo bench --bench lorebook`. 5,000 entries (three keys each, some regex keys,
//! secondary keys, inclusion groups, constants, probability) against 20 recent
//! messages, with recursion on. `prepared` reuses a `KeyIndex` (the scene engine's
//! steady state); `cold` compiles the keys on every call (the first prompt after a book
//! changes). The p50 is `median` in `target/criterion/<name>/new/estimates.json`.

use criterion::{Criterion, criterion_group, criterion_main};
use lorekeeper::lorebook::activation::{
    ActivationOptions, ActivationState, KeyIndex, ScanInput, activate, activate_with_index, book_entries,
};
use lorekeeper::lorebook::{EntryId, LoreEntry, Lorebook};
use std::hint::black_box;

fn big_book(entries: usize) -> Lorebook {
    let entries = (0..entries)
        .map(|i| LoreEntry {
            id: Some(EntryId::Number(i as i64)),
            keys: vec![
                format!("place{i}"),
                if i % 50 == 0 { format!("/person{i}\\b/i") } else { format!("person{i}") },
                format!("Alias {i}"),
            ],
            secondary_keys: if i % 4 == 0 { vec!["night".into(), format!("moon{i}")] } else { Vec::new() },
            content: format!("Lore number {i} about the valley, the river and person{}. ", (i * 7) % 5000).repeat(4),
            constant: i % 500 == 0,
            insertion_order: (i % 300) as i64,
            group: if i % 10 == 0 { format!("g{}", i % 30) } else { String::new() },
            probability: if i % 3 == 0 { 70 } else { 100 },
            ..Default::default()
        })
        .collect();
    Lorebook { entries, ..Default::default() }
}

fn messages() -> Vec<String> {
    (0..20)
        .map(|m| {
            let mut text = String::from("The travellers walk along the river at night, talking about the valley. ");
            for k in 0..6 {
                text.push_str(&format!("They mention place{} and Person{}. ", (m * 97 + k * 13) % 5000, (m * 31 + k) % 5000));
            }
            text
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let book = big_book(5000);
    let scan = book_entries("bench", &book);
    let messages = messages();
    let input = ScanInput {
        messages: messages.iter().map(String::as_str).collect(),
        message_number: 40,
        ..Default::default()
    };
    let options = ActivationOptions { scan_depth: 20, token_budget: Some(4000), seed: 7, ..Default::default() };
    let index = KeyIndex::build(scan.iter().map(|s| s.entry), &options);
    let sample = activate_with_index(&scan, &index, &input, &mut ActivationState::default(), &options);
    eprintln!(
        "lorebook bench: {} activated, {} tokens of {:?}, {} recursion passes",
        sample.activated.len(),
        sample.tokens_used,
        sample.token_budget,
        sample.recursion_passes
    );

    let mut group = c.benchmark_group("lorebook_activation");
    group.sample_size(30);
    group.bench_function("5000_entries_20_messages_prepared", |b| {
        b.iter(|| activate_with_index(black_box(&scan), &index, black_box(&input), &mut ActivationState::default(), &options))
    });
    group.bench_function("5000_entries_20_messages_cold", |b| {
        b.iter(|| activate(black_box(&scan), black_box(&input), &mut ActivationState::default(), &options))
    });
    group.bench_function("5000_entries_build_index", |b| b.iter(|| KeyIndex::build(scan.iter().map(|s| s.entry), &options)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
