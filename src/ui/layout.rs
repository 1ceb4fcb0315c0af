//! The workbench's tiles: which panels sit beside which, the named layouts a game master
//! starts from, the arrangements they saved, and what of it survives a restart.
//!
//! Why tiles: while a round streams the game master wants the Scene transcript, the
//! Budgets ledger, the memories injected into that call and the Prompt as sent all at
//! once — one panel at a time behind a navigation bar hid exactly what the workbench is
//! for. `egui_tiles` draws the tree (drag a tab to move a panel, drag an edge to resize);
//! this module owns the tree and knows nothing of what a panel draws.

use super::PanelKind;
use egui_tiles::{Container, Linear, LinearDir, Tile, TileId, Tiles, Tree};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The layouts every workbench offers, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedLayout {
    /// Every panel as a tab, one shown at a time, with the event log below.
    AllPanels,
    /// Waves beside the checkpoint inspector and the prompt as sent.
    CreateCharacter,
    /// The transcript with the budgets, the injected memories, the prompt and the log.
    PlayScene,
    /// The conversation beside the packet it sent and the memories it carried.
    Chat,
    /// The memory browser beside what each agent was given.
    InspectMemory,
}

impl NamedLayout {
    pub const ALL: [NamedLayout; 5] =
        [NamedLayout::AllPanels, NamedLayout::CreateCharacter, NamedLayout::PlayScene, NamedLayout::Chat, NamedLayout::InspectMemory];

    pub fn title(self) -> &'static str {
        match self {
            NamedLayout::AllPanels => "All panels",
            NamedLayout::CreateCharacter => "Create a character",
            NamedLayout::PlayScene => "Play a scene",
            NamedLayout::Chat => "Chat with a character",
            NamedLayout::InspectMemory => "Inspect memory",
        }
    }

    /// The layout whose title is `name` (any case; "play-a-scene" and "play" work too,
    /// for the command line).
    pub fn parse(name: &str) -> Option<Self> {
        let wanted = name.trim().to_lowercase().replace(['-', '_'], " ");
        Self::ALL
            .into_iter()
            .find(|l| l.title().to_lowercase() == wanted)
            .or_else(|| Self::ALL.into_iter().find(|l| l.title().to_lowercase().split(' ').any(|w| w.len() > 3 && w == wanted)))
    }

    /// The panel a game master starts working in.
    pub fn focus(self) -> PanelKind {
        match self {
            NamedLayout::AllPanels | NamedLayout::CreateCharacter => PanelKind::Waves,
            NamedLayout::PlayScene => PanelKind::Scene,
            NamedLayout::Chat => PanelKind::Chat,
            NamedLayout::InspectMemory => PanelKind::Memory,
        }
    }

    /// The tree of this layout. Every pane sits in a tab container of its own (or with
    /// its neighbours), so it has a tab to drag it by.
    pub fn tree(self) -> Tree<PanelKind> {
        let mut tiles = Tiles::default();
        let tabs = |tiles: &mut Tiles<PanelKind>, kinds: &[PanelKind]| {
            let panes = kinds.iter().map(|k| tiles.insert_pane(*k)).collect();
            tiles.insert_tab_tile(panes)
        };
        use PanelKind as P;
        let main = match self {
            NamedLayout::AllPanels => tabs(&mut tiles, &P::ALL.into_iter().filter(|k| *k != P::Events).collect::<Vec<_>>()),
            NamedLayout::CreateCharacter => {
                let waves = tabs(&mut tiles, &[P::Waves]);
                let checkpoints = tabs(&mut tiles, &[P::Checkpoints]);
                let prompt = tabs(&mut tiles, &[P::Prompt]);
                linear(&mut tiles, LinearDir::Horizontal, &[(waves, 1.0), (checkpoints, 1.4), (prompt, 1.0)])
            }
            NamedLayout::PlayScene => {
                let scene = tabs(&mut tiles, &[P::Scene]);
                let budgets = tabs(&mut tiles, &[P::Budgets]);
                let injected = tabs(&mut tiles, &[P::Injections]);
                let side = linear(&mut tiles, LinearDir::Vertical, &[(budgets, 1.0), (injected, 1.0)]);
                let prompt = tabs(&mut tiles, &[P::Prompt]);
                linear(&mut tiles, LinearDir::Horizontal, &[(scene, 1.6), (side, 1.0), (prompt, 1.0)])
            }
            NamedLayout::Chat => {
                let chat = tabs(&mut tiles, &[P::Chat]);
                let packet = tabs(&mut tiles, &[P::Packet, P::Memory]);
                linear(&mut tiles, LinearDir::Horizontal, &[(chat, 1.4), (packet, 1.0)])
            }
            NamedLayout::InspectMemory => {
                let memory = tabs(&mut tiles, &[P::Memory]);
                let injected = tabs(&mut tiles, &[P::Injections]);
                let budgets = tabs(&mut tiles, &[P::Budgets, P::Prompt]);
                let side = linear(&mut tiles, LinearDir::Vertical, &[(injected, 1.0), (budgets, 1.0)]);
                linear(&mut tiles, LinearDir::Horizontal, &[(memory, 1.3), (side, 1.0)])
            }
        };
        let log = tabs(&mut tiles, &[P::Events]);
        let root = linear(&mut tiles, LinearDir::Vertical, &[(main, 4.5), (log, 1.0)]);
        let mut tree = Tree::new(egui::Id::unique(TREE_ID), root, tiles);
        let focus = self.focus();
        tree.make_active(|_, tile| matches!(tile, Tile::Pane(p) if *p == focus));
        tree
    }
}

