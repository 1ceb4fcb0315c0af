//! The Budgets panel: a slider per context section and for the context size, the
//! allocation they give the next call, the ledger of the last round's calls, the
//! prompt exactly as it would be sent, tokens per section over the telemetry window, and
//! a bar chart of one call's sections, allocated beside used.
//!
//! Slider moves never reach the engine: the panel re-fits the candidates the last
//! preview brought (allocation and enforcement are arithmetic on a few hundred items)
//! and renders the prompt itself, only when a value actually changed.

use crate::engine::Command;
use crate::prompting::{BudgetLedger, BudgetPlan, Section};
use crate::scene::SceneCommand;
use crate::scene::envelope::{AgentKind, Envelope};
use crate::scene::preview::EnvelopePreview;
use egui::RichText;

/// The smallest and largest context sizes the slider offers (the config refuses less
/// than 256).
const CONTEXT_RANGE: std::ops::RangeInclusive<u32> = 256..=262_144;

/// The envelope for one set of slider values.
struct Fitted {
    plan: BudgetPlan,
    max_context_tokens: u32,
    envelope: Envelope,
    /// The system prompt, or why it could not be rendered.
    prompt: Result<String, String>,
    /// The whole prompt as sent, estimated (the schema a structured call appends included).
    prompt_tokens: Option<u32>,
}

pub struct BudgetsPanel {
    preview: Option<EnvelopePreview>,
    target: PreviewTarget,
    /// The sliders' values; taken from the configuration with the first preview and
    /// kept across refreshes so a round does not undo what the user is trying.
    plan: Option<BudgetPlan>,
    max_context_tokens: u32,
    fitted: Option<Fitted>,
    /// The call the section chart shows: 0 the next call, n the last round's n-th.
    chart_call: usize,
}

impl Default for BudgetsPanel {
    fn default() -> Self {
        Self { preview: None, target: PreviewTarget::Director, plan: None, max_context_tokens: 8192, fitted: None, chart_call: 0 }
    }
}

/// One call's ledger as the section chart draws it.
#[derive(Debug, Clone, PartialEq)]
pub struct SectionChart {
    /// Which call: "Next call" or the agent (and character) of a call of the last round.
    pub call: String,
    pub bars: Vec<SectionBar>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SectionBar {
    pub section: String,
    pub allocated: u32,
    pub used: u32,
}

impl SectionChart {
    fn new(call: String, ledger: &BudgetLedger) -> Self {
        let bars = ledger
            .sections
            .iter()
            .map(|s| SectionBar { section: section_title(s.section), allocated: s.allocated, used: s.used })
            .collect();
        Self { call, bars }
    }
}

impl BudgetsPanel {
    pub fn preview_command(&self, scene: &str) -> Command {
        self.target.command(scene)
    }

    /// Forget the scene's preview (another scene was chosen); slider values stay.
    pub fn clear(&mut self) {
        self.preview = None;
        self.fitted = None;
    }

    pub fn set_preview(&mut self, preview: EnvelopePreview) {
        if self.plan.is_none() {
            self.plan = Some(preview.plan.clone());
            self.max_context_tokens = preview.max_context_tokens;
        }
        self.preview = Some(preview);
        self.fitted = None;
        self.refit();
    }

    pub fn preview(&self) -> Option<&EnvelopePreview> {
        self.preview.as_ref()
    }

    /// The ledger for the current slider values.
    pub fn ledger(&self) -> Option<&BudgetLedger> {
        self.fitted.as_ref().map(|f| &f.envelope.ledger)
    }

    /// The calls the section chart can show: the next call, then the last round's.
    pub fn chart_calls(&self) -> Vec<String> {
        let mut calls = vec!["Next call".to_string()];
        if let Some(last) = self.preview.as_ref().and_then(|p| p.last_round.as_ref()) {
            calls.extend(last.ledgers.iter().enumerate().map(|(i, call)| {
                let who = call.character.as_deref().map(|c| format!(" — {c}")).unwrap_or_default();
                format!("Round {} call {}: {}{who}", last.round, i + 1, call.agent)
            }));
        }
        calls
    }

    /// Show call `index` of [`Self::chart_calls`] in the section chart.
    pub fn choose_chart_call(&mut self, index: usize) {
        self.chart_call = index;
    }

