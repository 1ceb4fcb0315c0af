//! Provider settings: edit profiles, map agent roles to them, and test one live.

use crate::config::{Config, ROLES};
use crate::engine::{Command, LlmCommand, LlmEvent, ModelLine};
use crate::llm::{ProviderKind, ProviderProfile};
use std::collections::BTreeMap;

/// What the last test of a profile showed.
#[derive(Debug, Clone, Default)]
pub struct TestView {
    pub running: bool,
    pub streamed: String,
    pub outcome: Option<Result<String, String>>,
}

pub struct ProvidersPanel {
    config: Config,
    selected: String,
    draft: ProviderProfile,
    /// Text of the optional numeric fields, so a half-typed number is not lost.
    temperature_text: String,
    max_tokens_text: String,
    tests: BTreeMap<String, TestView>,
    model: Option<ModelLine>,
    server: ServerSection,
    keys: KeySection,
}

/// The API key of the profile being edited: a password field whose text goes into the
/// keyring through the engine (never onto disk, into a log or back onto the screen),
/// and a line saying where the profile's key comes from now.
#[derive(Default)]
struct KeySection {
    /// What is typed, until "Store in keyring" takes it.
    typed: String,
    /// The last report per profile: where its key comes from, any keyring problem, and
    /// whether this process has a keyring at all.
    status: BTreeMap<String, (crate::llm::keyring::KeySource, Option<String>, bool)>,
    /// The profile whose key source was last asked for, so it is asked once per selection.
    asked: Option<String>,
    /// A store or clear sent and not answered yet.
    pending: Option<String>,
}

/// The HTTP front door, hosted by the workbench: `lorekeeper serve` over a second engine
/// on this window's library (the library's job leases keep the two from running the same
/// round or turn).
struct ServerSection {
    paths: Option<crate::config::Paths>,
    addr: String,
    token: String,
    running: Option<crate::serve::ServerHandle>,
    status: Option<Result<String, String>>,
}

impl ServerSection {
    fn start(&mut self) {
        let Some(paths) = self.paths.clone() else {
            self.status = Some(Err("the library's location is not known yet".into()));
            return;
        };
        let addr: std::net::SocketAddr = match self.addr.trim().parse() {
            Ok(addr) => addr,
            Err(_) => {
                self.status = Some(Err(format!("{:?} is not an address like 127.0.0.1:8000", self.addr.trim())));
                return;
            }
        };
        let token = Some(self.token.trim().to_string()).filter(|t| !t.is_empty());
        let started = crate::engine::start(paths)
            .map_err(|e| e.to_string())
            .and_then(|engine| crate::serve::start(engine, crate::serve::ServeOptions { addr, token, cors: None }).map_err(|e| e.to_string()));
        match started {
            Ok(handle) => {
                self.status = Some(Ok(format!("Listening on http://{}", handle.addr)));
                self.running = Some(handle);
            }
            Err(e) => self.status = Some(Err(e)),
        }
    }

    fn stop(&mut self) {
        if let Some(handle) = self.running.take() {
            handle.stop();
        }
        self.status = Some(Ok("Stopped".into()));
    }

    fn show(&mut self, ui: &mut egui::Ui) {
        ui.strong("Server");
        ui.label("Serve this library over HTTP and WebSocket (the identity API, scenes, chat, memory).");
        ui.horizontal_wrapped(|ui| {
            let running = self.running.is_some();
            let label = ui.label("Address");
            ui.add_enabled(!running, egui::TextEdit::singleline(&mut self.addr).desired_width(160.0).id_salt("server_addr")).labelled_by(label.id);
            let label = ui.label("Token");
            ui.add_enabled(!running, egui::TextEdit::singleline(&mut self.token).password(true).desired_width(160.0).id_salt("server_token"))
                .labelled_by(label.id)
                .on_hover_text("Required of every request; needed for any address but loopback");
            if running {
                if ui.button("Stop server").clicked() {
                    self.stop();
                }
            } else if ui.button("Start server").clicked() {
                self.start();
            }
        });
        super::status_line(ui, &self.status);
    }
}

impl ProvidersPanel {
    /// Empty until the engine reports the configuration ([`LlmEvent::Config`]).
    pub fn new() -> Self {
        Self {
            draft: ProviderProfile::default(),
            config: Config { profiles: Vec::new(), ..Config::default() },
            selected: String::new(),
            temperature_text: String::new(),
            max_tokens_text: String::new(),
            tests: BTreeMap::new(),
            model: None,
            server: ServerSection { paths: None, addr: "127.0.0.1:8000".into(), token: String::new(), running: None, status: None },
            keys: KeySection::default(),
        }
    }

