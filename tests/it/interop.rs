//! End-to-end tests of card and lorebook import/export against a real library file.
//!
//! Fixtures under `tests/data/interop/` are our own documents that set every field of
//! the specs; PNG cards are built here with the `png` crate's own text-chunk writer and
//! read back with its reader, so our chunk code is checked against an independent one.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use lorekeeper::interop::format::card::decode_card;
use lorekeeper::interop::format::{FormatError, book, world_info};
use lorekeeper::interop::library::{self, CardFormat, ImportOutcome, InteropError, ItemKind, LorebookFormat};
use lorekeeper::character::profile;
use lorekeeper::interop::{InteropEvent, import_paths};
use lorekeeper::lorebook::{LoreEntry, Lorebook};
use lorekeeper::store::Store;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/interop").join(name)
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture_path(name)).unwrap()
}

fn fixture_json(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

fn library() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("library.sqlite")).unwrap();
    (dir, store)
}

/// Rows in every table interop writes, to prove a failed import wrote nothing.
fn counts(store: &Store) -> [i64; 4] {
    store
        .with(|c| {
            let n = |table: &str| c.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get::<_, i64>(0));
            Ok([n("characters")?, n("lorebooks")?, n("lore_entries")?, n("character_images")?])
        })
        .unwrap()
}

/// A small real PNG (an 8×8 gradient) with `chunks` as tEXt, written by the png crate.
fn png_with_text(chunks: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, 8, 8);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    for (keyword, text) in chunks {
        encoder.add_text_chunk(keyword.to_string(), text.to_string()).unwrap();
    }
    let mut writer = encoder.write_header().unwrap();
    let pixels: Vec<u8> = (0..64u32).flat_map(|i| [(i * 4) as u8, 255 - (i * 4) as u8, 128, 255]).collect();
    writer.write_image_data(&pixels).unwrap();
    writer.finish().unwrap();
    out
}

fn b64_json(value: &Value) -> String {
    B64.encode(value.to_string().as_bytes())
}

/// Decode a PNG fully with the png crate and return its tEXt chunks, base64-decoded
/// and parsed as UTF-8 JSON: what another tool's importer would see.
fn read_png_card_chunks(bytes: &[u8]) -> Vec<(String, Value)> {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("the export is a PNG");
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut buf).expect("the image decodes");
    assert!(frame.width > 0 && frame.height > 0);
    reader.finish().expect("the PNG ends cleanly");
    reader
        .info()
        .uncompressed_latin1_text
        .iter()
        .map(|chunk| {
            let raw = B64.decode(chunk.text.as_bytes()).expect("the chunk is valid base64");
            let text = String::from_utf8(raw).expect("the chunk is UTF-8");
            (chunk.keyword.clone(), serde_json::from_str(&text).expect("the chunk is JSON"))
        })
        .collect()
}

fn created(outcome: ImportOutcome) -> Vec<library::CreatedItem> {
    match outcome {
        ImportOutcome::Created { items, .. } => items,
        other => panic!("expected a new import, got {other:?}"),
    }
}

fn export_json(store: &Store, key: &str, format: CardFormat) -> Value {
    let conn = store.reader().unwrap();
    serde_json::from_slice(&library::export_character(&conn, key, format, false).unwrap().bytes).unwrap()
}

fn export_book(store: &Store, key: &str, format: LorebookFormat) -> Value {
    let conn = store.reader().unwrap();
    serde_json::from_slice(&library::export_lorebook(&conn, key, format).unwrap().bytes).unwrap()
}

// --- Lossless round trips ----------------------------------------------------------------

#[test]
fn json_cards_round_trip_losslessly() {
    for (file, format) in [("card_v2_full.json", CardFormat::CardV2), ("card_v3_full.json", CardFormat::CardV3)] {
        let (_dir, store) = library();
        let items = created(library::import_bytes(&store, &fixture(file), "x").unwrap());
        assert_eq!(items[0].kind, ItemKind::Character);
        assert_eq!(items[1].kind, ItemKind::Lorebook, "the embedded book is a library lorebook too");
        assert_eq!(export_json(&store, &items[0].id, format), fixture_json(file), "{file}");
    }
}