    /// The section chart's data: allocated and used tokens per section of the chosen
    /// call (the next call when the chosen one is gone, as after another round).
    pub fn section_chart(&self) -> Option<SectionChart> {
        let calls = self.chart_calls();
        let last = self.preview.as_ref().and_then(|p| p.last_round.as_ref());
        match (self.chart_call, last) {
            (n, Some(last)) if n > 0 && n <= last.ledgers.len() => Some(SectionChart::new(calls[n].clone(), &last.ledgers[n - 1].ledger)),
            _ => self.fitted.as_ref().map(|f| SectionChart::new(calls[0].clone(), &f.envelope.ledger)),
        }
    }

    /// The system prompt for the current slider values.
    pub fn prompt(&self) -> Option<&str> {
        self.fitted.as_ref().and_then(|f| f.prompt.as_deref().ok())
    }

    /// Re-fit when a slider value differs from the last fit; cheap when nothing moved.
    fn refit(&mut self) {
        let (Some(preview), Some(plan)) = (&self.preview, &self.plan) else { return };
        if self.fitted.as_ref().is_some_and(|f| &f.plan == plan && f.max_context_tokens == self.max_context_tokens) {
            return;
        }
        let envelope = preview.fit(plan, self.max_context_tokens);
        let rendered = preview.render(&envelope);
        let prompt_tokens = rendered.as_ref().ok().map(|p| preview.prompt_tokens(p));
        let prompt = rendered.map(|p| p.system).map_err(|e| e.to_string());
        self.fitted = Some(Fitted { plan: plan.clone(), max_context_tokens: self.max_context_tokens, envelope, prompt, prompt_tokens });
    }

    pub fn show(&mut self, ui: &mut egui::Ui, scene: &str, campaign: Option<&str>, active: &[String], outbox: &mut Vec<Command>) {
        self.target_picker(ui, scene, active, outbox);
        let Some(preview) = &self.preview else {
            ui.spinner();
            return;
        };
        if let Some(error) = &preview.template_error {
            ui.colored_label(ui.visuals().error_fg_color, format!("The prompt templates cannot be loaded: {error}"));
        }
        let configured = (preview.plan.clone(), preview.max_context_tokens);
        let (reserved, reply, saved) = (preview.reserved_tokens, preview.reply_tokens, preview.campaign_plan);
        let appended = preview.reply.appended;
        egui::ScrollArea::vertical().id_salt("budgets_scroll").show(ui, |ui| {
            self.sliders(ui, configured);
            let schema = match appended {
                0 => String::new(),
                n => format!(" ({n} of them the reply's JSON Schema)"),
            };
            ui.weak(format!(
                "Kept off the top before the shares apply: {} tokens for the instructions and the turn{schema}, {reply} for the reply.",
                reserved.saturating_sub(reply)
            ));
            self.save_controls(ui, campaign, saved, outbox);
            self.refit();
            self.allocation(ui);
            self.section_bars(ui);
            self.last_round(ui);
            self.telemetry(ui);
            self.prompt_view(ui);
        });
    }

    fn target_picker(&mut self, ui: &mut egui::Ui, scene: &str, active: &[String], outbox: &mut Vec<Command>) {
        // A character chosen in another scene, or gone from this one's cast: the preview
        // would wait for ever on a call nobody can make. The first present one instead.
        if let PreviewTarget::Character(Some(name)) = &self.target
            && !active.is_empty()
            && !active.contains(name)
        {
            self.target = PreviewTarget::Character(active.first().cloned());
            self.preview = None;
            outbox.push(self.target.command(scene));
        }
        ui.horizontal_wrapped(|ui| {
            ui.label("Next call of");
            let before = self.target.clone();
            ui.radio_value(&mut self.target, PreviewTarget::Director, "the Director");
            let character_selected = matches!(self.target, PreviewTarget::Character(_));
            if ui.radio(character_selected, "a character").clicked() && !character_selected {
                self.target = PreviewTarget::Character(active.first().cloned());
            }
            if let PreviewTarget::Character(name) = &mut self.target {
                let label = ui.label("Character");
                egui::ComboBox::from_id_salt("budgets_character")
                    .selected_text(name.clone().unwrap_or_else(|| "first present".into()))
                    .show_ui(ui, |ui| {
                        for a in active {
                            ui.selectable_value(name, Some(a.clone()), a);
                        }
                    })
                    .response
                    .labelled_by(label.id);
            }
            if self.target != before || ui.button("Refresh preview").clicked() {
                outbox.push(self.target.command(scene));
            }
        });
    }

