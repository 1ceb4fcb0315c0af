//! The demo companion: Ilse Marrow, a bookbinder we wrote for Lorekeeper, with lore in
//! `lore/characters/ilse-marrow/`. Added once to a library so the Chat panel has
//! someone to talk to on first launch.

use crate::character::{NewCharacter, Origin};
use crate::store::{Store, StoreError, new_id};
use rusqlite::params;

const META_KEY: &str = "companion_demo";
pub const DEMO_NAME: &str = "Ilse Marrow";

/// Add the demo character unless this library already had it (even if it was deleted
/// since) or holds a character of the user's: a user who brought their own card talks to
/// it, not to ours. Returns its id when it was added now.
pub fn ensure(store: &Store) -> Result<Option<String>, StoreError> {
    if store.meta_get(META_KEY)?.is_some() {
        return Ok(None);
    }
    store.transaction(|tx| {
        // A library holding the user's own identity runs is theirs too.
        if crate::character::any_of_the_users(tx)? || crate::identity::records::any_run(tx)? {
            tx.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, 'skipped')", [META_KEY])?;
            return Ok(None);
        }
        let id = new_id();
        let card = serde_json::json!({
            "spec": "chara_card_v2",
            "spec_version": "2.0",
            "data": {
                "name": DEMO_NAME,
                "description": "A bookbinder in Gullhaven, a small harbour town on a grey northern sea. Her workshop sits above the chandler's on Rope Street.",
                "personality": "Dry humour, patient hands, a temper that arrives late and leaves early. Likes questions about her craft; dislikes being rushed.",
                "scenario": "An ongoing friendship with the user, who lives three hours south in the city and visits when work allows.",
                "first_mes": "Oh — it's you. Mind the paste pot, it's still warm.",
                "mes_example": "",
                "creator_notes": "Lorekeeper demo companion. Lore: lore/characters/ilse-marrow/.",
                "system_prompt": "",
                "post_history_instructions": "",
                "alternate_greetings": [],
                "tags": ["demo", "companion"],
                "creator": "Lorekeeper",
                "character_version": "1",
                "extensions": {}
            }
        });
        let card = card.to_string();
        let new = NewCharacter { id: Some(&id), name: DEMO_NAME, origin: Origin::Demo, card_json: Some(&card), profile_json: None };
        crate::character::insert(tx, new)?;
        tx.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)", params![META_KEY, id])?;
        Ok(Some(id))
    })
}