/// One id for every tree, so egui's memory of drags and sizes follows the workbench and
/// not a particular layout.
const TREE_ID: &str = "workbench_tiles";

fn linear(tiles: &mut Tiles<PanelKind>, dir: LinearDir, children: &[(TileId, f32)]) -> TileId {
    let mut container = Linear::new(dir, children.iter().map(|(id, _)| *id).collect());
    for (id, share) in children {
        container.shares.set_share(*id, *share);
    }
    tiles.insert_container(Container::Linear(container))
}

/// What the workbench remembers across restarts (eframe's storage, under
/// [`STORAGE_KEY`]). Every field has a default, so a state written by an older or newer
/// version still opens; one that cannot be read at all is dropped whole for the defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkbenchState {
    /// The arrangement as the game master left it.
    pub tree: Tree<PanelKind>,
    /// The layout it started from (a built-in title or a saved name).
    pub layout: String,
    /// Arrangements saved by name.
    pub saved: BTreeMap<String, Tree<PanelKind>>,
    /// The panel last worked in.
    pub focused: PanelKind,
    /// What was open: the scene, the chat's character, the identity run.
    pub scene: Option<String>,
    pub chat_character: Option<String>,
    pub identity_run: Option<String>,
    /// Transcripts as written rather than as prose.
    pub raw_text: bool,
    /// Messages typed and not sent yet, by scene id and by chat character id.
    pub scene_drafts: BTreeMap<String, String>,
    pub chat_drafts: BTreeMap<String, String>,
}

/// The key of [`WorkbenchState`] in eframe's storage.
pub const STORAGE_KEY: &str = "lorekeeper.workbench";

impl Default for WorkbenchState {
    fn default() -> Self {
        Self::starting_with(NamedLayout::AllPanels)
    }
}

impl WorkbenchState {
    pub fn starting_with(layout: NamedLayout) -> Self {
        Self {
            tree: layout.tree(),
            layout: layout.title().to_string(),
            saved: BTreeMap::new(),
            focused: layout.focus(),
            scene: None,
            chat_character: None,
            identity_run: None,
            raw_text: false,
            scene_drafts: BTreeMap::new(),
            chat_drafts: BTreeMap::new(),
        }
    }

