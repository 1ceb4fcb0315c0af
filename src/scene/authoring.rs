//! What a game master builds by hand: worlds, campaigns, arcs and scenes with their
//! notes, a campaign's cast and persona, the lorebooks a world or campaign scans, and
//! hand edits of the campaign's state (trackers, facts, time) and of a character's
//! state in a scene.
//!
//! These are the scene module's tables (migrations 0006 and 0013), so they are written
//! here and nowhere else; characters, personas and lorebooks are looked up through
//! their owners. Every function takes the caller's connection: the engine runs each
//! command in one transaction, so a refused edit changes nothing.

use super::model::{CharacterState, STATE_FIELDS};
use crate::character;
use crate::store::{StoreError, new_id, now_rfc3339};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

/// The levels a game master builds, top to bottom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    World,
    Campaign,
    Arc,
    Scene,
}

impl Level {
    pub fn label(self) -> &'static str {
        match self {
            Level::World => "world",
            Level::Campaign => "campaign",
            Level::Arc => "arc",
            Level::Scene => "scene",
        }
    }

    fn table(self) -> &'static str {
        match self {
            Level::World => "worlds",
            Level::Campaign => "campaigns",
            Level::Arc => "arcs",
            Level::Scene => "scenes",
        }
    }
}

/// A change to a name, description or notes; `None` keeps the field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Edit {
    pub name: Option<String>,
    pub description: Option<String>,
    pub notes: Option<String>,
}

/// The whole library as a tree of worlds → campaigns → arcs → scenes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tree {
    pub worlds: Vec<WorldNode>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorldNode {
    pub id: String,
    pub name: String,
    pub description: String,
    pub notes: String,
    /// `(id, name)` of the lorebooks every campaign of this world scans.
    pub lorebooks: Vec<(String, String)>,
    /// Who characters are in this world: the sheet fields overridden here.
    pub overrides: Vec<character::SheetOverride>,
    pub campaigns: Vec<CampaignNode>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CampaignNode {
    pub id: String,
    pub name: String,
    pub description: String,
    pub notes: String,
    pub persona: Option<character::Persona>,
    /// `(id, name)` of the campaign's cast.
    pub cast: Vec<(String, String)>,
    /// Who characters are in this campaign: the sheet fields overridden here (over the
    /// world's overrides and the card).
    pub overrides: Vec<character::SheetOverride>,
    pub lorebooks: Vec<(String, String)>,
    pub trackers: std::collections::BTreeMap<String, serde_json::Value>,
    pub facts: Vec<String>,
    pub elapsed_minutes: u64,
    pub arcs: Vec<ArcNode>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArcNode {
    pub id: String,
    pub name: String,
    pub notes: String,
    pub scenes: Vec<SceneLeaf>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SceneLeaf {
    pub id: String,
    pub name: String,
    pub rounds: u32,
    pub description: String,
    pub notes: String,
}

/// What deleting something takes with it, said before it happens.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Impact {
    pub campaigns: u32,
    pub arcs: u32,
    pub scenes: u32,
    pub messages: u32,
    /// A deleted lorebook's entries.
    #[serde(skip_serializing_if = "is_zero")]
    pub lore_entries: u32,
    /// What a deleted lorebook was attached to, in words (`world "Eldoria"`, `the chat
    /// with "Mira"`, …): it is detached from each in the same transaction.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub detached: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Impact {
    pub fn is_empty(&self) -> bool {
        *self == Impact::default()
    }

    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        let counts = [(self.campaigns, "campaign"), (self.arcs, "arc"), (self.scenes, "scene"), (self.messages, "message"), (self.lore_entries, "lore entry")];
        for (n, what) in counts {
            if n > 0 {
                let plural = if n == 1 { what.to_string() } else { what.strip_suffix('y').map_or(format!("{what}s"), |stem| format!("{stem}ies")) };
                parts.push(format!("{n} {plural}"));
            }
        }
        if !self.detached.is_empty() {
            parts.push(format!("detached from {}", self.detached.join(", ")));
        }
        parts.join(", ")
    }
}

fn invalid(message: impl Into<String>) -> StoreError {
    StoreError::Invalid(message.into())
}

fn required(name: &str, what: &str) -> Result<String, StoreError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(invalid(format!("a {what} needs a name")));
    }
    Ok(name.to_string())
}

