//! The authoring commands: each resolves its names, runs in one transaction, and
//! reports the library tree (or what it wrote) afterwards.

use super::authoring::{self, Edit, Impact, Level, LoreLevel, StateEdit, Tree};
use super::model::CharacterState;
use super::{SceneError, records};
use crate::character;
use crate::context::Context;
use crate::store::StoreError;
use serde::Serialize;
use std::path::PathBuf;

pub use super::transcript::TranscriptFormat;

/// What a game master can build, change or remove. Names are resolved here; a name
/// two things share is refused with their ids.
#[derive(Debug, Clone)]
pub enum AuthorCommand {
    /// Report the library as [`AuthorEvent::Tree`].
    Tree,
    NewWorld { name: String, description: String, notes: String },
    NewCampaign { world: String, name: String, description: String, notes: String },
    NewArc { campaign: String, name: String, notes: String },
    /// Rename, re-describe or re-note a world, campaign, arc or scene.
    Edit { level: Level, key: String, edit: Edit },
    /// Delete with everything under it; refused unless `confirmed` when anything would go.
    Delete { level: Level, key: String, confirmed: bool },
    CastAdd { campaign: String, character: String },
    CastRemove { campaign: String, character: String },
    /// Who the user plays in the campaign's scenes (`None`: nobody in particular).
    UsePersona { campaign: String, persona: Option<String> },
    NewPersona { name: String, description: String },
    /// Write a character from scratch (`edit.name` required): `character::create`.
    NewCharacter { sheet: Box<character::SheetEdit> },
    /// Start an empty lorebook (its entries are added in the entry editor).
    NewLorebook { name: String, description: String },
    /// Rename a lorebook (id or name); a name another book has is refused.
    RenameLorebook { lorebook: String, name: String },
    /// Delete a lorebook with its entries, detached from every world, campaign, character
    /// and chat in the same transaction; refused unless `confirmed` when it holds entries
    /// or is attached anywhere (the refusal says what would go).
    DeleteLorebook { lorebook: String, confirmed: bool },
    /// Report what a lorebook holds and where it is attached, as
    /// [`AuthorEvent::LorebookUse`] (what a deletion asks about first).
    LorebookUse { lorebook: String },
    EditPersona { persona: String, name: Option<String>, description: Option<String> },
    DeletePersona { persona: String },
    /// Give a persona a picture (a PNG file), or take it away (`None`).
    PersonaImage { persona: String, path: Option<PathBuf> },
    /// Report every persona as [`AuthorEvent::Personas`].
    Personas,
    Attach { lorebook: String, level: LoreLevel, owner: String },
    Detach { lorebook: String, level: LoreLevel, owner: String },
    /// Override sheet fields of a character for one world or one campaign (an empty
    /// text removes a field's override).
    Override { level: Level, owner: String, character: String, fields: std::collections::BTreeMap<String, String> },
    /// Save a campaign's own section shares (`None`: the config file's again).
    SetBudgets { campaign: String, plan: Option<crate::prompting::BudgetPlan> },
    /// Report a campaign's section shares as [`AuthorEvent::Budgets`].
    Budgets { campaign: String },
    /// Change some of a campaign's section shares; the others keep theirs (the campaign's
    /// saved ones, else the config file's). Refused when they would add up to over 100.
    SetBudgetShares { campaign: String, shares: std::collections::BTreeMap<crate::prompting::Section, f64> },
    /// A hand edit of the campaign's trackers, facts or time.
    EditState { campaign: String, edit: StateEdit },
    /// A hand edit of a character's state in a scene (only the fields given).
    EditCharacterState { scene: String, character: String, state: CharacterState },
    /// Write a scene's whole transcript as Markdown or JSON.
    ExportTranscript { scene: String, format: TranscriptFormat, out: PathBuf },
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuthorEvent {
    /// Something was created, changed or removed (`action`: created, updated, renamed,
    /// deleted, attached, detached; for a campaign's `cast`, added or removed, with the
    /// campaign's id and the member's name).
    Authored { action: String, kind: String, id: String, name: String, impact: Option<Impact> },
    Tree { tree: Box<Tree> },
    Personas { personas: Vec<character::Persona> },
    /// A campaign's section shares (percent), by section label; `own`: saved for the
    /// campaign, else the config file's.
    Budgets { campaign_id: String, name: String, shares: Vec<(String, f64)>, own: bool },
    TranscriptExported { scene_id: String, path: PathBuf, messages: usize },
    /// What a lorebook holds and where it is attached (sent for `LorebookUse`).
    LorebookUse { lorebook: super::lorebooks::LorebookUse },
}

/// What an [`AuthorEvent::Authored`] did, in words, for a log line or a status ("created
/// world Ashfall", "added Orrin Vale to the cast"): every front door says it the same way.
pub fn authored_sentence(action: &str, kind: &str, name: &str) -> String {
    match (action, kind) {
        ("added", "cast") => format!("added {name} to the cast"),
        ("removed", "cast") => format!("removed {name} from the cast"),
        _ => format!("{action} {kind} {name}"),
    }
}

fn authored(action: &str, kind: &str, id: String, name: String) -> AuthorEvent {
    AuthorEvent::Authored { action: action.into(), kind: kind.into(), id, name, impact: None }
}

/// Serialises authoring commands within one engine. Commands run on worker threads, so
/// without it two edits could commit in one order and report their trees in the other,
/// leaving a front door with a stale tree and no later event to correct it.
#[derive(Default)]
pub struct AuthoringOrder(std::sync::Mutex<()>);

/// Run `work` (which commits and reports) while no other authoring command does.
pub fn in_order<T>(ctx: &Context, work: impl FnOnce() -> T) -> T {
    let slot = ctx.service::<AuthoringOrder>();
    let order = slot.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(Default::default).clone();
    let _turn = order.0.lock().unwrap_or_else(|p| p.into_inner());
    work()
}

/// Run one authoring command and send what it did, then the tree, as events; `reply`
/// hears the first (what was created, changed or removed, or the report asked for).
/// Commands are taken one at a time (see [`AuthoringOrder`]).
pub fn handle(ctx: &Context, command: AuthorCommand, reply: Option<&crate::context::Reply<AuthorEvent>>) -> Result<(), SceneError> {
    in_order(ctx, || {
        for event in run(ctx, command)? {
            crate::context::answer(reply, &event);
            ctx.emit(event);
        }
        Ok(())
    })
}

/// Run one authoring command; what it did, as events (the tree follows every change).
fn run(ctx: &Context, command: AuthorCommand) -> Result<Vec<AuthorEvent>, SceneError> {
    let store = &ctx.store;
    let event = match command {
        AuthorCommand::Tree => None,
        AuthorCommand::NewWorld { name, description, notes } => {
            let id = store.transaction(|tx| authoring::create_world(tx, &name, &description, &notes))?;
            Some(authored("created", "world", id, name.trim().into()))
        }
        AuthorCommand::NewCampaign { world, name, description, notes } => {
            let id = store.transaction(|tx| {
                let (world, _) = authoring::resolve(tx, Level::World, &world)?;
                authoring::create_campaign(tx, &world, &name, &description, &notes)
            })?;
            Some(authored("created", "campaign", id, name.trim().into()))
        }
        AuthorCommand::NewArc { campaign, name, notes } => {
            let id = store.transaction(|tx| {
                let (campaign, _) = authoring::resolve(tx, Level::Campaign, &campaign)?;
                authoring::create_arc(tx, &campaign, &name, &notes)
            })?;
            Some(authored("created", "arc", id, name.trim().into()))
        }
        AuthorCommand::Edit { level, key, edit } => {
            let (id, name) = store.transaction(|tx| {
                let (id, old) = authoring::resolve(tx, level, &key)?;
                authoring::edit(tx, level, &id, &edit)?;
                Ok((id, edit.name.clone().map(|n| n.trim().to_string()).unwrap_or(old)))
            })?;
            Some(authored("updated", level.label(), id, name))
        }
        AuthorCommand::Delete { level, key, confirmed } => {
            let bank = crate::memory::bank_for(ctx).ok();
            // Every scene it would take is held as a round holds it, until the delete is
            // done: a round running in one of them is refused (busy, 409) rather than left
            // calling its provider for a scene that is gone, and none starts meanwhile.
            let (scenes, _) = store.with(|c| {
                let (id, _) = authoring::resolve(c, level, &key)?;
                authoring::under(c, level, &id)
            })?;
            let mut _held = Vec::with_capacity(scenes.len());
            for scene in &scenes {
                let job = ctx.jobs.try_start(super::round::job(scene), &crate::llm::CancelToken::new());
                _held.push(job.ok_or_else(|| SceneError::Busy(scene.clone()))?);
            }
            let (id, name, impact, write) = store.transaction(|tx| {
                let (id, name) = authoring::resolve(tx, level, &key)?;
                // What their messages became goes with them, in the same transaction.
                let (scenes, campaigns) = authoring::under(tx, level, &id)?;
                let impact = authoring::delete(tx, level, &id, confirmed)?;
                let mut write = crate::memory::MemoryWrite::default();
                for scene in &scenes {
                    write = write.and(crate::memory::remove_scene(tx, scene)?);
                }
                for campaign in &campaigns {
                    write = write.and(crate::memory::remove_campaign(tx, campaign)?);
                }
                Ok((id, name, impact, write))
            })?;
            if let Some(bank) = bank {
                bank.publish(write);
            }
            Some(AuthorEvent::Authored { action: "deleted".into(), kind: level.label().into(), id, name, impact: Some(impact) })
        }
        AuthorCommand::CastAdd { campaign, character: who } => {
            let (id, name) = store.transaction(|tx| {
                let (campaign, _) = authoring::resolve(tx, Level::Campaign, &campaign)?;
                let character = character::resolve(tx, &who)?;
                authoring::cast_add(tx, &campaign, &character.id)?;
                Ok((campaign, character.name))
            })?;
            Some(authored("added", "cast", id, name))
        }
        AuthorCommand::CastRemove { campaign, character: who } => {
            let (id, name) = store.transaction(|tx| {
                let (campaign, _) = authoring::resolve(tx, Level::Campaign, &campaign)?;
                let character = character::resolve(tx, &who)?;
                authoring::cast_remove(tx, &campaign, &character.id)?;
                Ok((campaign, character.name))
            })?;
            Some(authored("removed", "cast", id, name))
        }
        AuthorCommand::UsePersona { campaign, persona } => {
            let (id, name) = store.transaction(|tx| {
                let (campaign, name) = authoring::resolve(tx, Level::Campaign, &campaign)?;
                let persona = match persona.as_deref() {
                    Some(key) => Some(character::resolve_persona(tx, key)?.id),
                    None => None,
                };
                authoring::set_persona(tx, &campaign, persona.as_deref())?;
                Ok((campaign, name))
            })?;
            Some(authored("updated", "campaign", id, name))
        }
        AuthorCommand::Override { level, owner, character: key, fields } => {
            let scope = match level {
                Level::World => "world",
                Level::Campaign => "campaign",
                _ => return Err(SceneError::Invalid("a sheet is overridden for a world or a campaign".into())),
            };
            let (name, id) = store.transaction(|tx| {
                let (owner, _) = authoring::resolve(tx, level, &owner)?;
                let record = character::resolve(tx, &key)?;
                let before = super::recall::names_by_campaign(tx, &record.id, scope, &owner)?;
                character::set_override(tx, &record.id, scope, &owner, &fields)?;
                super::recall::follow_renames(tx, &record.id, &before)?;
                Ok((record.name, record.id))
            })?;
            Some(authored("overrode", "character", id, name))
        }
        AuthorCommand::PersonaImage { persona, path } => {
            let bytes = match &path {
                Some(path) => Some(
                    crate::paths::read_bounded(path, character::MAX_IMAGE_BYTES as u64).map_err(|e| SceneError::Invalid(e.to_string()))?,
                ),
                None => None,
            };
            let (id, name) = store.transaction(|tx| {
                let found = character::resolve_persona(tx, &persona)?;
                character::set_persona_image(tx, &found.id, bytes.as_deref())?;
                Ok((found.id, found.name))
            })?;
            Some(authored(if path.is_some() { "pictured" } else { "unpictured" }, "persona", id, name))
        }
        AuthorCommand::SetBudgets { campaign, plan } => {
            let (id, name) = store.transaction(|tx| {
                let (campaign, name) = authoring::resolve(tx, Level::Campaign, &campaign)?;
                authoring::set_budgets(tx, &campaign, plan.as_ref())?;
                Ok((campaign, name))
            })?;
            Some(authored(if plan.is_some() { "updated budgets of" } else { "reset budgets of" }, "campaign", id, name))
        }
        AuthorCommand::SetBudgetShares { campaign, shares } => {
            let defaults = ctx.config().scene.budgets;
            let (id, name) = store.transaction(|tx| {
                let (campaign, name) = authoring::resolve(tx, Level::Campaign, &campaign)?;
                if let Some((section, bad)) = shares.iter().find(|(_, p)| !p.is_finite() || **p < 0.0 || **p > 100.0) {
                    return Err(StoreError::Invalid(format!("budgets.{}: {bad} is not a share between 0 and 100", section.label())));
                }
                let mut plan = authoring::budgets(tx, &campaign)?.unwrap_or(defaults);
                // A plan saved before a section was added reads with that section's
                // default share and may be over 100: a change that lowers it is taken.
                let before: f64 = plan.percent.values().sum();
                plan.percent.extend(shares);
                let total: f64 = plan.percent.values().sum();
                if total > 100.0 + 1e-6 && total > before + 1e-6 {
                    let listed: Vec<String> = plan.percent.iter().map(|(s, p)| format!("{} {p}", s.label())).collect();
                    return Err(StoreError::Invalid(format!(
                        "the shares would add up to {total}% ({}): each is a share of the context, so together at most 100",
                        listed.join(", ")
                    )));
                }
                authoring::set_budgets(tx, &campaign, Some(&plan))?;
                Ok((campaign, name))
            })?;
            Some(authored("updated budgets of", "campaign", id, name))
        }
        AuthorCommand::NewPersona { name, description } => {
            if name.trim().is_empty() {
                return Err(SceneError::Invalid("a persona needs a name".into()));
            }
            let id = store.transaction(|tx| character::insert_persona(tx, name.trim(), description.trim()))?;
            Some(authored("created", "persona", id, name.trim().into()))
        }
        AuthorCommand::NewCharacter { sheet } => {
            let record = store.transaction(|tx| character::create(tx, &sheet))?;
            Some(authored("created", "character", record.id, record.name))
        }
        AuthorCommand::NewLorebook { name, description } => {
            let id = store.transaction(|tx| crate::interop::library::create_lorebook(tx, &name, &description))?;
            Some(authored("created", "lorebook", id, name.trim().into()))
        }
        AuthorCommand::RenameLorebook { lorebook, name } => {
            let (id, name) = store.transaction(|tx| super::lorebooks::rename(tx, &lorebook, &name))?;
            Some(authored("renamed", "lorebook", id, name))
        }
        AuthorCommand::DeleteLorebook { lorebook, confirmed } => {
            let gone = store.transaction(|tx| super::lorebooks::delete(tx, &lorebook, confirmed))?;
            let impact = gone.impact();
            Some(AuthorEvent::Authored { action: "deleted".into(), kind: "lorebook".into(), id: gone.id, name: gone.name, impact: Some(impact) })
        }
        AuthorCommand::LorebookUse { lorebook } => {
            let found = store.with(|c| super::lorebooks::LorebookUse::of(c, &lorebook))?;
            return Ok(vec![AuthorEvent::LorebookUse { lorebook: found }]);
        }
        AuthorCommand::EditPersona { persona, name, description } => {
            if name.as_deref().is_some_and(|n| n.trim().is_empty()) {
                return Err(SceneError::Invalid("a persona needs a name".into()));
            }
            let (id, shown) = store.transaction(|tx| {
                let found = character::resolve_persona(tx, &persona)?;
                character::update_persona(tx, &found.id, name.as_deref().map(str::trim), description.as_deref())?;
                Ok((found.id, name.clone().unwrap_or(found.name)))
            })?;
            Some(authored("updated", "persona", id, shown))
        }
        AuthorCommand::DeletePersona { persona } => {
            let found = store.transaction(|tx| {
                let found = character::resolve_persona(tx, &persona)?;
                character::delete_persona(tx, &found.id)?;
                Ok(found)
            })?;
            Some(authored("deleted", "persona", found.id, found.name))
        }
        AuthorCommand::Personas => {
            let personas = store.with(character::personas)?;
            return Ok(vec![AuthorEvent::Personas { personas }]);
        }
        AuthorCommand::Budgets { campaign } => {
            let defaults = ctx.config().scene.budgets;
            let (campaign_id, name, saved) = store.with(|c| {
                let (id, name) = authoring::resolve(c, Level::Campaign, &campaign)?;
                let saved = authoring::budgets(c, &id)?;
                Ok((id, name, saved))
            })?;
            let own = saved.is_some();
            let plan = saved.unwrap_or(defaults);
            let shares = crate::prompting::Section::ALL.iter().map(|s| (s.label().to_string(), plan.percent(*s))).collect();
            return Ok(vec![AuthorEvent::Budgets { campaign_id, name, shares, own }]);
        }
        AuthorCommand::Attach { lorebook, level, owner: key } => {
            let (book, name) = attach_target(ctx, &lorebook)?;
            store.transaction(|tx| authoring::attach(tx, level, &owner(tx, level, &key)?, &book))?;
            Some(authored("attached", "lorebook", book, name))
        }
        AuthorCommand::Detach { lorebook, level, owner: key } => {
            let (book, name) = attach_target(ctx, &lorebook)?;
            let detached = store.transaction(|tx| authoring::detach(tx, level, &owner(tx, level, &key)?, &book))?;
            if !detached {
                return Err(SceneError::Invalid(format!("lorebook {name:?} is not attached there")));
            }
            Some(authored("detached", "lorebook", book, name))
        }
        AuthorCommand::EditState { campaign, edit } => {
            let (id, name) = store.transaction(|tx| {
                let (campaign, name) = authoring::resolve(tx, Level::Campaign, &campaign)?;
                authoring::edit_state(tx, &campaign, &edit)?;
                Ok((campaign, name))
            })?;
            Some(authored("updated", "campaign state", id, name))
        }
        AuthorCommand::EditCharacterState { scene, character: who, state } => {
            let (scene_id, name) = store.transaction(|tx| {
                let scene_id = records::resolve_scene(tx, &scene)?;
                let character = character::resolve(tx, &who)?;
                // A state kept for someone not in the scene reaches no prompt: the request
                // named the wrong character or scene, and hears so.
                if !records::in_cast(tx, &scene_id, &character.id)? {
                    return Err(StoreError::Invalid(format!("{} is not in this scene's cast: add them to it first", character.name)));
                }
                let campaign = authoring::campaign_of_scene(tx, &scene_id)?;
                let edit = StateEdit::Character { scene_id: scene_id.clone(), character_id: character.id, state };
                authoring::edit_state(tx, &campaign, &edit)?;
                Ok((scene_id, character.name))
            })?;
            Some(authored("updated", "character state", scene_id, name))
        }
        AuthorCommand::ExportTranscript { scene, format, out } => {
            let (scene_id, text, messages) = store.with(|c| {
                let scene_id = records::resolve_scene(c, &scene)?;
                let (text, messages) = super::transcript::render(c, &scene_id, format)?;
                Ok((scene_id, text, messages))
            })?;
            write_file(&out, &text)?;
            return Ok(vec![AuthorEvent::TranscriptExported { scene_id, path: out, messages }]);
        }
    };
    let tree = store.with(authoring::tree)?;
    Ok(event.into_iter().chain([AuthorEvent::Tree { tree: Box::new(tree) }]).collect())
}

/// Write `text` whole or not at all: a temporary file beside the target, then a rename.
fn write_file(path: &std::path::Path, text: &str) -> Result<(), SceneError> {
    let io = |e: std::io::Error| SceneError::Invalid(format!("cannot write {}: {e}", path.display()));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, text).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The `(id, name)` of the lorebook to attach or detach; a book that is not there is
/// refused as not found (a front door answers 404), not as a bad request.
fn attach_target(ctx: &Context, key: &str) -> Result<(String, String), SceneError> {
    use crate::interop::InteropError;
    Ok(ctx.store.with(|c| {
        crate::interop::library::resolve_lorebook(c, key).map_err(|e| match e {
            InteropError::NotFound { .. } => StoreError::NotFound(e.to_string()),
            InteropError::Store(inner) => inner,
            other => StoreError::Invalid(other.to_string()),
        })
    })?)
}

/// Resolve the owner of a lorebook attachment.
fn owner(tx: &rusqlite::Connection, level: LoreLevel, key: &str) -> Result<String, StoreError> {
    let level = match level {
        LoreLevel::World => Level::World,
        LoreLevel::Campaign => Level::Campaign,
        LoreLevel::Character => return Ok(crate::character::resolve(tx, key)?.id),
    };
    Ok(authoring::resolve(tx, level, key)?.0)
}
