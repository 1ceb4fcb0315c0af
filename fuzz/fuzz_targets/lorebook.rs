//! Any bytes as World Info, lorebook_v3 or a bare character book.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lorekeeper_fuzz::interop::format::{book, parse_json, world_info};

fuzz_target!(|data: &[u8]| {
    let Ok(json) = parse_json(data, "input") else { return };
    if let Ok(b) = world_info::decode_world_info(json.clone()) {
        let _ = book::encode_lorebook_v3(&b);
        let out = world_info::encode_world_info(&b);
        if json.get("entries").is_some_and(|e| e.is_object()) && !has_duplicate_uids(&json) {
            assert!(lorekeeper_fuzz::keeps_everything(&out, &json), "an unedited World Info file exports with nothing lost:\n{out}\n{json}");
        }
    }
    if let Ok(b) = book::decode_lorebook_v3(json.clone()) {
        let _ = world_info::encode_world_info(&b);
        let _ = book::encode_lorebook_v3(&b);
    }
    if let Ok(b) = book::decode_character_book(json.clone(), "") {
        let _ = book::encode_character_book(&b, book::BookFlavor::V2);
    }
});

/// Entries whose key is not their uid are re-keyed on export, by design.
fn has_duplicate_uids(json: &serde_json::Value) -> bool {
    let Some(entries) = json.get("entries").and_then(|e| e.as_object()) else { return false };
    entries.iter().any(|(key, e)| match e.get("uid") {
        Some(uid) => uid.to_string().trim_matches('"') != key,
        None => key.parse::<i64>().is_err(),
    })
}
