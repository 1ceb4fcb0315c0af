//! The file formats, with no knowledge of the library: bytes in, typed documents out,
//! and back. Kept free of the store and the engine so the fuzz targets can build just
//! this part (see `fuzz/`).
//!
//! Invariant: every parser returns a [`FormatError`] for bad input, never panics, and
//! bounds what it allocates (file size, chunk size, JSON nesting).

pub mod book;
pub mod card;
pub mod detect;
pub mod fields;
pub mod foreign;
pub mod png;
pub mod preserve;
pub mod world_info;

/// Largest file accepted for import. Portrait PNGs are far smaller; this stops a
/// mistaken drop of a video from being read into memory.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Why a file could not be read. Messages name the problem and where it is, so the
/// import report can say it to the user as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("the file is {size} bytes, over the {limit}-byte import limit")]
    TooLarge { size: u64, limit: u64 },
    #[error("the PNG is truncated: {0}")]
    Truncated(String),
    #[error("the PNG is damaged: the {chunk} chunk at byte {offset} fails its CRC check")]
    BadCrc { chunk: String, offset: usize },
    #[error("the PNG is damaged: {0}")]
    BadPng(String),
    #[error("the PNG's `{chunk}` chunk is {size} bytes, over the {limit}-byte limit")]
    Oversized { chunk: String, size: u64, limit: u64 },
    #[error("the PNG holds no character card (no `chara` or `ccv3` text chunk)")]
    NoCardInPng,
    #[error("the `{chunk}` chunk is not valid base64: {reason}")]
    Base64 { chunk: String, reason: String },
    #[error("{what} is not valid UTF-8 (first bad byte at {valid_up_to})")]
    Utf8 { what: String, valid_up_to: usize },
    #[error("{what} is not valid JSON: {reason}")]
    Json { what: String, reason: String },
    #[error("unknown card spec {spec:?} (this build reads chara_card_v2, chara_card_v3 and lorebook_v3)")]
    UnknownSpec { spec: String },
    #[error("a {spec} document must have spec_version {expected}, not {found:?}")]
    WrongVersion { spec: String, expected: String, found: String },
    #[error("not a character card or lorebook: {0}")]
    NotRecognised(String),
    #[error("{path}: {problem}")]
    Field { path: String, problem: String },
    #[error("CHARX (zip) cards are not supported by this build; export the card as PNG or JSON in the tool it came from")]
    Charx,
}

/// Parse JSON text with serde_json's recursion limit (128 levels) in force, so a
/// maliciously deep document is an error instead of a stack overflow.
pub fn parse_json(bytes: &[u8], what: &str) -> Result<serde_json::Value, FormatError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes)
        .map_err(|e| FormatError::Utf8 { what: what.to_string(), valid_up_to: e.valid_up_to() })?;
    serde_json::from_str(text).map_err(|e| FormatError::Json { what: what.to_string(), reason: e.to_string() })
}
