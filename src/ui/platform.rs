//! The window's place on the desktop: its app id and icon (so a `.desktop` file and the
//! task bar can find it), and native file dialogs.
//!
//! File dialogs go through the XDG desktop portal (`rfd`'s portal backend, which loads
//! libdbus at run time: nothing to build against), or zenity where the portal is
//! missing. A dialog runs on a thread of its own and hands its answer back through a
//! channel the panel polls each frame, so the frame never waits on it. A machine with
//! neither (a headless box, a bare window manager) gets a plain status line saying so;
//! the typed path fields and drag-and-drop work everywhere.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

/// A path as typed in a path field: trimmed, with a leading `~` (alone or before `/`)
/// for the home folder, as a shell reads it ("cannot read ~/bastien.png" otherwise:
/// nothing else expands it). `~user` and a `~` anywhere else are left as typed.
pub fn typed_path(text: &str) -> PathBuf {
    let text = text.trim();
    let rest = match text.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.trim_start_matches('/'),
        _ => return PathBuf::from(text),
    };
    match directories::BaseDirs::new() {
        Some(dirs) if rest.is_empty() => dirs.home_dir().to_path_buf(),
        Some(dirs) => dirs.home_dir().join(rest),
        None => PathBuf::from(text),
    }
}

/// The app id the window announces (Wayland `app_id`, X11 `WM_CLASS`): it names the
/// `assets/lorekeeper.desktop` file, which is how a desktop pairs the two.
pub const APP_ID: &str = "lorekeeper";

/// The window icon, drawn for Lorekeeper (128×128 RGBA PNG).
const ICON_PNG: &[u8] = include_bytes!("../../assets/lorekeeper.png");

/// `builder` with the app id and the window icon. An icon that does not decode is
/// logged and left out: the window opens without one rather than not at all.
pub fn viewport(builder: egui::ViewportBuilder) -> egui::ViewportBuilder {
    let builder = builder.with_app_id(APP_ID);
    match decode_icon(ICON_PNG) {
        Ok(icon) => builder.with_icon(icon),
        Err(e) => {
            tracing::warn!(error = %e, "the window icon did not decode; opening without one");
            builder
        }
    }
}

/// A PNG as the RGBA pixels a window icon takes.
pub fn decode_icon(bytes: &[u8]) -> Result<egui::IconData, String> {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    // Palettes and grey expand to RGB(A), 16-bit channels shrink to 8.
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().map_err(|e| e.to_string())?;
    let size = reader.output_buffer_size().ok_or("the icon is too large")?;
    let mut buf = vec![0; size];
    let info = reader.next_frame(&mut buf).map_err(|e| e.to_string())?;
    let pixels = &buf[..info.buffer_size()];
    let rgba: Vec<u8> = match info.color_type {
        png::ColorType::Rgba => pixels.to_vec(),
        png::ColorType::Rgb => pixels.chunks_exact(3).flat_map(|p| [p[0], p[1], p[2], 255]).collect(),
        png::ColorType::GrayscaleAlpha => pixels.chunks_exact(2).flat_map(|p| [p[0], p[0], p[0], p[1]]).collect(),
        png::ColorType::Grayscale => pixels.iter().flat_map(|&g| [g, g, g, 255]).collect(),
        png::ColorType::Indexed => return Err("an indexed icon was not expanded".into()),
    };
    Ok(egui::IconData { rgba, width: info.width, height: info.height })
}

/// What a file dialog is asked for.
#[derive(Debug, Clone)]
pub struct FileRequest {
    pub title: String,
    pub kind: DialogKind,
    /// Named groups of extensions (without the dot) the dialog offers as filters.
    pub filters: Vec<(String, Vec<String>)>,
    /// The folder the dialog opens in.
    pub directory: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DialogKind {
    /// Choose existing files (several when `multiple`).
    Open { multiple: bool },
    /// Choose where to write, starting from `file_name`.
    Save { file_name: String },
    /// Choose a folder.
    Folder,
}

impl FileRequest {
    pub fn open(title: &str, multiple: bool) -> Self {
        Self { title: title.into(), kind: DialogKind::Open { multiple }, filters: Vec::new(), directory: None }
    }

    /// A save dialog that starts at `suggested` (a full path: its folder and file name).
    pub fn save(title: &str, suggested: &str) -> Self {
        let path = typed_path(suggested);
        let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let directory = path.parent().filter(|p| p.is_dir()).map(PathBuf::from);
        Self { title: title.into(), kind: DialogKind::Save { file_name }, filters: Vec::new(), directory }
    }

    pub fn folder(title: &str) -> Self {
        Self { title: title.into(), kind: DialogKind::Folder, filters: Vec::new(), directory: None }
    }