    /// Where this window's library and config are, for the server it may host.
    pub fn set_paths(&mut self, paths: crate::config::Paths) {
        self.server.paths = Some(paths);
    }

    /// The address the hosted server listens on, while it runs.
    pub fn server_addr(&self) -> Option<std::net::SocketAddr> {
        self.server.running.as_ref().map(|h| h.addr)
    }

    pub fn startup() -> Vec<Command> {
        vec![Command::Llm(LlmCommand::Config)]
    }

    /// Where the selected profile's key comes from, as last reported, and the keyring's
    /// problem if it had one: what the Providers panel shows instead of the key.
    pub fn key_status(&self, profile: &str) -> Option<(String, Option<String>)> {
        self.keys.status.get(profile).map(|(source, problem, _)| (source.line(), problem.clone()))
    }

    /// What the default profile runs on, once the engine has said.
    pub fn model_line(&self) -> Option<&ModelLine> {
        self.model.as_ref()
    }

    fn select(&mut self, name: &str) {
        if let Some(p) = self.config.profile(name) {
            self.selected = name.to_string();
            self.draft = p.clone();
            self.temperature_text = p.sampler.temperature.map(|t| t.to_string()).unwrap_or_default();
            self.max_tokens_text = p.sampler.max_tokens.map(|t| t.to_string()).unwrap_or_default();
        }
    }

    pub fn test_view(&self, profile: &str) -> Option<&TestView> {
        self.tests.get(profile)
    }

    pub fn apply(&mut self, event: &LlmEvent) {
        match event {
            LlmEvent::ProfileTestStarted { profile } => {
                self.tests.insert(profile.clone(), TestView { running: true, ..Default::default() });
            }
            LlmEvent::ProfileToken { profile, text } => {
                self.tests.entry(profile.clone()).or_default().streamed.push_str(text);
            }
            LlmEvent::ProfileTested { profile, ok, reply, latency_ms, usage, error, model, .. } => {
                let view = self.tests.entry(profile.clone()).or_default();
                view.running = false;
                view.outcome = Some(if *ok {
                    Ok(format!(
                        "{model} answered in {latency_ms} ms ({} + {} tokens{}): {reply}",
                        usage.prompt_tokens,
                        usage.completion_tokens,
                        if usage.reported { "" } else { ", estimated" }
                    ))
                } else {
                    Err(error.clone().unwrap_or_default())
                });
            }
            LlmEvent::Calls { .. } => {}
            // A saved config may name another variable: ask again where the key comes from.
            LlmEvent::ConfigSaved => self.keys.asked = None,
            LlmEvent::KeyStatus { profile, source, problem, keyring, .. } => {
                if self.keys.pending.as_deref() == Some(profile.as_str()) {
                    self.keys.pending = None;
                }
                self.keys.status.insert(profile.clone(), (source.clone(), problem.clone(), *keyring));
            }
            LlmEvent::Config { config, model } => {
                self.config = (**config).clone();
                self.model = Some(model.clone());
                let keep = if self.config.profile(&self.draft.name).is_some() {
                    self.draft.name.clone()
                } else {
                    self.config.default_profile.clone()
                };
                self.select(&keep);
            }
        }
    }

    pub fn show(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        ui.heading("Providers");
        ui.horizontal_top(|ui| {
            ui.vertical(|ui| {
                ui.set_width(200.0);
                ui.label("Profiles");
                let names: Vec<String> = self.config.profiles.iter().map(|p| p.name.clone()).collect();
                for name in names {
                    let label = if name == self.config.default_profile { format!("{name} (default)") } else { name.clone() };
                    if ui.selectable_label(self.selected == name, label).clicked() {
                        self.select(&name);
                    }
                }
                if ui.button("New profile").clicked() {
                    let mut n = 1;
                    while self.config.profile(&format!("profile-{n}")).is_some() {
                        n += 1;
                    }
                    self.selected.clear();
                    self.draft = ProviderProfile { name: format!("profile-{n}"), model: "model-name".into(), ..Default::default() };
                }
            });
            ui.add_space(12.0);
            ui.vertical(|ui| {
                self.editor(ui, outbox);
                ui.add_space(8.0);
                self.roles(ui, outbox);
                ui.add_space(8.0);
                self.server.show(ui);
            });
        });
    }

