//! Roleplay prose as its readers expect to see it: `*actions*` in italics (the asterisks
//! are markup, not text) and `"speech"` in a colour of its own, as SillyTavern and most
//! chat front ends show it. Only the look changes; the stored text keeps its asterisks.

use egui::text::{LayoutJob, TextFormat};

/// How a stretch of prose is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    /// Between asterisks: an action or a thought.
    pub action: bool,
    /// Between quotation marks (kept in the text): spoken words.
    pub speech: bool,
}

/// `text` cut into stretches of one look each, the asterisks that mark actions taken
/// out. An asterisk with no partner later in the text is only a character.
pub fn spans(text: &str) -> Vec<(Look, String)> {
    let mut out: Vec<(Look, String)> = Vec::new();
    let mut look = Look { action: false, speech: false };
    let chars: Vec<char> = text.chars().collect();
    let push = |out: &mut Vec<(Look, String)>, look: Look, c: char| match out.last_mut() {
        Some((last, s)) if *last == look => s.push(c),
        _ => out.push((look, c.to_string())),
    };
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '*' if look.action || chars[i + 1..].contains(&'*') => look.action = !look.action,
            '"' => {
                // The opening quote belongs to the speech, the closing one too.
                if look.speech {
                    push(&mut out, look, c);
                    look.speech = false;
                } else {
                    look.speech = chars[i + 1..].contains(&'"');
                    push(&mut out, look, c);
                }
            }
            '“' => {
                look.speech = true;
                push(&mut out, look, c);
            }
            '”' => {
                push(&mut out, look, c);
                look.speech = false;
            }
            _ => push(&mut out, look, c),
        }
    }
    out
}

/// The text a reader sees: `text` without its action asterisks.
pub fn plain(text: &str) -> String {
    spans(text).into_iter().map(|(_, s)| s).collect()
}

/// Where the workbench keeps the "Raw text" switch for this module to read.
fn raw_id() -> egui::Id {
    egui::Id::unique("lorekeeper-prose-raw")
}

/// Show transcripts as written (asterisks kept, one colour) or as prose.
pub fn set_raw(ctx: &egui::Context, raw: bool) {
    ctx.data_mut(|d| d.insert_temp(raw_id(), raw));
}

/// A label's layout: `speaker` (bold when given) then the prose, or the text as it was
/// written when the "Raw text" switch is on.
pub fn job(ui: &egui::Ui, speaker: Option<&str>, text: &str) -> LayoutJob {
    let raw = ui.ctx().data(|d| d.get_temp::<bool>(raw_id())).unwrap_or(false);
    let style = ui.style();
    let font = egui::TextStyle::Body.resolve(style);
    let color = ui.visuals().text_color();
    let speech_color = if ui.visuals().dark_mode { egui::Color32::from_rgb(235, 200, 120) } else { egui::Color32::from_rgb(150, 90, 10) };
    let mut job = LayoutJob::default();
    job.wrap.max_width = ui.available_width();
    if let Some(name) = speaker {
        job.append(&format!("{}: ", super::short(name)), 0.0, TextFormat { font_id: font.clone(), color: ui.visuals().strong_text_color(), ..Default::default() });
    }
    let stretches = if raw { vec![(Look { action: false, speech: false }, text.to_string())] } else { spans(text) };
    for (look, stretch) in stretches {
        let format = TextFormat {
            font_id: font.clone(),
            color: if look.speech { speech_color } else if look.action { ui.visuals().weak_text_color() } else { color },
            italics: look.action,
            ..Default::default()
        };
        job.append(&stretch, 0.0, format);
    }
    job
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str) -> String {
        spans(text)
            .into_iter()
            .map(|(look, s)| match (look.action, look.speech) {
                (true, true) => format!("[act+say:{s}]"),
                (true, false) => format!("[act:{s}]"),
                (false, true) => format!("[say:{s}]"),
                (false, false) => s,
            })
            .collect()
    }

    #[test]
    fn actions_lose_their_asterisks_and_speech_keeps_its_quotes() {
        assert_eq!(
            shown(r#"*sets down the bone folder* "Of course I remember." She smiles."#),
            r#"[act:sets down the bone folder] [say:"Of course I remember."] She smiles."#
        );
        assert_eq!(shown("“Tea?” *pours*"), "[say:“Tea?”] [act:pours]");
        assert_eq!(shown(r#"*whispers "run"*"#), r#"[act:whispers ][act+say:"run"]"#);
        // Unpaired marks are only characters.
        assert_eq!(shown("5 * 3 is fifteen"), "5 * 3 is fifteen");
        assert_eq!(shown(r#"He said "wait"#), r#"He said "wait"#);
        assert_eq!(plain("*pulls a stool* Sit."), "pulls a stool Sit.");
    }
}