/// Find a world, campaign, arc or scene by id, by a name only one of them has, or by
/// the start of a name or of a word of it that only one has.
pub fn resolve(conn: &Connection, level: Level, key: &str) -> Result<(String, String), StoreError> {
    let table = level.table();
    let key = key.trim();
    let by_id: Option<(String, String)> =
        conn.query_row(&format!("SELECT id, name FROM {table} WHERE id = ?1"), [key], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
    if let Some(found) = by_id {
        return Ok(found);
    }
    let mut stmt = conn.prepare(&format!("SELECT id, name FROM {table} WHERE name = ?1 COLLATE NOCASE"))?;
    let mut found: Vec<(String, String)> = stmt.query_map([key], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    if found.is_empty() {
        // The start of a name, or of a word of it ("northern" for "The Northern Run").
        let rows: Vec<(String, String)> =
            conn.prepare(&format!("SELECT id, name FROM {table} ORDER BY name COLLATE NOCASE"))?.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
        // Several that match is the request's to make precise (a 400), none a 404.
        let one = crate::names::only(&rows, |r| &r.1, key).map_err(|e| {
            let message = e.message(&format!("{} {key:?}", level.label()));
            match e {
                crate::names::NoMatch::None => StoreError::NotFound(message),
                crate::names::NoMatch::Many(_) => StoreError::Invalid(message),
            }
        })?;
        return Ok(one.clone());
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        n => {
            let ids: Vec<&str> = found.iter().map(|(id, _)| id.as_str()).collect();
            Err(StoreError::Invalid(format!(
                "{} {key:?} is ambiguous ({n} have that name; use one of the ids {})",
                level.label(),
                ids.join(", ")
            )))
        }
    }
}

/// Whether a world other than `except` goes by `name` (case ignored). Worlds are found by
/// name from every door; two of one name could be found by neither.
fn world_name_taken(conn: &Connection, name: &str, except: &str) -> Result<bool, StoreError> {
    Ok(conn.query_row("SELECT EXISTS(SELECT 1 FROM worlds WHERE id != ?2 AND trim(name) = ?1 COLLATE NOCASE)", params![name.trim(), except], |r| {
        r.get(0)
    })?)
}

pub fn create_world(conn: &Connection, name: &str, description: &str, notes: &str) -> Result<String, StoreError> {
    let name = required(name, "world")?;
    if world_name_taken(conn, &name, "")? {
        return Err(invalid(format!("a world already goes by {name:?}: give the new one another name")));
    }
    let id = new_id();
    conn.execute(
        "INSERT INTO worlds(id, name, description, notes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, name, description.trim(), notes.trim(), now_rfc3339()],
    )?;
    Ok(id)
}

/// A campaign of `world_id`, with an empty campaign state.
pub fn create_campaign(conn: &Connection, world_id: &str, name: &str, description: &str, notes: &str) -> Result<String, StoreError> {
    let name = required(name, "campaign")?;
    let id = new_id();
    let now = now_rfc3339();
    conn.execute(
        "INSERT INTO campaigns(id, world_id, name, description, notes, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id, world_id, name, description.trim(), notes.trim(), now],
    )?;
    conn.execute("INSERT INTO campaign_state(campaign_id, updated_at) VALUES (?1, ?2)", params![id, now])?;
    Ok(id)
}

/// An arc at the end of `campaign_id`'s arcs.
pub fn create_arc(conn: &Connection, campaign_id: &str, name: &str, notes: &str) -> Result<String, StoreError> {
    let name = required(name, "arc")?;
    let ordinal: i64 = conn.query_row("SELECT coalesce(max(ordinal), 0) + 1 FROM arcs WHERE campaign_id = ?1", [campaign_id], |r| r.get(0))?;
    let id = new_id();
    conn.execute(
        "INSERT INTO arcs(id, campaign_id, ordinal, name, notes, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id, campaign_id, ordinal, name, notes.trim(), now_rfc3339()],
    )?;
    Ok(id)
}

/// Rename or re-describe a world, campaign, arc or scene. Arcs have no description.
pub fn edit(conn: &Connection, level: Level, id: &str, edit: &Edit) -> Result<(), StoreError> {
    if let Some(name) = &edit.name {
        let name = required(name, level.label())?;
        if level == Level::World && world_name_taken(conn, &name, id)? {
            return Err(invalid(format!("a world already goes by {name:?}: choose another name")));
        }
    }
    if level == Level::Arc && edit.description.is_some() {
        return Err(invalid("an arc has notes, not a description"));
    }
    let table = level.table();
    let changed = match level {
        Level::Arc => conn.execute(
            "UPDATE arcs SET name = coalesce(?2, name), notes = coalesce(?3, notes) WHERE id = ?1",
            params![id, edit.name.as_deref().map(str::trim), edit.notes.as_deref()],
        )?,
        _ => conn.execute(
            &format!(
                "UPDATE {table} SET name = coalesce(?2, name), description = coalesce(?3, description), notes = coalesce(?4, notes) WHERE id = ?1"
            ),
            params![id, edit.name.as_deref().map(str::trim), edit.description.as_deref(), edit.notes.as_deref()],
        )?,
    };
    if changed == 0 {
        return Err(StoreError::NotFound(format!("{} {id}", level.label())));
    }
    if level == Level::Scene {
        conn.execute("UPDATE scenes SET updated_at = ?2 WHERE id = ?1", params![id, now_rfc3339()])?;
    }
    Ok(())
}

/// What deleting `id` would take with it.
pub fn impact(conn: &Connection, level: Level, id: &str) -> Result<Impact, StoreError> {
    let count = |sql: &str| -> Result<u32, StoreError> { Ok(conn.query_row(sql, [id], |r| r.get(0))?) };
    Ok(match level {
        Level::World => Impact {
            campaigns: count("SELECT count(*) FROM campaigns WHERE world_id = ?1")?,
            arcs: count("SELECT count(*) FROM arcs a JOIN campaigns c ON c.id = a.campaign_id WHERE c.world_id = ?1")?,
            scenes: count(
                "SELECT count(*) FROM scenes s JOIN arcs a ON a.id = s.arc_id JOIN campaigns c ON c.id = a.campaign_id WHERE c.world_id = ?1",
            )?,
            messages: count(
                "SELECT count(*) FROM scene_messages m JOIN scenes s ON s.id = m.scene_id JOIN arcs a ON a.id = s.arc_id
                 JOIN campaigns c ON c.id = a.campaign_id WHERE c.world_id = ?1",
            )?,
            ..Impact::default()
        },
        Level::Campaign => Impact {
            arcs: count("SELECT count(*) FROM arcs WHERE campaign_id = ?1")?,
            scenes: count("SELECT count(*) FROM scenes s JOIN arcs a ON a.id = s.arc_id WHERE a.campaign_id = ?1")?,
            messages: count(
                "SELECT count(*) FROM scene_messages m JOIN scenes s ON s.id = m.scene_id JOIN arcs a ON a.id = s.arc_id WHERE a.campaign_id = ?1",
            )?,
            ..Impact::default()
        },
        Level::Arc => Impact {
            scenes: count("SELECT count(*) FROM scenes WHERE arc_id = ?1")?,
            messages: count("SELECT count(*) FROM scene_messages m JOIN scenes s ON s.id = m.scene_id WHERE s.arc_id = ?1")?,
            ..Impact::default()
        },
        Level::Scene => Impact { messages: count("SELECT count(*) FROM scene_messages WHERE scene_id = ?1")?, ..Impact::default() },
    })
}

/// The scenes and campaigns under a node (itself included), before it is deleted: their
/// memories go with them.
pub fn under(conn: &Connection, level: Level, id: &str) -> Result<(Vec<String>, Vec<String>), StoreError> {
    let list = |sql: &str| -> Result<Vec<String>, StoreError> {
        let mut stmt = conn.prepare(sql)?;
        let rows = stmt.query_map([id], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    };
    Ok(match level {
        Level::World => (
            list("SELECT s.id FROM scenes s JOIN arcs a ON a.id = s.arc_id JOIN campaigns c ON c.id = a.campaign_id WHERE c.world_id = ?1")?,
            list("SELECT id FROM campaigns WHERE world_id = ?1")?,
        ),
        Level::Campaign => (list("SELECT s.id FROM scenes s JOIN arcs a ON a.id = s.arc_id WHERE a.campaign_id = ?1")?, vec![id.to_string()]),
        Level::Arc => (list("SELECT id FROM scenes WHERE arc_id = ?1")?, Vec::new()),
        Level::Scene => (vec![id.to_string()], Vec::new()),
    })
}

/// Delete a world, campaign, arc or scene with everything under it. Unless `confirmed`,
/// refused (changing nothing) when anything would go with it, saying what.
pub fn delete(conn: &Connection, level: Level, id: &str, confirmed: bool) -> Result<Impact, StoreError> {
    let impact = impact(conn, level, id)?;
    if !confirmed && !impact.is_empty() {
        return Err(invalid(format!(
            "deleting this {} also deletes {}; confirm to delete (CLI: --yes)",
            level.label(),
            impact.describe()
        )));
    }
    if conn.execute(&format!("DELETE FROM {} WHERE id = ?1", level.table()), [id])? == 0 {
        return Err(StoreError::NotFound(format!("{} {id}", level.label())));
    }
    Ok(impact)
}

/// Add a library character to a campaign's cast (once, however often asked).
pub fn cast_add(conn: &Connection, campaign_id: &str, character_id: &str) -> Result<(), StoreError> {
    conn.execute("INSERT OR IGNORE INTO campaign_cast(campaign_id, character_id) VALUES (?1, ?2)", params![campaign_id, character_id])?;
    Ok(())
}

pub fn cast_remove(conn: &Connection, campaign_id: &str, character_id: &str) -> Result<(), StoreError> {
    conn.execute("DELETE FROM campaign_cast WHERE campaign_id = ?1 AND character_id = ?2", params![campaign_id, character_id])?;
    Ok(())
}

/// The ids of a campaign's cast.
pub fn cast_of(conn: &Connection, campaign_id: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT character_id FROM campaign_cast WHERE campaign_id = ?1 ORDER BY character_id")?;
    let rows = stmt.query_map([campaign_id], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Save a campaign's own section shares (`None`: use the config file's again). Shares
/// must be finite and not negative; their total may be under 100 (the rest stays unused).
pub fn set_budgets(conn: &Connection, campaign_id: &str, plan: Option<&crate::prompting::BudgetPlan>) -> Result<(), StoreError> {
    if let Some(plan) = plan
        && let Some((section, bad)) = plan.percent.iter().find(|(_, p)| !p.is_finite() || **p < 0.0 || **p > 100.0)
    {
        return Err(StoreError::Invalid(format!("budgets.{}: {bad} is not a share between 0 and 100", section.label())));
    }
    let json = plan.map(serde_json::to_string).transpose().map_err(|e| StoreError::Corrupt(e.to_string()))?;
    if conn.execute("UPDATE campaigns SET budgets_json = ?2 WHERE id = ?1", params![campaign_id, json])? == 0 {
        return Err(StoreError::NotFound(format!("campaign {campaign_id}")));
    }
    Ok(())
}

/// A campaign's own section shares, if it has saved some.
pub fn budgets(conn: &Connection, campaign_id: &str) -> Result<Option<crate::prompting::BudgetPlan>, StoreError> {
    let json: Option<String> =
        conn.query_row("SELECT budgets_json FROM campaigns WHERE id = ?1", [campaign_id], |r| r.get(0)).optional()?.flatten();
    json.map(|j| serde_json::from_str(&j).map_err(|e| StoreError::Corrupt(format!("campaign {campaign_id} budgets: {e}")))).transpose()
}

/// The shares a scene's rounds use, when its campaign saved its own.
pub fn campaign_budgets_of_scene(conn: &Connection, scene_id: &str) -> Result<Option<crate::prompting::BudgetPlan>, StoreError> {
    let campaign: String = conn.query_row(
        "SELECT a.campaign_id FROM scenes s JOIN arcs a ON a.id = s.arc_id WHERE s.id = ?1",
        [scene_id],
        |r| r.get(0),
    )?;
    budgets(conn, &campaign)
}

/// Who the user plays in a campaign's scenes (`None`: nobody in particular).
pub fn set_persona(conn: &Connection, campaign_id: &str, persona_id: Option<&str>) -> Result<(), StoreError> {
    if conn.execute("UPDATE campaigns SET persona_id = ?2 WHERE id = ?1", params![campaign_id, persona_id])? == 0 {
        return Err(StoreError::NotFound(format!("campaign {campaign_id}")));
    }
    Ok(())
}

/// Where a lorebook is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoreLevel {
    World,
    Campaign,
    /// A character: its chat and the scenes of the campaigns it is cast in.
    Character,
}

/// Attach a lorebook to a world (all its campaigns) or a campaign; attaching twice
/// attaches once.
pub fn attach(conn: &Connection, level: LoreLevel, owner_id: &str, lorebook_id: &str) -> Result<(), StoreError> {
    let sql = match level {
        LoreLevel::World => "INSERT OR IGNORE INTO world_lorebooks(world_id, lorebook_id) VALUES (?1, ?2)",
        LoreLevel::Campaign => "INSERT OR IGNORE INTO campaign_lorebooks(campaign_id, lorebook_id) VALUES (?1, ?2)",
        LoreLevel::Character => return crate::character::attach_lorebook(conn, owner_id, lorebook_id),
    };
    conn.execute(sql, params![owner_id, lorebook_id])?;
    Ok(())
}

pub fn detach(conn: &Connection, level: LoreLevel, owner_id: &str, lorebook_id: &str) -> Result<bool, StoreError> {
    let sql = match level {
        LoreLevel::World => "DELETE FROM world_lorebooks WHERE world_id = ?1 AND lorebook_id = ?2",
        LoreLevel::Campaign => "DELETE FROM campaign_lorebooks WHERE campaign_id = ?1 AND lorebook_id = ?2",
        LoreLevel::Character => return crate::character::detach_lorebook(conn, owner_id, lorebook_id),
    };
    Ok(conn.execute(sql, params![owner_id, lorebook_id])? > 0)
}

/// The worlds and campaigns a lorebook is attached to, each as `("world" | "campaign", id,
/// name)`, worlds first, by name.
pub fn holding_lorebook(conn: &Connection, lorebook_id: &str) -> Result<Vec<(&'static str, String, String)>, StoreError> {
    let mut out = Vec::new();
    for (kind, sql) in [
        ("world", "SELECT w.id, w.name FROM world_lorebooks l JOIN worlds w ON w.id = l.world_id WHERE l.lorebook_id = ?1 ORDER BY w.name COLLATE NOCASE"),
        (
            "campaign",
            "SELECT c.id, c.name FROM campaign_lorebooks l JOIN campaigns c ON c.id = l.campaign_id WHERE l.lorebook_id = ?1 ORDER BY c.name COLLATE NOCASE",
        ),
    ] {
        let mut stmt = conn.prepare(sql)?;
        let rows = stmt.query_map([lorebook_id], |r| Ok((kind, r.get(0)?, r.get(1)?)))?;
        out.extend(rows.collect::<Result<Vec<_>, _>>()?);
    }
    Ok(out)
}

/// The whole library as a tree, each level sorted by name (arcs in their order).
pub fn tree(conn: &Connection) -> Result<Tree, StoreError> {
    let books = crate::interop::library::lorebook_names(conn)?;
    let book_name = |id: String| {
        let name = books.get(&id).cloned().unwrap_or_default();
        (id, name)
    };
    let ids = |sql: &str, key: &str| -> Result<Vec<String>, StoreError> {
        let mut stmt = conn.prepare_cached(sql)?;
        let rows = stmt.query_map([key], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    };
    let mut worlds = Vec::new();
    let mut stmt = conn.prepare("SELECT id, name, description, notes FROM worlds ORDER BY name COLLATE NOCASE, created_at")?;
    let rows: Vec<(String, String, String, String)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?.collect::<Result<_, _>>()?;
    for (id, name, description, notes) in rows {
        let lorebooks = ids("SELECT lorebook_id FROM world_lorebooks WHERE world_id = ?1 ORDER BY lorebook_id", &id)?
            .into_iter()
            .map(book_name)
            .collect();
        let mut campaigns = Vec::new();
        let mut stmt = conn.prepare_cached(
            "SELECT id, name, description, notes, persona_id FROM campaigns WHERE world_id = ?1 ORDER BY name COLLATE NOCASE, created_at",
        )?;
        let rows: Vec<(String, String, String, String, Option<String>)> =
            stmt.query_map([&id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?.collect::<Result<_, _>>()?;
        for (cid, cname, cdescription, cnotes, persona) in rows {
            let persona = match persona {
                Some(p) => character::persona(conn, &p)?,
                None => None,
            };
            let mut cast = Vec::new();
            for character_id in cast_of(conn, &cid)? {
                if let Some(c) = character::get(conn, &character_id)? {
                    cast.push((c.id, c.name));
                }
            }
            cast.sort_by(|a, b| a.1.to_lowercase().cmp(&b.1.to_lowercase()));
            let lorebooks = ids("SELECT lorebook_id FROM campaign_lorebooks WHERE campaign_id = ?1 ORDER BY lorebook_id", &cid)?
                .into_iter()
                .map(book_name)
                .collect();
            let (trackers, facts, elapsed_minutes): (String, String, i64) = conn
                .query_row("SELECT trackers_json, facts_json, elapsed_minutes FROM campaign_state WHERE campaign_id = ?1", [&cid], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?
                .unwrap_or_else(|| ("{}".into(), "[]".into(), 0));
            let corrupt = |e: serde_json::Error| StoreError::Corrupt(format!("campaign state: {e}"));
            let trackers = serde_json::from_str(&trackers).map_err(corrupt)?;
            let facts = serde_json::from_str(&facts).map_err(corrupt)?;
            let mut arcs = Vec::new();
            let mut stmt = conn.prepare_cached("SELECT id, name, notes FROM arcs WHERE campaign_id = ?1 ORDER BY ordinal, created_at")?;
            let rows: Vec<(String, String, String)> =
                stmt.query_map([&cid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?;
            for (aid, aname, anotes) in rows {
                let mut stmt =
                    conn.prepare_cached("SELECT id, name, rounds, description, notes FROM scenes WHERE arc_id = ?1 ORDER BY created_at")?;
                let scenes = stmt
                    .query_map([&aid], |r| {
                        Ok(SceneLeaf { id: r.get(0)?, name: r.get(1)?, rounds: r.get(2)?, description: r.get(3)?, notes: r.get(4)? })
                    })?
                    .collect::<Result<_, _>>()?;
                arcs.push(ArcNode { id: aid, name: aname, notes: anotes, scenes });
            }
            let overrides = character::overrides_in(conn, "campaign", &cid)?;
            campaigns.push(CampaignNode {
                id: cid,
                name: cname,
                description: cdescription,
                notes: cnotes,
                persona,
                cast,
                overrides,
                lorebooks,
                trackers,
                facts,
                elapsed_minutes: elapsed_minutes.max(0) as u64,
                arcs,
            });
        }
        let overrides = character::overrides_in(conn, "world", &id)?;
        worlds.push(WorldNode { id, name, description, notes, lorebooks, overrides, campaigns });
    }
    Ok(Tree { worlds })
}

/// One hand edit of a campaign's state or a character's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "edit", rename_all = "snake_case")]
pub enum StateEdit {
    /// Set a tracker (`value: None` removes it).
    Tracker { name: String, value: Option<serde_json::Value> },
    AddFact { fact: String },
    RemoveFact { fact: String },
    /// Set the in-fiction time elapsed since the campaign began.
    Elapsed { minutes: u64 },
    /// Change fields of a character's state in a scene (only the fields given).
    Character { scene_id: String, character_id: String, state: CharacterState },
}

/// Apply a hand edit and record it in the campaign's history. Each field is changed on
/// its own (read and written in the caller's transaction), so an edit never writes back
/// a stale copy of the rest of the state.
pub fn edit_state(conn: &Connection, campaign_id: &str, edit: &StateEdit) -> Result<(), StoreError> {
    let corrupt = |what: &str, e: serde_json::Error| StoreError::Corrupt(format!("{what}: {e}"));
    let (trackers, facts): (String, String) = conn
        .query_row("SELECT trackers_json, facts_json FROM campaign_state WHERE campaign_id = ?1", [campaign_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?
        .unwrap_or_else(|| ("{}".into(), "[]".into()));
    let mut trackers: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&trackers).map_err(|e| corrupt("trackers", e))?;
    let mut facts: Vec<String> = serde_json::from_str(&facts).map_err(|e| corrupt("facts", e))?;
    let now = now_rfc3339();
    let mut scene_id = None;
    match edit {
        StateEdit::Tracker { name, value } => {
            let name = required(name, "tracker")?;
            match value {
                Some(v) => {
                    trackers.insert(name, v.clone());
                }
                None => {
                    if trackers.remove(&name).is_none() {
                        return Err(StoreError::NotFound(format!("tracker {name:?}")));
                    }
                }
            }
        }
        StateEdit::AddFact { fact } => {
            let fact = fact.trim();
            if fact.is_empty() {
                return Err(invalid("an empty fact is not added"));
            }
            if !facts.iter().any(|f| f == fact) {
                facts.push(fact.to_string());
            }
        }
        StateEdit::RemoveFact { fact } => {
            let before = facts.len();
            facts.retain(|f| f != fact.trim());
            if facts.len() == before {
                return Err(StoreError::NotFound(format!("fact {fact:?}")));
            }
        }
        StateEdit::Elapsed { minutes } => {
            conn.execute(
                "INSERT INTO campaign_state(campaign_id, elapsed_minutes, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT(campaign_id) DO UPDATE SET elapsed_minutes = excluded.elapsed_minutes, updated_at = excluded.updated_at",
                params![campaign_id, *minutes as i64, now],
            )?;
        }
        StateEdit::Character { scene_id: scene, character_id, state } => {
            if STATE_FIELDS.iter().all(|f| state.get(f).is_none()) {
                return Err(invalid(format!("a character state edit names at least one of {}", STATE_FIELDS.join(", "))));
            }
            let current: Option<String> = conn
                .query_row(
                    "SELECT state_json FROM scene_character_states WHERE scene_id = ?1 AND character_id = ?2",
                    params![scene, character_id],
                    |r| r.get(0),
                )
                .optional()?;
            let mut full: CharacterState = match current {
                Some(json) => serde_json::from_str(&json).map_err(|e| corrupt("character state", e))?,
                None => CharacterState::default(),
            };
            full.apply(state);
            let round: i64 = conn.query_row("SELECT rounds FROM scenes WHERE id = ?1", [scene], |r| r.get(0))?;
            let json = serde_json::to_string(&full).map_err(|e| corrupt("character state", e))?;
            conn.execute(
                "INSERT INTO scene_character_states(scene_id, character_id, state_json, round) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(scene_id, character_id) DO UPDATE SET state_json = excluded.state_json, round = excluded.round",
                params![scene, character_id, json, round],
            )?;
            scene_id = Some(scene.clone());
        }
    }
    if matches!(edit, StateEdit::Tracker { .. } | StateEdit::AddFact { .. } | StateEdit::RemoveFact { .. }) {
        let trackers = serde_json::to_string(&trackers).map_err(|e| corrupt("trackers", e))?;
        let facts = serde_json::to_string(&facts).map_err(|e| corrupt("facts", e))?;
        conn.execute(
            "INSERT INTO campaign_state(campaign_id, trackers_json, facts_json, updated_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(campaign_id) DO UPDATE SET trackers_json = excluded.trackers_json, facts_json = excluded.facts_json,
             updated_at = excluded.updated_at",
            params![campaign_id, trackers, facts, now],
        )?;
    }
    let json = serde_json::to_string(edit).map_err(|e| corrupt("state edit", e))?;
    conn.execute(
        "INSERT INTO state_edits(id, campaign_id, scene_id, edit_json, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![new_id(), campaign_id, scene_id, json, now],
    )?;
    Ok(())
}

/// Whether the campaign's state was edited by hand after `at` (RFC 3339): undoing a round
/// older than such an edit would silently throw the edit away.
pub fn edited_since(conn: &Connection, campaign_id: &str, at: &str) -> Result<bool, StoreError> {
    Ok(conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM state_edits WHERE campaign_id = ?1 AND created_at > ?2)",
        params![campaign_id, at],
        |r| r.get(0),
    )?)
}

/// The hand edits of a campaign, oldest first, with when they were made.
pub fn state_edits(conn: &Connection, campaign_id: &str) -> Result<Vec<(String, StateEdit)>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT created_at, edit_json FROM state_edits WHERE campaign_id = ?1 ORDER BY created_at, rowid")?;
    let rows: Vec<(String, String)> = stmt.query_map([campaign_id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(at, json)| Ok((at, serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("state edit: {e}")))?)))
        .collect()
}

/// The hand edits that belong to one scene, oldest first: those of its characters'
/// states in it, and those of the campaign's state (trackers, facts, time) whose next
/// round was played in it — the round the edit came before (one made after the
/// campaign's last round, that round's scene). Each campaign edit so belongs to exactly
/// one scene once any round is played.
pub fn state_edits_of_scene(conn: &Connection, scene_id: &str) -> Result<Vec<(String, StateEdit)>, StoreError> {
    let rounds_of_campaign = "FROM scene_rounds r JOIN scenes rs ON rs.id = r.scene_id JOIN arcs ra ON ra.id = rs.arc_id
                              WHERE ra.campaign_id = e.campaign_id";
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT e.created_at, e.edit_json FROM state_edits e
         WHERE e.campaign_id = (SELECT a.campaign_id FROM scenes s JOIN arcs a ON a.id = s.arc_id WHERE s.id = ?1)
           AND (e.scene_id = ?1
                OR (e.scene_id IS NULL AND ?1 = COALESCE(
                    (SELECT r.scene_id {rounds_of_campaign} AND r.created_at >= e.created_at ORDER BY r.created_at, r.rowid LIMIT 1),
                    (SELECT r.scene_id {rounds_of_campaign} ORDER BY r.created_at DESC, r.rowid DESC LIMIT 1))))
         ORDER BY e.created_at, e.rowid"
    ))?;
    let rows: Vec<(String, String)> = stmt.query_map([scene_id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(at, json)| Ok((at, serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("state edit: {e}")))?)))
        .collect()
}

/// The campaign a scene belongs to.
pub fn campaign_of_scene(conn: &Connection, scene_id: &str) -> Result<String, StoreError> {
    conn.query_row("SELECT a.campaign_id FROM scenes s JOIN arcs a ON a.id = s.arc_id WHERE s.id = ?1", [scene_id], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("scene {scene_id}")))
}
