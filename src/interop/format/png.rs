//! PNG cards: the card is base64 of UTF-8 JSON in a `tEXt` chunk, `chara` for V2 and
//! `ccv3` for V3.
//!
//! The chunk walk is our own (about a page) rather than the `png` crate's text
//! support, because import has to tell the user precisely what is wrong: a truncated
//! file, a bad CRC, an oversized chunk. The `png` crate still decodes the image to prove
//! it is one, and encodes the placeholder portrait.

use super::FormatError;
use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

pub const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n'];
/// Largest card text chunk accepted. Real cards with embedded lorebooks reach a few
/// MiB; this bounds what a hostile file can make us decode.
pub const MAX_CARD_CHUNK: u64 = 16 * 1024 * 1024;
/// Decoding the image may allocate at most this much (stops decompression bombs).
const MAX_IMAGE_BYTES: usize = 256 * 1024 * 1024;

/// Chunk keywords that hold a card; removed from an image before new ones are written.
const CARD_KEYWORDS: [&str; 2] = ["chara", "ccv3"];

/// One chunk of a PNG file.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    pub kind: [u8; 4],
    pub data: &'a [u8],
    /// Offset of the chunk's length field in the file.
    pub offset: usize,
}

impl Chunk<'_> {
    pub fn name(&self) -> String {
        String::from_utf8_lossy(&self.kind).into_owned()
    }

    /// For a `tEXt` chunk: its keyword and text bytes.
    pub fn text(&self) -> Option<(&[u8], &[u8])> {
        if &self.kind != b"tEXt" {
            return None;
        }
        let nul = self.data.iter().position(|b| *b == 0)?;
        Some((&self.data[..nul], &self.data[nul + 1..]))
    }
}

/// Split a PNG into its chunks, checking the signature, every length and CRC, and that
/// the file starts with `IHDR` and ends with `IEND`.
pub fn chunks(bytes: &[u8]) -> Result<Vec<Chunk<'_>>, FormatError> {
    if bytes.len() < SIGNATURE.len() || bytes[..SIGNATURE.len()] != SIGNATURE {
        return Err(FormatError::BadPng("the PNG signature is missing".into()));
    }
    let mut out = Vec::new();
    let mut at = SIGNATURE.len();
    loop {
        if at == bytes.len() {
            return Err(FormatError::Truncated("the file ends before the IEND chunk".into()));
        }
        let header = bytes
            .get(at..at + 8)
            .ok_or_else(|| FormatError::Truncated(format!("a chunk header at byte {at} is cut off")))?;
        let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as u64;
        let kind = [header[4], header[5], header[6], header[7]];
        let name = String::from_utf8_lossy(&kind).into_owned();
        if !kind.iter().all(u8::is_ascii_alphabetic) {
            return Err(FormatError::BadPng(format!("byte {at} does not start a chunk (type {:?})", kind)));
        }
        if length > i32::MAX as u64 {
            return Err(FormatError::BadPng(format!("the {name} chunk at byte {at} declares an impossible length {length}")));
        }
        if matches!(&kind, b"tEXt" | b"zTXt" | b"iTXt") && length > MAX_CARD_CHUNK {
            return Err(FormatError::Oversized { chunk: name, size: length, limit: MAX_CARD_CHUNK });
        }
        let data_start = at + 8;
        let data_end = data_start + length as usize;
        let crc_end = data_end + 4;
        if crc_end > bytes.len() {
            return Err(FormatError::Truncated(format!(
                "the {name} chunk at byte {at} needs {length} bytes but the file ends first"
            )));
        }
        let stored = u32::from_be_bytes([bytes[data_end], bytes[data_end + 1], bytes[data_end + 2], bytes[data_end + 3]]);
        if crc32(&bytes[at + 4..data_end]) != stored {
            return Err(FormatError::BadCrc { chunk: name, offset: at });
        }
        if out.is_empty() && &kind != b"IHDR" {
            return Err(FormatError::BadPng(format!("the first chunk is {name}, not IHDR")));
        }
        out.push(Chunk { kind, data: &bytes[data_start..data_end], offset: at });
        at = crc_end;
        if &kind == b"IEND" {
            return Ok(out);
        }
    }
}