    pub fn filter(mut self, name: &str, extensions: &[&str]) -> Self {
        self.filters.push((name.into(), extensions.iter().map(|e| e.to_string()).collect()));
        self
    }
}

/// How a file dialog ended.
#[derive(Debug, Clone, PartialEq)]
pub enum DialogOutcome {
    Chosen(Vec<PathBuf>),
    /// Closed without a choice.
    Cancelled,
    /// No dialog could be shown, and why.
    Unavailable(String),
}

/// A "Browse…" button and the dialog it opened: one per path field.
pub struct FilePicker {
    pending: Option<Receiver<DialogOutcome>>,
    /// The last outcome worth a line (nothing chosen, no dialog here).
    note: Option<Result<String, String>>,
    run: fn(FileRequest) -> DialogOutcome,
}

impl Default for FilePicker {
    fn default() -> Self {
        Self { pending: None, note: None, run: run_dialog }
    }
}

impl FilePicker {
    /// A picker whose dialogs are answered by `run` (tests: a scripted answer).
    pub fn with_runner(run: fn(FileRequest) -> DialogOutcome) -> Self {
        Self { run, ..Self::default() }
    }

    /// Whether a dialog is open and not answered yet.
    pub fn waiting(&self) -> bool {
        self.pending.is_some()
    }

    /// The line the picker shows after its button (`Err`: no dialog could be shown).
    pub fn note(&self) -> Option<&Result<String, String>> {
        self.note.as_ref()
    }

    /// Draw the button (`text`, e.g. "Browse…") and the picker's line, open a dialog for
    /// `request()` when clicked, and return what a dialog chose once it has answered.
    pub fn button(&mut self, ui: &mut egui::Ui, text: &str, request: impl FnOnce() -> FileRequest) -> Option<Vec<PathBuf>> {
        let clicked = ui.button(text).on_hover_text("Choose with the desktop's file dialog").clicked();
        if clicked {
            self.open(request());
        }
        let chosen = self.poll(ui.ctx());
        if self.waiting() {
            ui.spinner();
            ui.label("waiting for the file dialog…");
        } else {
            match &self.note {
                Some(Ok(line)) => {
                    ui.label(line);
                }
                Some(Err(line)) => {
                    ui.colored_label(ui.visuals().error_fg_color, line);
                }
                None => {}
            }
        }
        chosen
    }

    /// Open a dialog for `request` on a thread of its own. A dialog still open is
    /// forgotten: its answer, if it ever comes, goes nowhere.
    pub fn open(&mut self, request: FileRequest) {
        let (tx, rx) = std::sync::mpsc::channel();
        let run = self.run;
        let spawned = std::thread::Builder::new().name("file-dialog".into()).spawn(move || {
            let _ = tx.send(run(request));
        });
        match spawned {
            Ok(_) => {
                self.pending = Some(rx);
                self.note = None;
            }
            Err(e) => self.note = Some(Err(format!("cannot open a file dialog: {e}"))),
        }
    }

    /// The dialog's answer if it has come; asks for another frame while it has not.
    pub fn poll(&mut self, ctx: &egui::Context) -> Option<Vec<PathBuf>> {
        let rx = self.pending.as_ref()?;
        let outcome = match rx.try_recv() {
            Ok(outcome) => outcome,
            Err(TryRecvError::Empty) => {
                ctx.request_repaint_after(Duration::from_millis(100));
                return None;
            }
            Err(TryRecvError::Disconnected) => DialogOutcome::Unavailable("the file dialog stopped without an answer".into()),
        };
        self.pending = None;
        match outcome {
            DialogOutcome::Chosen(paths) if !paths.is_empty() => {
                self.note = None;
                Some(paths)
            }
            DialogOutcome::Chosen(_) | DialogOutcome::Cancelled => {
                self.note = Some(Ok("no file chosen".into()));
                None
            }
            DialogOutcome::Unavailable(why) => {
                self.note = Some(Err(format!("no file dialog here ({why}): type the path instead")));
                None
            }
        }
    }
}

/// Whether this machine can show a file dialog: a desktop portal on the session bus
/// (running, or startable by D-Bus activation), or zenity for `rfd` to fall back to.
pub fn file_dialog_available() -> Result<(), String> {
    if zenity_installed() {
        return Ok(());
    }
    portal_reachable(None)
}

fn zenity_installed() -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("zenity").is_file()))
}

const PORTAL: &str = "org.freedesktop.portal.Desktop";