    /// Read the state from eframe's storage; `None` when there is none or it cannot be
    /// read (a damaged file, a tree whose tiles do not hang together).
    pub fn load(storage: &dyn eframe::Storage) -> Option<Self> {
        let mut state: Self = eframe::get_value(storage, STORAGE_KEY)?;
        if !sound(&state.tree) {
            tracing::warn!("the saved layout does not hang together; starting from {}", NamedLayout::AllPanels.title());
            state.tree = NamedLayout::AllPanels.tree();
            state.layout = NamedLayout::AllPanels.title().into();
        }
        state.saved.retain(|_, tree| sound(tree));
        Some(state)
    }
}

/// Whether every tile the tree refers to exists, and the root does.
fn sound(tree: &Tree<PanelKind>) -> bool {
    let Some(root) = tree.root() else { return false };
    let mut stack = vec![root];
    let mut seen = 0usize;
    while let Some(id) = stack.pop() {
        seen += 1;
        if seen > tree.tiles.len() {
            return false; // a cycle
        }
        match tree.tiles.get(id) {
            None => return false,
            Some(Tile::Pane(_)) => {}
            Some(Tile::Container(c)) => stack.extend(c.children().copied()),
        }
    }
    true
}

/// The tile showing `kind`, if the tree has one.
pub fn tile_of(tree: &Tree<PanelKind>, kind: PanelKind) -> Option<TileId> {
    tree.tiles.find_pane(&kind)
}

/// Whether `kind` is drawn this frame (in the tree and on its container's open tab).
pub fn is_shown(tree: &Tree<PanelKind>, kind: PanelKind) -> bool {
    let Some(tile) = tile_of(tree, kind) else { return false };
    let mut child = tile;
    while let Some(parent) = tree.tiles.parent_of(child) {
        if let Some(Tile::Container(Container::Tabs(tabs))) = tree.tiles.get(parent)
            && !tabs.is_active(child)
        {
            return false;
        }
        child = parent;
    }
    true
}

/// Bring `kind` into view: open its tab if the tree has it, or else add it as a tab
/// beside `near` (the panel the game master was working in), or at the top.
pub fn reveal(tree: &mut Tree<PanelKind>, kind: PanelKind, near: PanelKind) {
    if tile_of(tree, kind).is_none() {
        let pane = tree.tiles.insert_pane(kind);
        let host = tile_of(tree, near).and_then(|t| tree.tiles.parent_of(t)).filter(|p| is_tabs(tree, *p)).or_else(|| first_tabs(tree));
        match host {
            Some(host) => {
                if let Some(Tile::Container(Container::Tabs(tabs))) = tree.tiles.get_mut(host) {
                    tabs.add_child(pane);
                }
            }
            None => {
                let tabs = tree.tiles.insert_tab_tile(vec![pane]);
                match tree.root() {
                    Some(root) => {
                        let new_root = linear(&mut tree.tiles, LinearDir::Vertical, &[(tabs, 4.0), (root, 1.0)]);
                        tree.root = Some(new_root);
                    }
                    None => tree.root = Some(tabs),
                }
            }
        }
    }
    tree.make_active(|_, tile| matches!(tile, Tile::Pane(p) if *p == kind));
}

fn is_tabs(tree: &Tree<PanelKind>, id: TileId) -> bool {
    matches!(tree.tiles.get(id), Some(Tile::Container(Container::Tabs(_))))
}

/// The first tab container, depth first from the root.
fn first_tabs(tree: &Tree<PanelKind>) -> Option<TileId> {
    let mut stack = vec![tree.root()?];
    while let Some(id) = stack.pop() {
        if is_tabs(tree, id) {
            return Some(id);
        }
        if let Some(Tile::Container(c)) = tree.tiles.get(id) {
            let children: Vec<TileId> = c.children().copied().collect();
            stack.extend(children.into_iter().rev());
        }
    }
    None
}