#[test]
fn png_cards_round_trip_losslessly() {
    // V2: one `chara` chunk.
    let v2 = fixture_json("card_v2_full.json");
    let (_dir, store) = library();
    let items = created(library::import_bytes(&store, &png_with_text(&[("chara", &b64_json(&v2))]), "x").unwrap());
    assert!(items[0].detail.starts_with("Card V2 (PNG)"), "{}", items[0].detail);
    let conn = store.reader().unwrap();
    let png = library::export_character(&conn, "Captain Ilse Marrow", CardFormat::CardV2, true).unwrap().bytes;
    let chunks = read_png_card_chunks(&png);
    assert_eq!(chunks, vec![("chara".to_string(), v2)]);

    // V3 with a stale V2 backfill next to it: `ccv3` wins on import; export writes both.
    let v3 = fixture_json("card_v3_full.json");
    let stale = json!({"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "Stale backfill"}});
    let (_dir, store) = library();
    let file = png_with_text(&[("chara", &b64_json(&stale)), ("ccv3", &b64_json(&v3))]);
    let outcome = library::import_bytes(&store, &file, "x").unwrap();
    let ImportOutcome::Created { items, warnings } = outcome else { panic!() };
    assert_eq!(items[0].name, "Oriel Vantablack");
    assert!(warnings.iter().any(|w| w.contains("ccv3")));
    let conn = store.reader().unwrap();
    let png = library::export_character(&conn, &items[0].id, CardFormat::CardV3, true).unwrap().bytes;
    let chunks = read_png_card_chunks(&png);
    let ccv3 = chunks.iter().find(|(k, _)| k == "ccv3").map(|(_, v)| v.clone()).unwrap();
    assert_eq!(ccv3, v3);
    let chara = chunks.iter().find(|(k, _)| k == "chara").map(|(_, v)| v.clone()).unwrap();
    assert_eq!(chara["spec"], "chara_card_v2");
    assert_eq!(chara["data"]["name"], "Oriel Vantablack");
    assert!(chara["data"]["creator_notes"].as_str().unwrap().contains("Character Card V3"));
    assert_eq!(chara["data"]["extensions"]["lorekeeper"]["card_v3"]["nickname"], "Ori");
    // The portrait is the imported picture, not a placeholder.
    let decoder = png::Decoder::new(std::io::Cursor::new(&png[..]));
    assert_eq!(decoder.read_info().unwrap().info().width, 8);
}

#[test]
fn lorebooks_round_trip_losslessly() {
    for (file, format) in [("world_info_full.json", LorebookFormat::WorldInfo), ("lorebook_v3_full.json", LorebookFormat::LorebookV3)] {
        let (_dir, store) = library();
        let items = created(library::import_bytes(&store, &fixture(file), "Glass Sea").unwrap());
        assert_eq!(items.len(), 1);
        assert_eq!(export_book(&store, &items[0].id, format), fixture_json(file), "{file}");
    }
}

/// `LoreEntry`s without their source documents: what a cross-format trip must keep.
fn settings(book: &Lorebook) -> Vec<LoreEntry> {
    book.entries.iter().map(|e| LoreEntry { source: None, ..e.clone() }).collect()
}

#[test]
fn every_lore_setting_survives_a_trip_through_the_other_format() {
    // World Info → lorebook_v3 → World Info, and lorebook_v3 → World Info → lorebook_v3.
    let wi = world_info::decode_world_info(fixture_json("world_info_full.json")).unwrap();
    let as_v3 = book::encode_lorebook_v3(&wi);
    let back = world_info::decode_world_info(world_info::encode_world_info(&book::decode_lorebook_v3(as_v3).unwrap())).unwrap();
    assert_eq!(settings(&back), settings(&wi));

    let v3 = book::decode_lorebook_v3(fixture_json("lorebook_v3_full.json")).unwrap();
    let as_wi = world_info::encode_world_info(&v3);
    let back = book::decode_lorebook_v3(book::encode_lorebook_v3(&world_info::decode_world_info(as_wi).unwrap())).unwrap();
    assert_eq!(settings(&back), settings(&v3));
}

#[test]
fn a_v3_card_survives_a_trip_through_v2() {
    let (_dir, store) = library();
    let items = created(library::import_bytes(&store, &fixture("card_v3_full.json"), "x").unwrap());
    let as_v2 = export_json(&store, &items[0].id, CardFormat::CardV2);
    assert_eq!(as_v2["spec"], "chara_card_v2");
    let (_dir2, store2) = library();
    let items2 = created(library::import_bytes(&store2, as_v2.to_string().as_bytes(), "x").unwrap());
    let (original, _) = decode_card(fixture_json("card_v3_full.json")).unwrap();
    let (again, _) = decode_card(export_json(&store2, &items2[0].id, CardFormat::CardV3)).unwrap();
    assert_eq!((again.nickname, again.assets, again.sources), (original.nickname, original.assets, original.sources));
    assert_eq!(again.creator_notes_multilingual, original.creator_notes_multilingual);
    assert_eq!((again.creation_date, again.modification_date), (original.creation_date, original.modification_date));
    assert_eq!(again.group_only_greetings, original.group_only_greetings);
    assert_eq!(again.extensions, original.extensions);
    assert_eq!(settings(again.character_book.as_ref().unwrap()), settings(original.character_book.as_ref().unwrap()));
}

#[test]
fn macros_are_kept_as_written() {
    let (_dir, store) = library();
    let items = created(library::import_bytes(&store, &fixture("card_v2_full.json"), "x").unwrap());
    let (card, _) = library::load_card(&store.reader().unwrap(), &items[0].id).unwrap();
    assert!(card.description.starts_with("{{char}} commands"));
    assert!(card.mes_example.contains("{{user}}: {{original}}"));
    assert!(card.system_prompt.contains("{{original}}"));
}

#[test]
fn an_edited_entry_changes_only_itself_on_export() {
    let (_dir, store) = library();
    let items = created(library::import_bytes(&store, &fixture("card_v2_full.json"), "x").unwrap());
    let book_id = &items[1].id;
    let mut book = library::load_lorebook(&store.reader().unwrap(), book_id).unwrap();
    let entry = &mut book.entries[1];
    entry.sticky = Some(9);
    entry.content = "Edited in Lorekeeper.".into();
    store.with(|c| Ok(library::update_entry(c, book_id, 1, entry).map_err(|e| lorekeeper::store::StoreError::Corrupt(e.to_string()))?)).unwrap();
    let exported = export_json(&store, &items[0].id, CardFormat::CardV2);
    let mut expected = fixture_json("card_v2_full.json");
    let entry = &mut expected["data"]["character_book"]["entries"][1];
    entry["content"] = json!("Edited in Lorekeeper.");
    entry["extensions"]["sticky"] = json!(9);
    assert_eq!(exported, expected);
}

#[test]
fn embedded_books_are_library_lorebooks_linked_to_their_character() {
    let (_dir, store) = library();
    let items = created(library::import_bytes(&store, &fixture("card_v2_full.json"), "x").unwrap());
    let (characters, lorebooks) = library::list(&store.reader().unwrap()).unwrap();
    assert_eq!(characters.len(), 1);
    assert_eq!(lorebooks[0].name, "Tern's Due lore");
    assert_eq!(lorebooks[0].entries, 2);
    assert_eq!(lorebooks[0].character_id.as_deref(), Some(items[0].id.as_str()));
    let book = library::load_lorebook(&store.reader().unwrap(), &lorebooks[0].id).unwrap();
    let lighthouse = &book.entries[0];
    assert_eq!((lighthouse.sticky, lighthouse.cooldown, lighthouse.delay), (Some(2), Some(4), Some(1)));
    assert_eq!(lighthouse.groups(), vec!["landmarks"]);
    let wi = export_book(&store, "Tern's Due lore", LorebookFormat::WorldInfo);
    assert_eq!(wi["entries"]["0"]["key"], json!(["lighthouse", "drowned light"]));
    assert_eq!(wi["entries"]["0"]["selectiveLogic"], json!(1));
    assert_eq!(wi["entries"]["1"]["disable"], json!(true));
}

/// A V2 card whose `extensions.world` names a SillyTavern World Info book.
fn card_naming_world(name: &str, world: &str) -> Vec<u8> {
    let data = json!({"name": name, "description": "d", "personality": "", "scenario": "", "first_mes": "hi", "mes_example": "",
        "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "alternate_greetings": [], "tags": [],
        "creator": "", "character_version": "", "extensions": {"world": world, "talkativeness": "0.5"}});
    json!({"spec": "chara_card_v2", "spec_version": "2.0", "data": data}).to_string().into_bytes()
}

fn world_book(name: &str) -> Vec<u8> {
    json!({"name": name, "entries": {"0": {"uid": 0, "key": ["marsh"], "keysecondary": [], "content": "The marsh swallows walkers.",
        "comment": "marsh", "constant": false, "selective": false, "order": 100, "position": 0, "disable": false}}})
    .to_string()
    .into_bytes()
}

fn notes(outcome: &ImportOutcome) -> String {
    match outcome {
        ImportOutcome::Created { warnings, .. } => warnings.join("\n"),
        other => panic!("expected a new import, got {other:?}"),
    }
}

#[test]
fn a_cards_world_info_book_is_bound_to_it_whichever_comes_first() {
    let (_dir, store) = library();
    // The book first, then the card that names it (its name in another case).
    let book = library::import_bytes(&store, &world_book("Marsh Lore"), "Marsh Lore").unwrap();
    let book_id = created(book.clone())[0].id.clone();
    let pell = library::import_bytes(&store, &card_naming_world("Pell", "marsh lore"), "x").unwrap();
    assert!(notes(&pell).contains("bound World Info book \"Marsh Lore\""), "{}", notes(&pell));
    let pell_id = created(pell)[0].id.clone();
    // The card first, then its book: bound when the book comes.
    let kes = library::import_bytes(&store, &card_naming_world("Kes", "Old Empire"), "x").unwrap();
    assert!(notes(&kes).contains("not in the library"), "{}", notes(&kes));
    let kes_id = created(kes)[0].id.clone();
    let empire = library::import_bytes(&store, &world_book("Old Empire"), "Old Empire").unwrap();
    assert!(notes(&empire).contains("bound to \"Kes\""), "{}", notes(&empire));
    let empire_id = created(empire)[0].id.clone();
    let conn = store.reader().unwrap();
    let fires = |id: &str| lorekeeper::companion::lore::book_ids(&conn, id).unwrap().into_iter().map(|(b, _)| b).collect::<Vec<_>>();
    assert_eq!(fires(&pell_id), vec![book_id.clone()]);
    assert_eq!(fires(&kes_id), vec![empire_id]);
    // The sheet lists it; the card exports it back by name.
    let record = lorekeeper::character::get(&conn, &pell_id).unwrap().unwrap();
    let sheet = library::sheet_with_books(&conn, &record).unwrap();
    assert_eq!(sheet.lorebooks.iter().map(|b| (b.name.as_str(), b.source)).collect::<Vec<_>>(), vec![("Marsh Lore", "attached")]);
    assert_eq!(export_json(&store, &pell_id, CardFormat::CardV2)["data"]["extensions"]["world"], json!("marsh lore"));
    // Detached, the card names no book; a book attached by hand is the one it names.
    store.with(|c| lorekeeper::character::detach_lorebook(c, &pell_id, &book_id).map(|_| ())).unwrap();
    assert_eq!(export_json(&store, &pell_id, CardFormat::CardV2)["data"]["extensions"]["world"], json!(""));
    let tern = created(library::import_bytes(&store, &card_naming_world("Tern", ""), "x").unwrap());
    store.with(|c| lorekeeper::character::attach_lorebook(c, &tern[0].id, &book_id)).unwrap();
    assert_eq!(export_json(&store, &tern[0].id, CardFormat::CardV2)["data"]["extensions"]["world"], json!("Marsh Lore"));
}

#[test]
fn importing_the_same_file_twice_is_skipped() {
    let (_dir, store) = library();
    library::import_bytes(&store, &fixture("world_info_full.json"), "Glass Sea").unwrap();
    let again = library::import_bytes(&store, &fixture("world_info_full.json"), "Glass Sea").unwrap();
    assert!(matches!(again, ImportOutcome::Duplicate { kind: ItemKind::Lorebook, .. }));
    library::import_bytes(&store, &fixture("card_v3_full.json"), "x").unwrap();
    let again = library::import_bytes(&store, &fixture("card_v3_full.json"), "x").unwrap();
    assert!(matches!(again, ImportOutcome::Duplicate { kind: ItemKind::Character, .. }));
    assert_eq!(counts(&store)[0..2], [1, 2]);
}

// --- Identity profiles --------------------------------------------------------------------

#[test]
fn an_identity_profile_exports_as_v2_and_v3_cards() {
    let (_dir, store) = library();
    let profile = profile::sample_profile();
    store
        .with(|c| {
            c.execute(
                "INSERT INTO characters(id, name, origin, card_json, profile_json, created_at, updated_at) VALUES ('p1', 'Mira Vell', 'identity', NULL, ?1, 'now', 'now')",
                [profile.to_string()],
            )?;
            Ok(())
        })
        .unwrap();
    for format in [CardFormat::CardV2, CardFormat::CardV3] {
        let card = export_json(&store, "mira vell", format);
        assert!(card["data"]["description"].as_str().unwrap().contains("charts what others forget"));
        assert!(card["data"]["personality"].as_str().unwrap().contains("meticulous"));
        assert!(card["data"]["scenario"].as_str().unwrap().contains("Tomas (rival)"));
        assert!(card["data"]["mes_example"].as_str().unwrap().contains("<START>"));
        assert_eq!(card["data"]["extensions"]["lorekeeper"]["profile"], profile);
    }
    let png = library::export_character(&store.reader().unwrap(), "p1", CardFormat::CardV3, true).unwrap().bytes;
    let chunks = read_png_card_chunks(&png);
    let keywords: Vec<&str> = chunks.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keywords, vec!["chara", "ccv3"]);
    assert_eq!(chunks[1].1["data"]["extensions"]["lorekeeper"]["profile"], profile);
    // The placeholder portrait is a real 256×256 image.
    let decoder = png::Decoder::new(std::io::Cursor::new(&png[..]));
    assert_eq!(decoder.read_info().unwrap().info().width, 256);
}

// --- Bad files: a clear error, and nothing written ------------------------------------------

fn assert_rejected(bytes: &[u8], check: impl Fn(&FormatError) -> bool) -> String {
    let (_dir, store) = library();
    // A good file first, so "nothing changed" is checked against a non-empty library.
    library::import_bytes(&store, &fixture("world_info_full.json"), "Glass Sea").unwrap();
    let before = counts(&store);
    let err = library::import_bytes(&store, bytes, "bad").expect_err("a bad file is rejected");
    let InteropError::Format(format_err) = &err else { panic!("expected a format error, got {err}") };
    assert!(check(format_err), "unexpected error: {format_err:?}");
    assert_eq!(counts(&store), before, "a rejected file wrote nothing");
    err.to_string()
}

fn good_v2_png() -> Vec<u8> {
    png_with_text(&[("chara", &b64_json(&fixture_json("card_v2_full.json")))])
}

#[test]
fn truncated_png_is_rejected() {
    let png = good_v2_png();
    for cut in [png.len() - 6, png.len() / 2, 20] {
        let message = assert_rejected(&png[..cut], |e| matches!(e, FormatError::Truncated(_)));
        assert!(message.contains("truncated"), "{message}");
    }
}

#[test]
fn bad_crc_is_rejected() {
    let mut png = good_v2_png();
    let at = png.windows(5).position(|w| w == b"chara").unwrap() + 10;
    png[at] ^= 0x01; // still base64, but the CRC no longer matches
    let message = assert_rejected(&png, |e| matches!(e, FormatError::BadCrc { chunk, .. } if chunk == "tEXt"));
    assert!(message.contains("CRC"), "{message}");
}

#[test]
fn corrupt_image_data_is_rejected() {
    // Valid chunks and CRCs around an IDAT that is not zlib data.
    let good = good_v2_png();
    let chunks = lorekeeper::interop::format::png::chunks(&good).unwrap();
    let mut out = lorekeeper::interop::format::png::SIGNATURE.to_vec();
    for c in chunks {
        let data: Vec<u8> = if &c.kind == b"IDAT" { vec![0xde, 0xad, 0xbe, 0xef, 0x00, 0x11] } else { c.data.to_vec() };
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = c.kind.to_vec();
        body.extend_from_slice(&data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&lorekeeper::interop::format::png::crc32(&body).to_be_bytes());
    }
    assert_rejected(&out, |e| matches!(e, FormatError::BadPng(_)));
}

#[test]
fn invalid_base64_is_rejected() {
    let png = png_with_text(&[("chara", "this is not base64!!")]);
    assert_rejected(&png, |e| matches!(e, FormatError::Base64 { chunk, .. } if chunk == "chara"));
}

#[test]
fn invalid_utf8_is_rejected() {
    let png = png_with_text(&[("chara", &B64.encode([b'{', b'"', 0xFF, 0xFE, b'"', b'}']))]);
    assert_rejected(&png, |e| matches!(e, FormatError::Utf8 { .. }));
    let mut json = br#"{"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": ""#.to_vec();
    json.extend_from_slice(&[0xC3, 0x28]);
    json.extend_from_slice(br#""}}"#);
    assert_rejected(&json, |e| matches!(e, FormatError::Utf8 { .. }));
}

#[test]
fn wrong_spec_or_version_is_rejected() {
    let mut v2_as_3 = fixture_json("card_v2_full.json");
    v2_as_3["spec_version"] = json!("3.0");
    let message = assert_rejected(v2_as_3.to_string().as_bytes(), |e| matches!(e, FormatError::WrongVersion { .. }));
    assert!(message.contains("spec_version 2.0"), "{message}");
    let mut v3_as_2 = fixture_json("card_v3_full.json");
    v3_as_2["spec_version"] = json!("2.0");
    assert_rejected(v3_as_2.to_string().as_bytes(), |e| matches!(e, FormatError::WrongVersion { .. }));
    let mut unknown = fixture_json("card_v3_full.json");
    unknown["spec"] = json!("chara_card_v4");
    let png = png_with_text(&[("ccv3", &b64_json(&unknown))]);
    assert_rejected(&png, |e| matches!(e, FormatError::UnknownSpec { spec } if spec == "chara_card_v4"));
}

#[test]
fn oversized_chunk_is_rejected() {
    let huge = "A".repeat(17 * 1024 * 1024);
    let png = png_with_text(&[("chara", &huge)]);
    let message = assert_rejected(&png, |e| matches!(e, FormatError::Oversized { .. }));
    assert!(message.contains("limit"), "{message}");
}

#[test]
fn deeply_nested_json_is_rejected_without_overflowing_the_stack() {
    let depth = 100_000;
    let nested = format!("{{\"spec\": \"chara_card_v2\", \"data\": {}{}}}", "[".repeat(depth), "]".repeat(depth));
    let message = assert_rejected(nested.as_bytes(), |e| matches!(e, FormatError::Json { .. }));
    assert!(message.contains("recursion limit"), "{message}");
    let png = png_with_text(&[("chara", &B64.encode(nested.as_bytes()))]);
    assert_rejected(&png, |e| matches!(e, FormatError::Json { .. }));
}

#[test]
fn files_that_are_not_cards_are_rejected() {
    assert_rejected(b"Just some notes about my character.", |e| matches!(e, FormatError::NotRecognised(_)));
    assert_rejected(b"", |e| matches!(e, FormatError::NotRecognised(_)));
    assert_rejected(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, b'J', b'F'], |e| matches!(e, FormatError::NotRecognised(_)));
    assert_rejected(br#"{"recipe": "soup", "servings": 4}"#, |e| matches!(e, FormatError::NotRecognised(_)));
    assert_rejected(b"[1, 2, 3]", |e| matches!(e, FormatError::NotRecognised(_)));
    assert_rejected(&png_with_text(&[("Comment", "a holiday photo")]), |e| matches!(e, FormatError::NoCardInPng));
    assert_rejected(b"PK\x03\x04\x14\x00\x00\x00", |e| matches!(e, FormatError::Charx));
    let no_name = json!({"spec": "chara_card_v2", "spec_version": "2.0", "data": {"description": "nameless"}});
    assert_rejected(no_name.to_string().as_bytes(), |e| matches!(e, FormatError::Field { path, .. } if path == "data.name"));
    let bad_field = json!({"entries": {"0": {"uid": 0, "key": {"not": "a list"}}}});
    let message = assert_rejected(bad_field.to_string().as_bytes(), |e| matches!(e, FormatError::Field { .. }));
    assert!(message.contains("entries[\"0\"].key"), "{message}");
}

#[test]
fn a_file_over_the_size_limit_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.png");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(lorekeeper::interop::format::MAX_FILE_BYTES + 1).unwrap(); // sparse: nothing is written
    let (_d, store) = library();
    let err = library::import_file(&store, &path).unwrap_err();
    assert!(matches!(err, InteropError::Format(FormatError::TooLarge { .. })), "{err}");
}

#[test]
fn an_import_reports_what_it_created_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("ilse.card"); // the extension means nothing
    std::fs::write(&good, good_v2_png()).unwrap();
    let bad = dir.path().join("broken.png");
    std::fs::write(&bad, &good_v2_png()[..100]).unwrap();
    let missing = dir.path().join("missing.json");
    let (_d, store) = library();
    let InteropEvent::ImportReport { created, skipped, .. } = import_paths(&store, &[good.clone(), bad.clone(), missing.clone()]) else {
        panic!()
    };
    assert_eq!(created.iter().map(|c| (c.path.clone(), c.item.kind)).collect::<Vec<_>>(), vec![
        (good.clone(), ItemKind::Character),
        (good, ItemKind::Lorebook)
    ]);
    assert_eq!(skipped.iter().map(|s| s.path.clone()).collect::<Vec<_>>(), vec![bad, missing]);
    assert!(skipped[0].reason.contains("truncated"));
    assert!(skipped[1].reason.contains("cannot read"));
    assert!(skipped.iter().all(|s| s.error));
}