/// The card texts found in a PNG.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CardChunks {
    /// Decoded JSON text of the `ccv3` chunk.
    pub ccv3: Option<String>,
    /// Decoded JSON text of the `chara` chunk.
    pub chara: Option<String>,
}

impl CardChunks {
    /// The text to import: `ccv3` when both exist, as the V3 spec asks.
    pub fn preferred(&self) -> Option<(&'static str, &str)> {
        self.ccv3.as_deref().map(|t| ("ccv3", t)).or_else(|| self.chara.as_deref().map(|t| ("chara", t)))
    }
}

/// Read the `chara` / `ccv3` chunks: base64 → bytes → UTF-8 text. A chunk that is
/// present but damaged is an error even when the other one is fine, so a half-broken
/// card is never imported silently.
pub fn read_card_chunks(bytes: &[u8]) -> Result<CardChunks, FormatError> {
    let mut found = CardChunks::default();
    for chunk in chunks(bytes)? {
        let Some((keyword, text)) = chunk.text() else { continue };
        let slot = if keyword.eq_ignore_ascii_case(b"ccv3") {
            &mut found.ccv3
        } else if keyword.eq_ignore_ascii_case(b"chara") {
            &mut found.chara
        } else {
            continue;
        };
        if slot.is_some() {
            continue; // the first chunk of a kind wins, as in other readers
        }
        let name = String::from_utf8_lossy(keyword).to_ascii_lowercase();
        let decoded = decode_base64(text).map_err(|reason| FormatError::Base64 { chunk: name.clone(), reason })?;
        let json = String::from_utf8(decoded).map_err(|e| FormatError::Utf8 {
            what: format!("the decoded `{name}` chunk"),
            valid_up_to: e.utf8_error().valid_up_to(),
        })?;
        *slot = Some(json);
    }
    Ok(found)
}

fn decode_base64(text: &[u8]) -> Result<Vec<u8>, String> {
    // Some writers wrap lines or drop the padding; neither changes the data.
    let compact: Vec<u8> = text.iter().copied().filter(|b| !b.is_ascii_whitespace()).collect();
    let engine =
        GeneralPurpose::new(&base64::alphabet::STANDARD, GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent));
    engine.decode(&compact).map_err(|e| e.to_string())
}

/// Decode the image itself (first frame), proving the file is a usable picture.
pub fn validate_image(bytes: &[u8]) -> Result<(u32, u32), FormatError> {
    let limits = png::Limits { bytes: MAX_IMAGE_BYTES };
    let decoder = png::Decoder::new_with_limits(std::io::Cursor::new(bytes), limits);
    let mut reader = decoder.read_info().map_err(|e| FormatError::BadPng(e.to_string()))?;
    let size = reader.output_buffer_size().ok_or_else(|| FormatError::BadPng("the image is too large to decode".into()))?;
    if size > MAX_IMAGE_BYTES {
        return Err(FormatError::BadPng(format!("the image needs {size} bytes to decode, over the limit")));
    }
    let mut buf = vec![0; size];
    let info = reader.next_frame(&mut buf).map_err(|e| FormatError::BadPng(format!("the image data is damaged: {e}")))?;
    Ok((info.width, info.height))
}

/// The PNG with every card chunk removed (what is kept as the character's portrait).
pub fn strip_card_chunks(bytes: &[u8]) -> Result<Vec<u8>, FormatError> {
    embed_card_chunks(bytes, &[])
}

