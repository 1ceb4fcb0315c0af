//! Character portraits: the picture an imported card brought, small and rounded, beside
//! the character's messages in the Chat panel, in the Scene panel's cast and in the
//! Library's list; a coloured circle with the initial for a character without one, or
//! whose picture cannot be read.
//!
//! The engine sends each portrait already cut to a small square
//! (`InteropCommand::Portrait`). It is asked for once per character for the whole
//! window, decoded once, and kept as a texture in egui's memory, which every panel reads;
//! a panel only holds the bytes that reached it until they are decoded.

use crate::engine::{Command, Event};
use crate::interop::{InteropCommand, InteropEvent, PngBytes};
use std::collections::HashMap;

/// The size portraits are drawn at beside messages and in the cast, in points.
pub const SIZE: f32 = 40.0;

/// What the window knows of one character's portrait (in egui's memory, shared by panels).
#[derive(Clone)]
enum Slot {
    /// Asked for; the answer has not been drawn yet.
    Asked,
    /// Decoded: the texture, or `None` for the initial.
    Ready(Option<egui::TextureHandle>),
}

fn slot_id(character: &str) -> egui::Id {
    egui::Id::unique(("lorekeeper_portrait", character))
}

/// One panel's side of the portraits: what arrived for it and is not decoded yet.
#[derive(Default)]
pub struct Portraits {
    arrived: HashMap<String, Option<PngBytes>>,
}

impl Portraits {
    /// Keep a portrait the engine sent (every panel sees it; the first to draw it decodes).
    pub fn apply(&mut self, event: &Event) {
        if let Event::Interop(InteropEvent::Portrait { id, png }) = event {
            self.arrived.insert(id.clone(), png.clone());
        }
    }

    /// Draw the portrait of character `id` (`name` for the initial and the label
    /// "Portrait of NAME", or "Initial of NAME" while there is no picture), `size` points
    /// square. The first time any panel draws a character, its portrait is asked for.
    pub fn show(&mut self, ui: &mut egui::Ui, id: &str, name: &str, size: f32, outbox: &mut Vec<Command>) -> egui::Response {
        let ctx = ui.ctx().clone();
        let key = slot_id(id);
        let slot = ctx.data(|d| d.get_temp::<Slot>(key));
        let texture = match slot {
            Some(Slot::Ready(texture)) => {
                self.arrived.remove(id);
                texture
            }
            _ => match self.arrived.remove(id) {
                Some(png) => {
                    let texture = png.and_then(|png| decode(&ctx, id, &png));
                    ctx.data_mut(|d| d.insert_temp(key, Slot::Ready(texture.clone())));
                    texture
                }
                None => {
                    if slot.is_none() {
                        ctx.data_mut(|d| d.insert_temp(key, Slot::Asked));
                        outbox.push(Command::Interop(InteropCommand::Portrait { character: id.to_string() }));
                    }
                    None
                }
            },
        };
        match texture {
            Some(texture) => ui.add(
                egui::Image::new(&texture)
                    .fit_to_exact_size(egui::vec2(size, size))
                    .corner_radius(size * 0.2)
                    .alt_text(format!("Portrait of {name}")),
            ),
            None => initial(ui, name, size),
        }
    }
}

/// The portrait as a texture; `None` (the initial is drawn) when the bytes are not a
/// picture. Never panics on what the engine sent.
fn decode(ctx: &egui::Context, id: &str, png: &PngBytes) -> Option<egui::TextureHandle> {
    match crate::character::rgba(&png.0) {
        Ok((width, height, pixels)) => {
            let image = egui::ColorImage::from_rgba_unmultiplied([width as usize, height as usize], &pixels);
            Some(ctx.load_texture(format!("portrait-{id}"), image, egui::TextureOptions::LINEAR))
        }
        Err(e) => {
            tracing::warn!(character = id, error = %e, "portrait not drawn");
            None
        }
    }
}

/// A circle in a colour of the name's own, with its first letter.
fn initial(ui: &mut egui::Ui, name: &str, size: f32) -> egui::Response {
    let (rect, response) = ui.allocate_exact_size(egui::vec2(size, size), egui::Sense::hover());
    if ui.is_rect_visible(rect) {
        // FNV-1a over the name: names alike in their first letters still get hues apart.
        let hash = name.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
        let hue = (hash >> 8) % 360;
        let fill: egui::Color32 = egui::ecolor::Hsva::new(hue as f32 / 360.0, 0.45, 0.6, 1.0).into();
        let painter = ui.painter();
        painter.circle_filled(rect.center(), size / 2.0, fill);
        let letter: String = name.chars().find(|c| c.is_alphanumeric()).map(|c| c.to_uppercase().collect()).unwrap_or_else(|| "?".into());
        painter.text(rect.center(), egui::Align2::CENTER_CENTER, letter, egui::FontId::proportional(size * 0.5), egui::Color32::WHITE);
    }
    let label = format!("Initial of {name}");
    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Image, true, &label));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_picture_decodes_to_a_texture_and_anything_else_to_the_initial() {
        let ctx = egui::Context::default();
        let png = crate::interop::format::png::square_thumbnail(2, 2, &[9, 9, 9, 255].repeat(4), 96);
        let texture = decode(&ctx, "a", &PngBytes(png.into())).expect("a picture");
        assert_eq!(texture.size(), [2, 2]);
        assert!(decode(&ctx, "b", &PngBytes(b"not a picture".as_slice().into())).is_none());
        assert!(decode(&ctx, "c", &PngBytes(Vec::new().into())).is_none());
    }
}
