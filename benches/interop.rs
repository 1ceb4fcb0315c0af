//! How fast cards and lorebooks are read and written back.
//!
//! `cargo bench --bench interop`. The big case is a 5,000-entry World Info file (about
//! the largest books people share), read and exported losslessly.

use criterion::{Criterion, criterion_group, criterion_main};
use lorekeeper::interop::format::{card, detect, png, world_info};
use serde_json::{Map, Value, json};
use std::hint::black_box;

fn big_world_info(entries: usize) -> Vec<u8> {
    let mut map = Map::new();
    for uid in 0..entries {
        map.insert(
            uid.to_string(),
            json!({
                "uid": uid, "key": [format!("place{uid}"), format!("/person{uid}\\b/i")], "keysecondary": ["night"],
                "comment": format!("Entry {uid}"), "content": format!("Lore text number {uid} about {{{{char}}}} and the valley. ").repeat(8),
                "constant": uid % 50 == 0, "vectorized": false, "selective": true, "selectiveLogic": uid % 4, "addMemo": true,
                "order": uid % 300, "position": uid % 8, "disable": false, "ignoreBudget": false, "excludeRecursion": false,
                "preventRecursion": false, "delayUntilRecursion": 0, "probability": 100, "useProbability": true, "depth": 4,
                "outletName": "", "group": "", "groupOverride": false, "groupWeight": 100, "scanDepth": null,
                "caseSensitive": null, "matchWholeWords": null, "useGroupScoring": null, "automationId": "", "role": 0,
                "sticky": null, "cooldown": null, "delay": null, "triggers": []
            }),
        );
    }
    serde_json::to_vec(&json!({"entries": Value::Object(map)})).unwrap_or_default()
}

fn bench(c: &mut Criterion) {
    let wi = big_world_info(5000);
    c.bench_function("world_info_5000_parse", |b| b.iter(|| detect::parse_bytes(black_box(&wi)).map(|p| p.json.is_object())));
    let parsed = detect::parse_bytes(&wi).ok();
    if let Some(detect::Document::Lorebook(book)) = parsed.map(|p| p.document) {
        c.bench_function("world_info_5000_lossless_export", |b| b.iter(|| world_info::encode_world_info(black_box(&book))));
    }
    let v3 = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/interop/card_v3_full.json")).unwrap_or_default();
    let v3_text = String::from_utf8_lossy(&v3).into_owned();
    let png_card = png::embed_card_chunks(&png::placeholder_portrait("Bench"), &[("ccv3", &v3_text)]).unwrap_or_default();
    c.bench_function("png_card_v3_import_parse", |b| b.iter(|| detect::parse_bytes(black_box(&png_card)).is_ok()));
    if let Ok(detect::Parsed { document: detect::Document::Card(parsed), .. }) = detect::parse_bytes(&png_card) {
        c.bench_function("card_v3_lossless_export", |b| b.iter(|| card::encode_card(black_box(&parsed.card), card::CardSpec::V3)));
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
