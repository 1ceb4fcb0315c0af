//! A scene's whole transcript as a file a person reads (Markdown) or a script reads
//! (JSON): every message in order, grouped by round, with the hand edits made in the
//! scene (its characters' states, and the campaign's state while it was played).

use serde::Serialize;
use super::model::{MessageKind, SceneMessage};
use super::{authoring, records};
use crate::store::StoreError;
use rusqlite::Connection;

/// The two forms a transcript is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TranscriptFormat {
    Markdown,
    Json,
}

/// The transcript of `scene_id` and how many messages it holds.
pub fn render(conn: &Connection, scene_id: &str, format: TranscriptFormat) -> Result<(String, usize), StoreError> {
    let view = records::load_view(conn, scene_id)?;
    let messages = records::recent_messages(conn, scene_id, u32::MAX)?;
    let edits = authoring::state_edits_of_scene(conn, scene_id)?;
    let text = match format {
        TranscriptFormat::Json => {
            let value = serde_json::json!({
                "scene": { "id": view.id, "name": view.name, "description": view.description,
                           "world": view.world, "campaign": view.campaign, "arc": view.arc, "rounds": view.rounds },
                "messages": messages,
                "state_edits": edits.iter().map(|(at, edit)| serde_json::json!({ "at": at, "edit": edit })).collect::<Vec<_>>(),
            });
            serde_json::to_string_pretty(&value).map_err(|e| StoreError::Corrupt(e.to_string()))?
        }
        TranscriptFormat::Markdown => markdown(&view.name, &format!("{} / {} / {}", view.world, view.campaign, view.arc), &view.description, &messages),
    };
    Ok((text, messages.len()))
}

fn markdown(name: &str, place: &str, description: &str, messages: &[SceneMessage]) -> String {
    let mut out = format!("# {name}\n\n_{place}_\n");
    if !description.trim().is_empty() {
        out.push_str(&format!("\n{}\n", description.trim()));
    }
    let mut round = None;
    for m in messages {
        if round != Some(m.round) {
            round = Some(m.round);
            out.push_str(&format!("\n## Round {}\n", m.round));
        }
        let speaker = match m.kind {
            MessageKind::Narrator => "*Narrator*".to_string(),
            _ => format!("**{}**", m.speaker),
        };
        out.push_str(&format!("\n{speaker}: {}\n", m.content.trim()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_groups_messages_by_round() {
        let m = |round, kind, speaker: &str, content: &str| SceneMessage {
            number: 0,
            round,
            kind,
            character_id: None,
            speaker: speaker.into(),
            content: content.into(),
        };
        let text = markdown(
            "The Cellar",
            "Vael / Ashfall / One",
            "",
            &[m(1, MessageKind::User, "Kit", "Hello?"), m(1, MessageKind::Character, "Bram", "Who's there?"), m(2, MessageKind::Narrator, "Narrator", "Dust falls.")],
        );
        expect_test::expect![[r#"
            # The Cellar

            _Vael / Ashfall / One_

            ## Round 1

            **Kit**: Hello?

            **Bram**: Who's there?

            ## Round 2

            *Narrator*: Dust falls.
        "#]]
        .assert_eq(&text);
    }
}