/// The arrangement in one line, for tests and the log: containers with their children,
/// panes by title, the open tab of a tab container marked with `*`.
pub fn describe(tree: &Tree<PanelKind>) -> String {
    fn walk(tree: &Tree<PanelKind>, id: TileId, out: &mut String) {
        match tree.tiles.get(id) {
            None => out.push('?'),
            Some(Tile::Pane(kind)) => out.push_str(kind.title()),
            Some(Tile::Container(c)) => {
                let (name, active) = match c {
                    Container::Tabs(t) => ("tabs", t.active),
                    Container::Linear(l) if l.dir == LinearDir::Horizontal => ("horizontal", None),
                    Container::Linear(_) => ("vertical", None),
                    Container::Grid(_) => ("grid", None),
                };
                out.push_str(name);
                out.push('[');
                for (i, child) in c.children().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    if active == Some(*child) {
                        out.push('*');
                    }
                    walk(tree, *child, out);
                }
                out.push(']');
            }
        }
    }
    let mut out = String::new();
    if let Some(root) = tree.root() {
        walk(tree, root, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_layout_is_sound_and_has_the_panels_its_name_promises() {
        for layout in NamedLayout::ALL {
            let tree = layout.tree();
            assert!(sound(&tree), "{}", layout.title());
            assert!(is_shown(&tree, layout.focus()), "{} opens on {:?}", layout.title(), layout.focus());
            assert!(is_shown(&tree, PanelKind::Events), "{} shows the event log", layout.title());
        }
        let play = NamedLayout::PlayScene.tree();
        for kind in [PanelKind::Scene, PanelKind::Budgets, PanelKind::Injections, PanelKind::Prompt] {
            assert!(is_shown(&play, kind), "{kind:?} beside the scene");
        }
        let create = NamedLayout::CreateCharacter.tree();
        for kind in [PanelKind::Waves, PanelKind::Checkpoints, PanelKind::Prompt] {
            assert!(is_shown(&create, kind));
        }
        let chat = NamedLayout::Chat.tree();
        assert!(is_shown(&chat, PanelKind::Chat) && is_shown(&chat, PanelKind::Packet));
        assert_eq!(describe(&NamedLayout::Chat.tree()), "vertical[horizontal[tabs[*Chat], tabs[*Packet, Memory]], tabs[*Event log]]");
    }

    #[test]
    fn revealing_a_panel_opens_its_tab_or_adds_it_beside_the_one_in_use() {
        let mut tree = NamedLayout::Chat.tree();
        reveal(&mut tree, PanelKind::Memory, PanelKind::Chat);
        assert!(is_shown(&tree, PanelKind::Memory) && !is_shown(&tree, PanelKind::Packet));
        reveal(&mut tree, PanelKind::Library, PanelKind::Chat);
        assert_eq!(describe(&tree), "vertical[horizontal[tabs[Chat, *Library], tabs[Packet, *Memory]], tabs[*Event log]]");
    }

    #[test]
    fn layouts_are_found_by_title_or_a_word_of_it() {
        assert_eq!(NamedLayout::parse("play a scene"), Some(NamedLayout::PlayScene));
        assert_eq!(NamedLayout::parse("Play-a-Scene"), Some(NamedLayout::PlayScene));
        assert_eq!(NamedLayout::parse("memory"), Some(NamedLayout::InspectMemory));
        assert_eq!(NamedLayout::parse("kitchen"), None);
    }

    #[test]
    fn a_state_round_trips_and_a_broken_tree_is_refused() {
        let mut state = WorkbenchState::starting_with(NamedLayout::PlayScene);
        state.scene = Some("s1".into());
        let text = serde_json::to_string(&state).expect("serialises");
        let back: WorkbenchState = serde_json::from_str(&text).expect("reads back");
        assert_eq!(describe(&back.tree), describe(&state.tree));
        assert_eq!(back.scene.as_deref(), Some("s1"));
        // An older state with fewer fields still reads.
        let old: WorkbenchState = serde_json::from_str(r#"{"raw_text": true}"#).expect("defaults fill the rest");
        assert!(old.raw_text && sound(&old.tree));
        let mut broken = NamedLayout::Chat.tree();
        let chat = tile_of(&broken, PanelKind::Chat).expect("chat");
        broken.tiles.remove(chat);
        assert!(!sound(&broken));
    }
}