    fn sliders(&mut self, ui: &mut egui::Ui, configured: (BudgetPlan, u32)) {
        let Some(plan) = &mut self.plan else { return };
        egui::Grid::new("budget_sliders").num_columns(2).show(ui, |ui| {
            for section in Section::ALL {
                let label = ui.label(format!("{} %", section_title(section)));
                let value = plan.percent.entry(section).or_insert(0.0);
                ui.add(egui::Slider::new(value, 0.0..=100.0).step_by(1.0).suffix(" %")).labelled_by(label.id);
                ui.end_row();
            }
            let label = ui.label("Max context tokens");
            ui.add(egui::Slider::new(&mut self.max_context_tokens, CONTEXT_RANGE).logarithmic(true)).labelled_by(label.id);
            ui.end_row();
        });
        let total: f64 = Section::ALL.iter().map(|s| plan.percent(*s)).sum();
        ui.horizontal(|ui| {
            ui.label(format!("Planned: {total:.0} %{}", if total > 100.0 { " (scaled down to 100 %)" } else { "" }));
            if ui.button("Reset to configuration").clicked() {
                *plan = configured.0;
                self.max_context_tokens = configured.1;
            }
        });
    }

    /// Save the sliders' shares as the campaign's own (what its rounds use), or go back
    /// to the configuration file's.
    fn save_controls(&mut self, ui: &mut egui::Ui, campaign: Option<&str>, saved: bool, outbox: &mut Vec<Command>) {
        let Some(campaign) = campaign else { return };
        ui.horizontal(|ui| {
            ui.label(if saved { "This campaign's rounds use its own shares." } else { "This campaign's rounds use the configuration file's shares." });
            if let Some(plan) = self.plan.clone()
                && ui.button("Save for this campaign").on_hover_text("Its rounds use these shares from the next call on").clicked()
            {
                let set = crate::scene::author::AuthorCommand::SetBudgets { campaign: campaign.to_string(), plan: Some(plan) };
                outbox.push(Command::Scene(SceneCommand::Author(set)));
            }
            if saved && ui.button("Use the configuration's shares").clicked() {
                let set = crate::scene::author::AuthorCommand::SetBudgets { campaign: campaign.to_string(), plan: None };
                outbox.push(Command::Scene(SceneCommand::Author(set)));
                self.plan = None;
            }
        });
    }

    fn allocation(&self, ui: &mut egui::Ui) {
        let Some(fitted) = &self.fitted else { return };
        ui.add_space(6.0);
        let used = fitted.envelope.ledger.used();
        match (fitted.prompt_tokens, &self.preview) {
            // The whole prompt as sent, schema included, and the reply's cap: what the
            // server checks against its context.
            (Some(prompt), Some(preview)) => ui.strong(format!(
                "Next call — prompt {prompt} tokens ({used} of them the sections) + reply {} = {} of {} tokens",
                preview.reply_tokens,
                prompt + preview.reply_tokens,
                fitted.max_context_tokens
            )),
            _ => ui.strong(format!("Next call — {used} of {} tokens used by the sections", fitted.max_context_tokens)),
        };
        ledger_grid(ui, "budget_allocation", &fitted.envelope.ledger);
    }

