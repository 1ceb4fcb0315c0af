//! Any bytes behind a PNG signature: chunk walk, CRCs, base64, UTF-8, JSON, card.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lorekeeper_fuzz::interop::format::{detect, png};

fuzz_target!(|data: &[u8]| {
    let mut bytes = png::SIGNATURE.to_vec();
    bytes.extend_from_slice(data);
    if let Ok(parsed) = detect::parse_bytes(&bytes) {
        lorekeeper_fuzz::check_round_trip(&parsed);
    }
    let _ = png::embed_card_chunks(&bytes, &[("chara", "{}")]);
});