/// Ask the session bus (or the bus at `address`) whether the desktop portal is there.
fn portal_reachable(address: Option<&str>) -> Result<(), String> {
    let bus = match address {
        Some(address) => zbus::blocking::connection::Builder::address(address).and_then(|b| b.build()),
        None => zbus::blocking::Connection::session(),
    }
    .map_err(|e| format!("no D-Bus session bus: {e}"))?;
    let dbus = zbus::blocking::fdo::DBusProxy::new(&bus).map_err(|e| format!("the session bus does not answer: {e}"))?;
    let name = zbus::names::BusName::try_from(PORTAL).map_err(|e| e.to_string())?;
    if dbus.name_has_owner(name).unwrap_or(false) {
        return Ok(());
    }
    let activatable = dbus.list_activatable_names().map_err(|e| format!("the session bus does not answer: {e}"))?;
    if activatable.iter().any(|n| n.as_str() == PORTAL) {
        Ok(())
    } else {
        Err("no desktop portal (xdg-desktop-portal) and no zenity".into())
    }
}

/// Show the native dialog for `request` (blocking: run it off the frame).
fn run_dialog(request: FileRequest) -> DialogOutcome {
    if let Err(why) = file_dialog_available() {
        return DialogOutcome::Unavailable(why);
    }
    let mut dialog = rfd::FileDialog::new().set_title(&request.title);
    for (name, extensions) in &request.filters {
        dialog = dialog.add_filter(name, &extensions[..]);
    }
    if let Some(dir) = &request.directory {
        dialog = dialog.set_directory(dir);
    }
    let chosen = match request.kind {
        DialogKind::Open { multiple: true } => dialog.pick_files(),
        DialogKind::Open { multiple: false } => dialog.pick_file().map(|p| vec![p]),
        DialogKind::Save { file_name } => dialog.set_file_name(file_name).save_file().map(|p| vec![p]),
        DialogKind::Folder => dialog.pick_folder().map(|p| vec![p]),
    };
    chosen.map_or(DialogOutcome::Cancelled, DialogOutcome::Chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_path_starting_with_a_tilde_is_under_home() {
        let home = directories::BaseDirs::new().expect("a home folder").home_dir().to_path_buf();
        assert_eq!(typed_path(" ~/bastien.png "), home.join("bastien.png"));
        assert_eq!(typed_path("~"), home);
        assert_eq!(typed_path("~/"), home);
        assert_eq!(typed_path("~bob/x.png"), PathBuf::from("~bob/x.png"), "another user's home is not guessed");
        assert_eq!(typed_path("cards/~/x.png"), PathBuf::from("cards/~/x.png"));
        assert_eq!(typed_path("/tmp/x.png"), PathBuf::from("/tmp/x.png"));
    }

    #[test]
    fn the_shipped_icon_decodes_and_a_broken_one_is_an_error() {
        let icon = decode_icon(ICON_PNG).expect("the icon decodes");
        assert_eq!((icon.width, icon.height), (128, 128));
        assert_eq!(icon.rgba.len(), 128 * 128 * 4);
        assert!(icon.rgba.chunks_exact(4).any(|p| p[3] == 0), "the corners are transparent");
        assert!(decode_icon(b"not a png").is_err());
        assert!(decode_icon(&ICON_PNG[..ICON_PNG.len() / 2]).is_err());
    }

    #[test]
    fn no_session_bus_is_a_plain_reason_not_a_hang() {
        let started = std::time::Instant::now();
        let err = portal_reachable(Some("unix:path=/nonexistent/lorekeeper-test/bus")).unwrap_err();
        assert!(err.contains("no D-Bus session bus"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_dialog_answers_through_the_channel_without_blocking_the_frame() {
        let ctx = egui::Context::default();
        let mut picker = FilePicker::with_runner(|request| {
            std::thread::sleep(Duration::from_millis(50));
            match request.kind {
                DialogKind::Save { file_name } => DialogOutcome::Chosen(vec![PathBuf::from("/chosen").join(file_name)]),
                _ => DialogOutcome::Unavailable("no desktop portal (xdg-desktop-portal) and no zenity".into()),
            }
        });
        picker.open(FileRequest::save("Export", "/home/nobody/Maren Vosk.png"));
        let started = std::time::Instant::now();
        assert_eq!(picker.poll(&ctx), None, "the first poll returns at once");
        assert!(started.elapsed() < Duration::from_millis(40));
        let chosen = loop {
            if let Some(paths) = picker.poll(&ctx) {
                break paths;
            }
            assert!(started.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(chosen, vec![PathBuf::from("/chosen/Maren Vosk.png")]);
        picker.open(FileRequest::open("Import", true));
        while picker.waiting() {
            assert_eq!(picker.poll(&ctx), None);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(matches!(picker.note(), Some(Err(line)) if line.contains("type the path instead")), "{:?}", picker.note());
    }
}