/// The PNG with its card chunks replaced by `cards` (`(keyword, json)` pairs), each
/// written as a `tEXt` chunk of base64 UTF-8 JSON just before `IEND`.
pub fn embed_card_chunks(bytes: &[u8], cards: &[(&str, &str)]) -> Result<Vec<u8>, FormatError> {
    let parsed = chunks(bytes)?;
    let mut out = Vec::with_capacity(bytes.len() + cards.iter().map(|(_, j)| j.len() * 4 / 3 + 32).sum::<usize>());
    out.extend_from_slice(&SIGNATURE);
    for chunk in parsed {
        if &chunk.kind == b"IEND" {
            for (keyword, json) in cards {
                let mut data = Vec::with_capacity(keyword.len() + 1 + json.len() * 4 / 3 + 4);
                data.extend_from_slice(keyword.as_bytes());
                data.push(0);
                data.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(json.as_bytes()).as_bytes());
                write_chunk(&mut out, b"tEXt", &data);
            }
        }
        let is_card = matches!(&chunk.kind, b"tEXt" | b"zTXt" | b"iTXt") && {
            let keyword = chunk.data.split(|b| *b == 0).next().unwrap_or_default();
            CARD_KEYWORDS.iter().any(|k| keyword.eq_ignore_ascii_case(k.as_bytes()))
        };
        if !is_card {
            write_chunk(&mut out, &chunk.kind, chunk.data);
        }
    }
    Ok(out)
}