// --- Command line ----------------------------------------------------------------------------

fn lorekeeper(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .arg("--library")
        .arg(dir.join("library.sqlite"))
        .arg("--config")
        .arg(dir.join("config.toml"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn cli_imports_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let card = dir.path().join("ilse.png");
    std::fs::write(&card, good_v2_png()).unwrap();
    let wi = fixture_path("world_info_full.json");
    let out = lorekeeper(dir.path(), &["import", card.to_str().unwrap(), wi.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let report: Value = stdout.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|e| e["event"] == "import_report").unwrap();
    let names: Vec<&str> = report["created"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["Captain Ilse Marrow", "Tern's Due lore", "world_info_full"]);

    let png_out = dir.path().join("out/ilse-v3.png");
    let out = lorekeeper(dir.path(), &["export", "character", "Captain Ilse Marrow", "--format", "card-v3", "--png", "--out", png_out.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("card-v3 (png)"));
    let chunks = read_png_card_chunks(&std::fs::read(&png_out).unwrap());
    assert_eq!(chunks.iter().find(|(k, _)| k == "ccv3").unwrap().1["data"]["name"], "Captain Ilse Marrow");

    let wi_out = dir.path().join("glass.json");
    let out = lorekeeper(dir.path(), &["export", "lorebook", "world_info_full", "--format", "world-info", "--out", wi_out.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&std::fs::read(&wi_out).unwrap()).unwrap(), fixture_json("world_info_full.json"));

    // A bad file fails the command with the reason; an unknown name fails the export.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"spec\": \"chara_card_v2\", \"spec_version\": \"9\"}").unwrap();
    let out = lorekeeper(dir.path(), &["import", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("spec_version 2.0"));
    let out = lorekeeper(dir.path(), &["export", "character", "Nobody", "--format", "card-v2", "--out", "x.json"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no character named"), "{}", String::from_utf8_lossy(&out.stderr));
}

// --- Workbench ---------------------------------------------------------------------------------

/// A file dropped on the window, as the windowing integration would hand it over.
#[derive(Debug)]
struct DroppedPath(PathBuf);

impl egui::DroppedFile for DroppedPath {
    fn path(&self) -> &Path {
        &self.0
    }
    fn bytes(&self) -> Result<Vec<u8>, String> {
        std::fs::read(&self.0).map_err(|e| e.to_string())
    }
}

#[test]
fn dropping_a_card_on_the_window_lists_the_new_character() {
    use egui_kittest::kittest::Queryable;
    let dir = tempfile::tempdir().unwrap();
    let card = dir.path().join("dropped.png");
    std::fs::write(&card, good_v2_png()).unwrap();
    let paths = lorekeeper::config::Paths {
        config_file: dir.path().join("config.toml"),
        library_file: dir.path().join("library.sqlite"),
        log_dir: dir.path().join("logs"),
    };
    let engine = lorekeeper::engine::start(paths).unwrap();
    // Engine events (the import, the portraits it asks for) each wake the window, so
    // `run()` may need more frames than kittest's default four to settle.
    let mut harness = egui_kittest::Harness::builder()
        .with_max_steps(64)
        .with_size(egui::vec2(1280.0, 800.0))
        .build_eframe(|cc| lorekeeper::ui::WorkbenchApp::new(&cc.egui_ctx, engine));
    // Let the Chat panel list the library as it is (the demo character) first, so the
    // drop below is news to it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while harness.state().chat().characters().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the chat never listed its characters");
        std::thread::sleep(std::time::Duration::from_millis(20));
        harness.step();
    }
    harness.run();
    harness.input_mut().dropped_files.push(std::sync::Arc::new(DroppedPath(card)));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        harness.step();
        if harness.state().library().characters().iter().any(|c| c.name == "Captain Ilse Marrow") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the dropped card was not imported in time");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    harness.run();
    assert_eq!(harness.state().panel(), lorekeeper::ui::PanelKind::Library);
    harness.get_by_label("Captain Ilse Marrow");
    // The Chat panel lists the new character too, without a restart.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !harness.state().chat().characters().iter().any(|c| c.name == "Captain Ilse Marrow") {
        assert!(std::time::Instant::now() < deadline, "the chat's character list did not follow the import");
        std::thread::sleep(std::time::Duration::from_millis(20));
        harness.step();
    }
    assert!(harness.query_by_label_contains("Created \"Captain Ilse Marrow\" from dropped.png").is_some());

    // Export through the row's context menu: pick V2, type a path, export.
    harness.get_by_label("Captain Ilse Marrow").click_secondary();
    harness.run();
    harness.get_by_label("Export as card…").click();
    harness.run();
    let out = dir.path().join("exported/ilse.png");
    harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Save to").set_text_value_accesskit(out.to_str().unwrap());
    harness.run();
    harness.get_by_label("Card format").click();
    harness.run();
    harness.get_by_label("card-v2").click();
    harness.run();
    harness.get_by_label("Export").click();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while harness.query_by_label_contains("Exported \"Captain Ilse Marrow\" as card-v2 (png)").is_none() {
        assert!(std::time::Instant::now() < deadline, "the export did not finish in time");
        std::thread::sleep(std::time::Duration::from_millis(20));
        harness.step();
    }
    let chunks = read_png_card_chunks(&std::fs::read(&out).unwrap());
    assert_eq!(chunks, vec![("chara".to_string(), fixture_json("card_v2_full.json"))]);
}

/// The fuzz targets mount the parser and lore activation sources directly (their own
/// workspace, so this suite never builds them with a sanitizer). A module that starts
/// using a crate the fuzz crate does not list breaks them silently; this checks they
/// still compile, against the fuzz crate's own lock file.
#[test]
fn the_fuzz_targets_still_build() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["check", "--locked", "--quiet", "--bins", "--manifest-path"])
        .arg(root.join("fuzz/Cargo.toml"))
        .env("CARGO_TARGET_DIR", root.join("target/fuzz-check"))
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "the fuzz targets do not build:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// A book whose entries an editor would refuse imports as it came (nothing lost), and the
/// report says which entries and why: a key that is not a regular expression, a chance
/// that is not a percentage.
#[test]
fn entries_an_editor_would_refuse_import_as_they_came_with_a_note() {
    let (_dir, store) = library();
    let book = json!({ "entries": {
        "0": { "uid": 0, "key": ["/gate(/"], "keysecondary": [], "comment": "Broken gate", "content": "x", "order": 100, "position": 0, "probability": 100 },
        "1": { "uid": 1, "key": ["tide"], "keysecondary": [], "comment": "Tide", "content": "y", "order": 100, "position": 0, "probability": 250 },
        "2": { "uid": 2, "key": ["moon"], "keysecondary": [], "comment": "Moon", "content": "z", "order": 100, "position": 0, "probability": 100 }
    } });
    let outcome = library::import_bytes(&store, book.to_string().as_bytes(), "odd").unwrap();
    let ImportOutcome::Created { items, warnings } = outcome else { panic!("{outcome:?}") };
    assert_eq!(items.len(), 1);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("Broken gate") && warnings[0].contains("not a valid regular expression"), "{warnings:?}");
    assert!(warnings[1].contains("Tide") && warnings[1].contains("probability: 250"), "{warnings:?}");
    let kept = library::lorebook_names(&store.reader().unwrap()).unwrap();
    assert_eq!(kept.len(), 1);
}