    fn editor(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        egui::Grid::new("profile_editor").num_columns(2).spacing([12.0, 6.0]).show(ui, |ui| {
            let label = ui.label("Name");
            ui.add(egui::TextEdit::singleline(&mut self.draft.name).id_salt("profile_name")).labelled_by(label.id);
            ui.end_row();
            let label = ui.label("Kind");
            egui::ComboBox::from_id_salt("profile_kind")
                .selected_text(self.draft.kind.label())
                .show_ui(ui, |ui| {
                    for kind in ProviderKind::ALL {
                        ui.selectable_value(&mut self.draft.kind, kind, kind.label());
                    }
                })
                .response
                .labelled_by(label.id);
            ui.end_row();
            let mut url = self.draft.base_url.clone().unwrap_or_default();
            let hint = self.draft.kind.default_base_url().unwrap_or("");
            let label = ui.label("Base URL");
            ui.add(egui::TextEdit::singleline(&mut url).hint_text(hint).id_salt("profile_url")).labelled_by(label.id);
            self.draft.base_url = Some(url).filter(|u| !u.trim().is_empty());
            ui.end_row();
            let label = ui.label("Model");
            ui.add(egui::TextEdit::singleline(&mut self.draft.model).id_salt("profile_model")).labelled_by(label.id);
            ui.end_row();
            if let Some(default_env) = self.draft.kind.default_key_env() {
                let mut env = self.draft.api_key_env.clone().unwrap_or_default();
                let label = ui.label("API key variable");
                // The client sends no key to an OpenAI-compatible server on this machine or
                // the local network (llama.cpp's server, Ollama, LM Studio, vLLM).
                let local = self.draft.kind == ProviderKind::Openai && self.draft.base_url.as_deref().is_some_and(crate::llm::client::is_local_address);
                let var = ui
                    .horizontal(|ui| {
                        ui.add(egui::TextEdit::singleline(&mut env).hint_text(default_env).id_salt("profile_key_env")).labelled_by(label.id);
                        let var = if env.trim().is_empty() { default_env.to_string() } else { env.trim().to_string() };
                        let set = crate::llm::Secret::from_env(&var).is_some();
                        ui.label(match (set, local) {
                            (true, _) => format!("{var} is set"),
                            (false, true) => format!("{var} is not set (a local server needs none)"),
                            (false, false) => format!("{var} is not set"),
                        });
                        var
                    })
                    .inner;
                self.draft.api_key_env = Some(env).filter(|e| !e.trim().is_empty());
                ui.end_row();
                self.key_row(ui, outbox, &var, !local);
            }
            if matches!(self.draft.kind, ProviderKind::Scripted | ProviderKind::Local) {
                let mut path = self.draft.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
                let label = ui.label(if self.draft.kind == ProviderKind::Scripted { "Script file" } else { "Model file" });
                ui.add(egui::TextEdit::singleline(&mut path).id_salt("profile_path")).labelled_by(label.id);
                self.draft.path = Some(path.into()).filter(|p: &std::path::PathBuf| !p.as_os_str().is_empty());
                ui.end_row();
            }
            let label = ui.label("Max context tokens");
            ui.add(egui::DragValue::new(&mut self.draft.max_context_tokens).range(256..=2_000_000)).labelled_by(label.id);
            ui.end_row();
            let label = ui.label("Temperature");
            ui.add(egui::TextEdit::singleline(&mut self.temperature_text).hint_text("server default").id_salt("profile_temp")).labelled_by(label.id);
            ui.end_row();
            let label = ui.label("Max reply tokens");
            ui.add(egui::TextEdit::singleline(&mut self.max_tokens_text).hint_text("server default").id_salt("profile_max_tokens")).labelled_by(label.id);
            ui.end_row();
            // The embedded model runs in this process: no connection to time, no server
            // to enforce a schema, no key to send. Those options are for HTTP profiles.
            let http = self.draft.kind != ProviderKind::Local;
            let label = ui.label(if http { "Timeouts (s): connect / idle / total" } else { "Timeouts (s): idle / total" });
            ui.horizontal(|ui| {
                if http {
                    ui.add(egui::DragValue::new(&mut self.draft.timeouts.connect_secs).range(0.1..=600.0)).labelled_by(label.id);
                }
                ui.add(egui::DragValue::new(&mut self.draft.timeouts.read_secs).range(0.1..=3600.0)).labelled_by(label.id);
                ui.add(egui::DragValue::new(&mut self.draft.timeouts.total_secs).range(0.1..=7200.0)).labelled_by(label.id);
            });
            ui.end_row();
            let label = ui.label("Retries");
            ui.add(egui::DragValue::new(&mut self.draft.retry.max_retries).range(0..=10)).labelled_by(label.id);
            ui.end_row();
            ui.label("Options");
            ui.horizontal(|ui| {
                ui.checkbox(&mut self.draft.cache, "Cache identical requests");
                if http {
                    ui.checkbox(&mut self.draft.supports_json_schema, "Server enforces JSON schema");
                    ui.checkbox(&mut self.draft.allow_key_over_http, "Send the key over plain http")
                        .on_hover_text("Off: a key for an http:// address that is not this machine is refused, not sent");
                }
            });
            ui.end_row();
        });

        let parsed = self.parse_numbers();
        if let Err(problem) = &parsed {
            ui.colored_label(ui.visuals().error_fg_color, problem);
        }
        ui.horizontal(|ui| {
            let exists = self.config.profile(&self.selected).is_some();
            if ui.add_enabled(parsed.is_ok(), egui::Button::new("Save profile")).clicked() {
                if let Ok(mut profile) = parsed {
                    // A script path typed with `~` is saved as the folder it names.
                    profile.path = profile.path.map(|p| super::platform::typed_path(&p.to_string_lossy()));
                    outbox.push(Command::Llm(LlmCommand::SaveProfile {
                        profile,
                        previous_name: Some(self.selected.clone()).filter(|s| !s.is_empty()),
                    }));
                }
            }
            if ui.add_enabled(exists, egui::Button::new("Make default")).clicked() {
                outbox.push(Command::Llm(LlmCommand::SetDefaultProfile { name: self.selected.clone() }));
            }
            let deletable = exists && self.selected != self.config.default_profile;
            if ui.add_enabled(deletable, egui::Button::new("Delete")).clicked() {
                outbox.push(Command::Llm(LlmCommand::DeleteProfile { name: self.selected.clone() }));
            }
            let running = self.tests.get(&self.selected).is_some_and(|t| t.running);
            if ui.add_enabled(exists && !running, egui::Button::new("Test profile")).clicked() {
                outbox.push(Command::Llm(LlmCommand::TestProfile { profile: self.selected.clone() }));
            }
        });
        if let Some(test) = self.tests.get(&self.selected) {
            if test.running {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label(format!("testing… {}", test.streamed));
                });
            }
            match &test.outcome {
                Some(Ok(text)) => {
                    ui.colored_label(egui::Color32::from_rgb(80, 170, 90), format!("Test passed: {text}"));
                }
                Some(Err(text)) => {
                    ui.colored_label(ui.visuals().error_fg_color, format!("Test failed: {text}"));
                }
                None => {}
            }
        }
    }

    /// The "API key" row: a password field, "Store in keyring", "Clear", and where the
    /// key comes from. The store runs in the engine (the keyring is D-Bus, which may be
    /// slow or absent); the typed text leaves the panel at once, undo history included.
    /// Without a keyring the buttons are off and, where the profile needs a key
    /// (`needs_key`: not a server on this machine or network), one calm line says the key
    /// comes from the variable `var`.
    fn key_row(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, var: &str, needs_key: bool) {
        let name = self.draft.name.trim().to_string();
        if !name.is_empty() && self.keys.asked.as_deref() != Some(name.as_str()) {
            self.keys.asked = Some(name.clone());
            outbox.push(Command::Llm(LlmCommand::KeyStatus { profile: name.clone() }));
        }
        let label = ui.label("API key");
        ui.vertical(|ui| {
            ui.horizontal_wrapped(|ui| {
                let field = ui
                    .add(
                        egui::TextEdit::singleline(&mut self.keys.typed)
                            .password(true)
                            .hint_text("paste a key to keep in the keyring")
                            .desired_width(220.0)
                            .id_salt("profile_api_key"),
                    )
                    .labelled_by(label.id);
                let busy = self.keys.pending.is_some();
                // Until the engine has answered, the keyring is taken to be there.
                let keyring = self.keys.status.get(&name).is_none_or(|(_, _, keyring)| *keyring);
                let ready = keyring && !busy && !name.is_empty() && !self.keys.typed.trim().is_empty();
                let store = ui
                    .add_enabled(ready, egui::Button::new("Store in keyring"))
                    .on_hover_text("Kept in the OS keyring under this profile's name; an environment variable that is set still wins")
                    .on_disabled_hover_text(if keyring { "Paste a key first" } else { "No keyring on this machine" });
                if store.clicked() {
                    let key = crate::llm::Secret::new(std::mem::take(&mut self.keys.typed).trim());
                    // The field's undo history still holds what was typed: drop it.
                    ui.ctx().data_mut(|d| d.remove::<egui::text_edit::TextEditState>(field.id));
                    self.keys.pending = Some(name.clone());
                    outbox.push(Command::Llm(LlmCommand::SetKey { profile: name.clone(), key }));
                }
                let stored = matches!(self.keys.status.get(&name), Some((crate::llm::keyring::KeySource::Keyring, _, _)));
                if ui.add_enabled(keyring && !busy && stored, egui::Button::new("Clear from keyring")).clicked() {
                    self.keys.pending = Some(name.clone());
                    outbox.push(Command::Llm(LlmCommand::ClearKey { profile: name.clone() }));
                }
            });
            // One line of the same height in every state, so the buttons below do not
            // move when the engine's answer arrives.
            match self.keys.status.get(&name) {
                _ if self.keys.pending.is_some() => {
                    ui.label("asking the keyring…");
                }
                Some((source, problem, keyring)) => {
                    ui.label(source.line());
                    let from_env = matches!(source, crate::llm::keyring::KeySource::Environment { .. });
                    if !keyring {
                        // No keyring is how this machine is, not an error: said once, calmly,
                        // and only where a key is still wanted.
                        if needs_key && !from_env {
                            ui.weak(format!("No keyring on this machine: set ${var} to give this profile its key."));
                        }
                    } else if let Some(problem) = problem {
                        ui.colored_label(ui.visuals().error_fg_color, problem);
                    }
                }
                None => {
                    ui.label("checking where the key comes from…");
                }
            }
        });
        ui.end_row();
    }

    fn parse_numbers(&self) -> Result<ProviderProfile, String> {
        let mut p = self.draft.clone();
        p.sampler.temperature = match self.temperature_text.trim() {
            "" => None,
            t => Some(t.parse::<f32>().map_err(|_| format!("temperature {t:?} is not a number"))?),
        };
        p.sampler.max_tokens = match self.max_tokens_text.trim() {
            "" => None,
            t => Some(t.parse::<u32>().map_err(|_| format!("max reply tokens {t:?} is not a whole number"))?),
        };
        if p.name.trim().is_empty() {
            return Err("the profile needs a name".into());
        }
        Ok(p)
    }

    fn roles(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        egui::CollapsingHeader::new("Agent roles").default_open(false).show(ui, |ui| {
            egui::Grid::new("role_map").num_columns(2).show(ui, |ui| {
                for role in ROLES {
                    let label = ui.label(*role);
                    let current = self.config.roles.get(*role).cloned();
                    let shown = current.clone().unwrap_or_else(|| format!("default ({})", self.config.default_profile));
                    let mut choice = current.clone();
                    egui::ComboBox::from_id_salt(("role", *role))
                        .selected_text(shown)
                        .show_ui(ui, |ui| {
                            ui.selectable_value(&mut choice, None, "default");
                            for p in &self.config.profiles {
                                ui.selectable_value(&mut choice, Some(p.name.clone()), &p.name);
                            }
                        })
                        .response
                        .labelled_by(label.id);
                    if choice != current {
                        outbox.push(Command::Llm(LlmCommand::MapRole { role: role.to_string(), profile: choice }));
                    }
                    ui.end_row();
                }
            });
        });
    }
}

impl super::Panel for ProvidersPanel {
    fn kinds(&self) -> &'static [super::PanelKind] {
        &[super::PanelKind::Providers]
    }

    fn startup(&self) -> Vec<crate::engine::Command> {
        ProvidersPanel::startup()
    }

    fn apply(&mut self, event: &crate::engine::Event, _outbox: &mut Vec<crate::engine::Command>) {
        if let crate::engine::Event::Llm(e) = event {
            ProvidersPanel::apply(self, e);
        }
    }

    fn show(&mut self, kind: super::PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<crate::engine::Command>) {
        let _ = kind;
        ProvidersPanel::show(self, ui, outbox);
    }
}