fn write_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let crc_start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[crc_start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A 256×256 portrait for cards exported with no picture of their own: a head-and-
/// shoulders silhouette on a background whose colour comes from the name, so different
/// characters get different placeholders.
pub fn placeholder_portrait(name: &str) -> Vec<u8> {
    const SIZE: u32 = 256;
    let hash = crc32(name.as_bytes());
    let hue = (hash % 360) as f32;
    let (br, bg, bb) = hsl_to_rgb(hue, 0.45, 0.55);
    let (fr, fg, fb) = hsl_to_rgb(hue, 0.35, 0.25);
    let mut pixels = Vec::with_capacity((SIZE * SIZE * 3) as usize);
    for y in 0..SIZE {
        for x in 0..SIZE {
            let (fx, fy) = (x as f32, y as f32);
            let head = (fx - 128.0).powi(2) + (fy - 100.0).powi(2) < 48.0f32.powi(2);
            let shoulders = fy > 160.0 && ((fx - 128.0) / 100.0).powi(2) + ((fy - 256.0) / 96.0).powi(2) < 1.0;
            let shade = 1.0 - fy / SIZE as f32 * 0.25;
            let (r, g, b) = if head || shoulders { (fr, fg, fb) } else { (br * shade, bg * shade, bb * shade) };
            pixels.extend_from_slice(&[r as u8, g as u8, b as u8]);
        }
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, SIZE, SIZE);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    // Encoding a fixed-size in-memory image into a Vec cannot fail; if it ever did,
    // the empty result is caught by the caller's chunk walk.
    if let Ok(mut writer) = encoder.write_header() {
        let _ = writer.write_image_data(&pixels);
    }
    out
}

/// A small square portrait from a picture's RGBA8 pixels, as PNG: the largest square
/// from the top middle (a card's face is near its top), shrunk by averaging to at most
/// `side` pixels a side. A front door draws it at list size without decoding the card.
pub fn square_thumbnail(width: u32, height: u32, rgba: &[u8], side: u32) -> Vec<u8> {
    let (w, h) = (width as usize, height as usize);
    let square = w.min(h);
    if square == 0 || rgba.len() < w * h * 4 || side == 0 {
        return Vec::new();
    }
    let out_side = square.min(side as usize);
    let left = (w - square) / 2;
    let mut pixels = Vec::with_capacity(out_side * out_side * 4);
    for oy in 0..out_side {
        let (y0, y1) = (oy * square / out_side, ((oy + 1) * square / out_side).max(oy * square / out_side + 1));
        for ox in 0..out_side {
            let (x0, x1) = (left + ox * square / out_side, (left + (ox + 1) * square / out_side).max(left + ox * square / out_side + 1));
            // Colours weighted by alpha, so a transparent pixel does not darken its neighbours.
            let (mut r, mut g, mut b, mut a, mut n) = (0u64, 0u64, 0u64, 0u64, 0u64);
            for y in y0..y1 {
                for p in rgba[(y * w + x0) * 4..(y * w + x1) * 4].chunks_exact(4) {
                    let alpha = u64::from(p[3]);
                    r += u64::from(p[0]) * alpha;
                    g += u64::from(p[1]) * alpha;
                    b += u64::from(p[2]) * alpha;
                    a += alpha;
                    n += 1;
                }
            }
            let colour = |sum: u64| if a == 0 { 0 } else { (sum / a) as u8 };
            pixels.extend_from_slice(&[colour(r), colour(g), colour(b), (a / n.max(1)) as u8]);
        }
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, out_side as u32, out_side as u32);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    // As above: an in-memory encode of a checked size does not fail; if it did, the
    // empty result reads as "no picture".
    let written = encoder.write_header().and_then(|mut writer| writer.write_image_data(&pixels));
    if written.is_err() {
        return Vec::new();
    }
    out
}

fn hsl_to_rgb(h: f32, s: f32, l: f32) -> (f32, f32, f32) {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let x = c * (1.0 - ((h / 60.0) % 2.0 - 1.0).abs());
    let m = l - c / 2.0;
    let (r, g, b) = match h as u32 {
        0..=59 => (c, x, 0.0),
        60..=119 => (x, c, 0.0),
        120..=179 => (0.0, c, x),
        180..=239 => (0.0, x, c),
        240..=299 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    ((r + m) * 255.0, (g + m) * 255.0, (b + m) * 255.0)
}

/// CRC-32 (ISO-HDLC, the one PNG uses).
pub fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut n = 0;
        while n < 256 {
            let mut c = n as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            table[n] = c;
            n += 1;
        }
        table
    };
    let mut crc = 0xFFFF_FFFFu32;
    for b in bytes {
        crc = TABLE[((crc ^ *b as u32) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc ^ 0xFFFF_FFFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_known_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b"IEND"), 0xAE42_6082);
    }

    #[test]
    fn placeholder_is_a_valid_image_and_round_trips_a_card() {
        let png = placeholder_portrait("Aria");
        assert_eq!(validate_image(&png).unwrap(), (256, 256));
        let with = embed_card_chunks(&png, &[("chara", "{\"a\":\"é\"}"), ("ccv3", "{}")]).unwrap();
        assert_eq!(validate_image(&with).unwrap(), (256, 256));
        let found = read_card_chunks(&with).unwrap();
        assert_eq!(found.chara.as_deref(), Some("{\"a\":\"é\"}"));
        assert_eq!(found.preferred(), Some(("ccv3", "{}")));
        let stripped = strip_card_chunks(&with).unwrap();
        assert_eq!(stripped, png);
        assert_eq!(read_card_chunks(&stripped).unwrap(), CardChunks::default());
    }

    #[test]
    fn a_thumbnail_is_the_top_square_shrunk() {
        // 4 wide, 8 tall: the top 4×4 is red, the rest blue; one transparent pixel.
        let mut rgba = Vec::new();
        for y in 0..8 {
            for x in 0..4 {
                let pixel = if y < 4 { [200, 0, 0, 255] } else { [0, 0, 200, 255] };
                rgba.extend_from_slice(if (x, y) == (0, 0) { &[0, 255, 0, 0] } else { &pixel });
            }
        }
        let png = square_thumbnail(4, 8, &rgba, 2);
        let (w, h, pixels) = crate::character::rgba(&png).unwrap();
        assert_eq!((w, h), (2, 2));
        // Top left averages three opaque reds and a transparent green: red, 3/4 opaque.
        assert_eq!(&pixels[0..4], &[200, 0, 0, 191]);
        assert!(pixels.chunks_exact(4).skip(1).all(|p| p == [200, 0, 0, 255]), "only the top square is used: {pixels:?}");
        // A picture smaller than the side keeps its size; nothing to read gives nothing.
        assert_eq!(crate::character::rgba(&square_thumbnail(4, 8, &rgba, 96)).unwrap().0, 4);
        assert!(square_thumbnail(0, 0, &[], 96).is_empty());
        assert!(square_thumbnail(4, 8, &rgba[..10], 96).is_empty());
    }

    #[test]
    fn unpadded_and_wrapped_base64_is_accepted() {
        assert_eq!(decode_base64(b"eyJh\nIjox fQ").unwrap(), b"{\"a\":1}");
        assert!(decode_base64(b"@@@@").is_err());
    }
}