    /// Allocated beside used tokens per section, for the next call or one of the last
    /// round's calls.
    fn section_bars(&mut self, ui: &mut egui::Ui) {
        let calls = self.chart_calls();
        if self.chart_call >= calls.len() {
            self.chart_call = 0;
        }
        ui.add_space(6.0);
        egui::CollapsingHeader::new("Sections of one call").id_salt("budget_section_chart").default_open(true).show(ui, |ui| {
            ui.horizontal(|ui| {
                let label = ui.label("Call");
                egui::ComboBox::from_id_salt("budget_chart_call")
                    .selected_text(calls[self.chart_call].as_str())
                    .show_ui(ui, |ui| {
                        for (i, call) in calls.iter().enumerate() {
                            ui.selectable_value(&mut self.chart_call, i, call);
                        }
                    })
                    .response
                    .labelled_by(label.id);
            });
            let Some(chart) = self.section_chart() else { return };
            let names: Vec<String> = chart.bars.iter().map(|b| b.section.clone()).collect();
            let count = names.len();
            let bars = |which: fn(&SectionBar) -> u32, offset: f64| -> Vec<egui_plot::Bar> {
                chart
                    .bars
                    .iter()
                    .enumerate()
                    .map(|(i, b)| egui_plot::Bar::new(i as f64 + offset, which(b) as f64).width(0.35).name(&b.section))
                    .collect()
            };
            let response = egui_plot::Plot::new("budget_section_chart_plot")
                .height(200.0)
                .legend(super::small_legend())
                .y_axis_label("tokens")
                .include_y(0.0)
                .allow_scroll(false)
                .allow_drag(false)
                .allow_zoom(false)
                .x_grid_spacer(move |input| {
                    // One mark per section, under its pair of bars.
                    let (lo, hi) = input.bounds;
                    let last = count.saturating_sub(1) as f64;
                    let marks = lo.ceil().max(0.0) as usize..=hi.floor().min(last).max(-1.0) as usize;
                    marks.filter(|i| *i < count).map(|i| egui_plot::GridMark { value: i as f64, step_size: 1.0 }).collect()
                })
                .x_axis_formatter(move |mark, _| {
                    let i = mark.value.round();
                    if (mark.value - i).abs() > 1e-6 || i < 0.0 { String::new() } else { names.get(i as usize).cloned().unwrap_or_default() }
                })
                .show(ui, |plot| {
                    plot.bar_chart(egui_plot::BarChart::new("Allocated", bars(|b| b.allocated, -0.18)));
                    plot.bar_chart(egui_plot::BarChart::new("Used", bars(|b| b.used, 0.18)));
                })
                .response;
            let call = chart.call.clone();
            response.widget_info(move || egui::WidgetInfo::labeled(egui::Role::Figure, true, format!("Sections of {call} chart")));
        });
    }

    fn last_round(&self, ui: &mut egui::Ui) {
        let Some(last) = self.preview.as_ref().and_then(|p| p.last_round.as_ref()) else { return };
        ui.add_space(6.0);
        egui::CollapsingHeader::new(format!("Ledgers of round {} ({} calls, {} tokens)", last.round, last.ledgers.len(), last.tokens))
            .id_salt("budget_last_round")
            .show(ui, |ui| {
                for (i, call) in last.ledgers.iter().enumerate() {
                    let who = call.character.as_deref().map(|c| format!(" — {c}")).unwrap_or_default();
                    ui.label(
                        RichText::new(format!(
                            "{}{who}: prompt {} + completion {} tokens (provider-reported)",
                            call.agent, call.prompt_tokens, call.completion_tokens
                        ))
                        .strong(),
                    );
                    ledger_grid(ui, &format!("budget_call_{i}"), &call.ledger);
                    ui.add_space(4.0);
                }
            });
    }

    fn telemetry(&self, ui: &mut egui::Ui) {
        let Some(preview) = &self.preview else { return };
        ui.add_space(6.0);
        egui::CollapsingHeader::new(format!(
            "Tokens per section over the last {} messages ({} rounds)",
            preview.telemetry_messages,
            preview.telemetry.len()
        ))
        .id_salt("budget_telemetry")
        .default_open(true)
        .show(ui, |ui| {
            if preview.telemetry.is_empty() {
                ui.weak("No round played yet.");
                return;
            }
            let lines: Vec<egui_plot::Line<'_>> = Section::ALL
                .iter()
                .map(|section| {
                    let points: Vec<[f64; 2]> =
                        preview.telemetry.iter().map(|p| [p.round as f64, p.used.get(section).copied().unwrap_or(0) as f64]).collect();
                    egui_plot::Line::new(section_title(*section), points)
                })
                .collect();
            egui_plot::Plot::new("budget_telemetry_plot")
                .height(180.0)
                .legend(super::small_legend())
                .x_axis_label("round")
                // Rounds are whole numbers: no mark between them.
                .x_axis_formatter(|mark, _| if mark.value.fract().abs() < 1e-9 && mark.value >= 0.0 { format!("{}", mark.value as i64) } else { String::new() })
                .y_axis_label("tokens used")
                .allow_scroll(false)
                .show(ui, |plot| {
                    for line in lines {
                        plot.line(line);
                    }
                });
        });
    }

