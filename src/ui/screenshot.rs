//! `lorekeeper screenshot`: open the workbench on a layout or a panel, let it settle, and save
//! what the window shows as a PNG — for the README, for bug reports, and for looking at
//! the GUI on a machine without a screen (under Xvfb).

use super::{PanelKind, UiError, WorkbenchApp};
use crate::config::Paths;
use crate::engine::{self, Command};
use std::path::{Path, PathBuf};

/// What to capture.
#[derive(Debug, Clone)]
pub struct ScreenshotOptions {
    pub out: PathBuf,
    /// The layout to draw (`None`: every panel as a tab).
    pub layout: Option<super::layout::NamedLayout>,
    /// The panel brought into view (`None`: the layout's own).
    pub panel: Option<PanelKind>,
    pub width: f32,
    pub height: f32,
    /// Frames drawn before the capture: the engine's first replies (the demo scene, the
    /// chat list) arrive over the first few.
    pub frames: u32,
}

type Shared<T> = std::sync::Arc<std::sync::Mutex<Option<T>>>;

struct Capture {
    app: WorkbenchApp,
    options: ScreenshotOptions,
    frame: u32,
    asked: bool,
    /// Filled by egui's callback once the frame is read back.
    image: Shared<std::sync::Arc<egui::ColorImage>>,
    result: Shared<Result<(), String>>,
}

impl eframe::App for Capture {
    fn logic(&mut self, ctx: &egui::Context, frame: &mut eframe::Frame) {
        self.app.logic(ctx, frame);
    }

    fn ui(&mut self, ui: &mut egui::Ui, frame: &mut eframe::Frame) {
        if self.frame == 0 {
            if let Some(layout) = self.options.layout {
                self.app.use_layout(layout);
            }
            if let Some(panel) = self.options.panel {
                self.app.show_panel(panel);
            }
        }
        self.app.ui(ui, frame);
        let ctx = ui.ctx().clone();
        let shot = self.image.lock().ok().and_then(|mut slot| slot.take());
        if let Some(image) = shot {
            let written = write_png(&self.options.out, &image);
            if let Ok(mut slot) = self.result.lock() {
                *slot = Some(written);
            }
            // Captured: nothing of ours is left to lose, whatever a panel shows as running.
            self.app.quit_without_asking();
            ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            return;
        }
        self.frame += 1;
        if self.frame >= self.options.frames && !self.asked {
            self.asked = true;
            let slot = self.image.clone();
            let waker = ctx.clone();
            ctx.send_viewport_cmd(egui::ViewportCommand::Screenshot(egui::ScreenshotCallback::new(move |image| {
                if let Ok(mut slot) = slot.lock() {
                    *slot = Some(image);
                }
                waker.request_repaint();
            })));
        }
        // Keep drawing until the capture is in, whether or not anything moves.
        ctx.request_repaint();
    }
}

/// The image as an 8-bit RGBA PNG.
fn write_png(path: &Path, image: &egui::ColorImage) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let [width, height] = image.size;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), width as u32, height as u32);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let bytes: Vec<u8> = image.pixels.iter().flat_map(|p| p.to_array()).collect();
    encoder
        .write_header()
        .and_then(|mut writer| writer.write_image_data(&bytes))
        .map_err(|e| format!("cannot encode {}: {e}", path.display()))
}

/// Open the window, capture it, close it. Needs a display (`xvfb-run` gives one).
pub fn screenshot(paths: Paths, options: ScreenshotOptions) -> Result<(), UiError> {
    let engine = engine::start(paths)?;
    if engine.send(Command::Scene(crate::scene::SceneCommand::Demo)).is_err() {
        tracing::warn!("the engine stopped before the demo could be added");
    }
    let native = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_title("Lorekeeper").with_inner_size([options.width, options.height]),
        persist_window: false,
        ..Default::default()
    };
    let result = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = result.clone();
    let out = options.out.clone();
    eframe::run_native(
        "Lorekeeper screenshot",
        native,
        Box::new(move |cc| {
            Ok(Box::new(Capture {
                app: WorkbenchApp::for_capture(&cc.egui_ctx, engine),
                options,
                frame: 0,
                asked: false,
                image: Default::default(),
                result: slot,
            }))
        }),
    )
    .map_err(|e| UiError::Window(e.to_string()))?;
    let outcome = result.lock().map(|mut r| r.take()).unwrap_or(None);
    match outcome {
        Some(Ok(())) => Ok(()),
        Some(Err(message)) => Err(UiError::Window(message)),
        None => Err(UiError::Window(format!("the window closed before {} was captured", out.display()))),
    }
}
