//! Any bytes as a JSON card document.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lorekeeper_fuzz::interop::format::{card, parse_json};

fuzz_target!(|data: &[u8]| {
    let Ok(json) = parse_json(data, "input") else { return };
    if let Ok((c, _)) = card::decode_card(json.clone()) {
        let target = if c.spec == card::CardSpec::V3 { card::CardSpec::V3 } else { card::CardSpec::V2 };
        let out = card::encode_card(&c, target);
        if c.spec != card::CardSpec::V1 {
            assert!(lorekeeper_fuzz::keeps_everything(&out, &json), "an unedited card exports with nothing lost:\n{out}\n{json}");
        }
        let _ = card::encode_v2_backfill(&c);
    }
});
