//! PNG cards. The first byte picks the layer under attack:
//! even: any bytes behind a PNG signature (chunk walk, lengths, CRCs, the image);
//! odd: a valid PNG whose `chara`/`ccv3` chunk holds the bytes, with a correct CRC, so
//! the fuzzer reaches base64, UTF-8, JSON and the card decoder through the PNG path.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lorekeeper_fuzz::interop::format::{detect, png};
use std::sync::OnceLock;

fn portrait() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| png::placeholder_portrait("fuzz"))
}

/// `image` with one more tEXt chunk (keyword, raw text) before IEND.
fn with_text_chunk(image: &[u8], keyword: &[u8], text: &[u8]) -> Vec<u8> {
    let iend = image.len() - 12;
    let mut out = image[..iend].to_vec();
    let mut body = b"tEXt".to_vec();
    body.extend_from_slice(keyword);
    body.push(0);
    body.extend_from_slice(text);
    out.extend_from_slice(&((body.len() - 4) as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&png::crc32(&body).to_be_bytes());
    out.extend_from_slice(&image[iend..]);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let bytes = if mode % 2 == 0 {
        let mut bytes = png::SIGNATURE.to_vec();
        bytes.extend_from_slice(rest);
        bytes
    } else {
        let keyword: &[u8] = if mode % 4 == 1 { b"chara" } else { b"ccv3" };
        with_text_chunk(portrait(), keyword, rest)
    };
    if let Ok(parsed) = detect::parse_bytes(&bytes) {
        lorekeeper_fuzz::check_round_trip(&parsed);
    }
    let _ = png::embed_card_chunks(&bytes, &[("chara", "{}")]);
});