    fn prompt_view(&self, ui: &mut egui::Ui) {
        let (Some(fitted), Some(preview)) = (&self.fitted, &self.preview) else { return };
        ui.add_space(6.0);
        let who = match (preview.agent, &preview.character) {
            (AgentKind::Character, Some(c)) => c.name.clone(),
            (AgentKind::Reconcile, _) => "the Director (reconcile)".into(),
            (AgentKind::Narrator, _) => "the Narrator".into(),
            (AgentKind::World, _) => "the World agent".into(),
            _ => "the Director".into(),
        };
        ui.strong(format!("Prompt as it would be sent to {who}"));
        match &fitted.prompt {
            Ok(system) => {
                ui.label("System:");
                let label = ui.label("Prompt preview");
                let mut text = system.as_str();
                ui.add(egui::TextEdit::multiline(&mut text).font(egui::TextStyle::Monospace).desired_width(f32::INFINITY))
                    .labelled_by(label.id);
                if preview.reply.appended > 0 {
                    ui.weak(format!("…then the reply's JSON Schema, about {} tokens, which the call adds to the system prompt.", preview.reply.appended));
                }
                ui.label("User:");
                ui.label(RichText::new(&preview.turn).monospace());
            }
            Err(e) => {
                ui.colored_label(ui.visuals().error_fg_color, e);
            }
        }
    }
}

fn section_title(section: Section) -> String {
    let label = section.label();
    let mut chars = label.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// The tokens `section`'s own share comes to (shares adding up to over 100 are scaled
/// down, as the allocation does); `None` for a section the ledger does not list.
fn share_tokens(ledger: &BudgetLedger, section: Section) -> Option<u32> {
    let total: f64 = ledger.sections.iter().map(|s| s.percent.max(0.0)).sum::<f64>().max(100.0);
    let percent = ledger.section(section)?.percent.max(0.0);
    Some((ledger.max_context_tokens as f64 * percent / total).floor() as u32)
}

/// A ledger as a table, with the dropped items and their reasons beneath.
fn ledger_grid(ui: &mut egui::Ui, id: &str, ledger: &BudgetLedger) {
    if ledger.prompt_tokens > 0 {
        ui.label(format!(
            "Prompt as sent about {} tokens + reply cap {} of a {}-token context",
            ledger.prompt_tokens, ledger.reply_tokens, ledger.context_tokens
        ));
    }
    egui::Grid::new(id).striped(true).num_columns(7).show(ui, |ui| {
        for h in ["Section", "%", "Allocated", "Used", "Kept", "Dropped", ""] {
            ui.strong(h);
        }
        ui.end_row();
        for s in &ledger.sections {
            ui.label(section_title(s.section));
            ui.label(format!("{:.0}", s.percent));
            ui.label(s.allocated.to_string());
            ui.label(s.used.to_string());
            ui.label(s.kept.len().to_string());
            ui.label(s.dropped.len().to_string());
            match share_tokens(ledger, s.section) {
                // Room the other sections left unused flows on (the allocation's rule): a
                // small share can be handed far more than it, which the table says rather
                // than showing "2 %" beside hundreds of tokens with no word.
                Some(share) if s.allocated > share + 1 => {
                    ui.weak(format!("its share ≈ {share}; takes unused room from other sections"));
                }
                _ => {
                    ui.label("");
                }
            }
            ui.end_row();
        }
    });
    let dropped: Vec<_> = ledger.sections.iter().flat_map(|s| s.dropped.iter().map(move |d| (s.section, d))).collect();
    if !dropped.is_empty() {
        egui::CollapsingHeader::new(format!("{} dropped items", dropped.len())).id_salt(format!("{id}_dropped")).show(ui, |ui| {
            for (section, d) in dropped {
                ui.label(format!("{}: {} ({} tokens) — {}", section_title(section), d.id, d.tokens, d.reason));
            }
        });
    }
}

/// Which agent's next call the Budgets panel previews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviewTarget {
    Director,
    Character(Option<String>),
}

impl PreviewTarget {
    pub fn command(&self, scene: &str) -> Command {
        let (agent, character) = match self {
            PreviewTarget::Director => (AgentKind::Director, None),
            PreviewTarget::Character(name) => (AgentKind::Character, name.clone()),
        };
        Command::Scene(SceneCommand::Preview { scene: scene.to_string(), agent, character })
    }
}
