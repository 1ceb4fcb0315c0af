//! The Prompt panel: every recent LLM call of every agent — identity agents, the
//! Director, characters, the narrator, the summariser, the companion — with its
//! messages exactly as sent, the sampler settings, and the reply or the error; above
//! them, each agent's latency and tokens per call over time.

use crate::engine::{Command, LlmCommand};
use crate::llm::ResponseFormat;
use crate::llm::calls::CallRecord;
use egui::RichText;

/// Calls fetched per refresh.
const LIMIT: u32 = 200;

/// Agents' colours in the charts, in the order of their names.
const PALETTE: [egui::Color32; 8] = [
    egui::Color32::from_rgb(86, 156, 214),
    egui::Color32::from_rgb(230, 145, 56),
    egui::Color32::from_rgb(106, 190, 99),
    egui::Color32::from_rgb(214, 86, 86),
    egui::Color32::from_rgb(170, 120, 220),
    egui::Color32::from_rgb(220, 200, 80),
    egui::Color32::from_rgb(80, 200, 200),
    egui::Color32::from_rgb(220, 120, 180),
];

#[derive(Default)]
pub struct PromptPanel {
    calls: Vec<CallRecord>,
    selected: Option<i64>,
    filter: String,
    loading: bool,
    /// The log was fetched at least once (it may be empty).
    loaded: bool,
    /// Something new was probably sent since the last refresh.
    stale: bool,
    /// The calls as series per agent, built when the log arrives (not per frame).
    series: CallSeries,
}

/// The logged calls as chart series, one per agent, oldest call first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallSeries {
    /// When the oldest call shown was made (Unix seconds): x is seconds after it.
    pub origin: i64,
    pub agents: Vec<AgentSeries>,
}

/// One agent's calls: `[seconds after the origin, value]` points.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSeries {
    pub agent: String,
    /// Wall time of each call, in milliseconds.
    pub latency_ms: Vec<[f64; 2]>,
    /// Prompt plus completion tokens of each call.
    pub tokens: Vec<[f64; 2]>,
}

impl CallSeries {
    /// Group `calls` by agent; a call whose time cannot be read is left out.
    pub fn from_calls(calls: &[CallRecord]) -> Self {
        let timed: Vec<(i64, f64, &CallRecord)> = calls
            .iter()
            .filter_map(|c| chrono::DateTime::parse_from_rfc3339(&c.at).ok().map(|t| (t.timestamp(), t.timestamp_millis() as f64 / 1000.0, c)))
            .collect();
        let Some(origin) = timed.iter().map(|(secs, _, _)| *secs).min() else { return Self::default() };
        let mut agents: Vec<AgentSeries> = Vec::new();
        // The log comes newest first; the charts read left to right.
        for (_, at, call) in timed.iter().rev() {
            let name = if call.agent.is_empty() { "unnamed" } else { call.agent.as_str() };
            let x = at - origin as f64;
            let slot = match agents.iter().position(|a| a.agent == name) {
                Some(i) => i,
                None => {
                    agents.push(AgentSeries { agent: name.to_string(), latency_ms: Vec::new(), tokens: Vec::new() });
                    agents.len() - 1
                }
            };
            agents[slot].latency_ms.push([x, call.elapsed_ms as f64]);
            agents[slot].tokens.push([x, (call.prompt_tokens as f64) + (call.completion_tokens as f64)]);
        }
        agents.sort_by(|a, b| a.agent.cmp(&b.agent));
        // In time order whatever order the log gave (calls of several processes interleave).
        for a in &mut agents {
            a.latency_ms.sort_by(|p, q| p[0].total_cmp(&q[0]));
            a.tokens.sort_by(|p, q| p[0].total_cmp(&q[0]));
        }
        Self { origin, agents }
    }

    /// A point on the x axis as the time of day (UTC, as the call list shows it).
    fn clock(&self, x: f64) -> String {
        chrono::DateTime::from_timestamp(self.origin + x.round() as i64, 0).map(|t| t.format("%H:%M:%S").to_string()).unwrap_or_default()
    }
}

impl PromptPanel {
    pub fn calls(&self) -> &[CallRecord] {
        &self.calls
    }

    /// The call whose detail is shown.
    pub fn selected_call(&self) -> Option<i64> {
        self.selected
    }

    /// The calls as chart series per agent.
    pub fn series(&self) -> &CallSeries {
        &self.series
    }

    pub fn apply(&mut self, calls: &[CallRecord]) {
        // Showing the newest call, the pane moves on to the newest as calls arrive; one
        // the user picked among older calls stays.
        let on_newest = self.selected.is_some() && self.selected == self.calls.first().map(|c| c.id);
        self.calls = calls.to_vec();
        self.series = CallSeries::from_calls(calls);
        self.loading = false;
        self.loaded = true;
        if on_newest || self.selected.is_none_or(|id| !self.calls.iter().any(|c| c.id == id)) {
            self.selected = self.calls.first().map(|c| c.id);
        }
    }

    /// A call ended somewhere in the engine: refresh when the panel is next shown.
    pub fn mark_stale(&mut self) {
        self.stale = true;
    }

    fn refresh(&mut self, outbox: &mut Vec<Command>) {
        self.loading = true;
        self.stale = false;
        outbox.push(Command::Llm(LlmCommand::Calls { limit: LIMIT }));
    }

    pub fn show(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        if !self.loading && (self.stale || !self.loaded) {
            self.refresh(outbox);
        }
        ui.heading("Prompt");
        ui.horizontal_wrapped(|ui| {
            ui.label(format!("The newest {} LLM calls, every message exactly as sent.", self.calls.len()));
            if ui.button("Refresh").clicked() {
                self.refresh(outbox);
            }
            let label = ui.label("Filter");
            ui.add(egui::TextEdit::singleline(&mut self.filter).hint_text("text in the prompt or reply").desired_width(220.0))
                .labelled_by(label.id);
        });
        self.charts(ui);
        ui.separator();
        let needle = self.filter.trim().to_lowercase();
        let shown: Vec<&CallRecord> = self
            .calls
            .iter()
            .filter(|c| {
                needle.is_empty()
                    || c.request.messages.iter().any(|m| m.content.to_lowercase().contains(&needle))
                    || c.reply.as_deref().is_some_and(|r| r.to_lowercase().contains(&needle))
            })
            .collect();
        let mut pick = None;
        let selected = self.selected.and_then(|id| self.calls.iter().find(|c| c.id == id));
        // Beside each other when the tile is wide; in a narrow tile (a column of the
        // *Play a scene* layout) the list sits above the call it opens.
        if ui.available_width() >= 720.0 {
            ui.horizontal_top(|ui| {
                ui.vertical(|ui| {
                    ui.set_width(360.0);
                    pick = call_list(ui, &shown, self.selected, f32::INFINITY);
                });
                ui.separator();
                ui.vertical(|ui| call_detail(ui, selected));
            });
        } else {
            let height = (ui.available_height() * 0.4).max(120.0);
            pick = call_list(ui, &shown, self.selected, height);
            ui.separator();
            call_detail(ui, selected);
        }
        if pick.is_some() {
            self.selected = pick;
        }
    }
}

/// The calls, newest first, one selectable entry each; returns the one clicked.
fn call_list(ui: &mut egui::Ui, shown: &[&CallRecord], selected: Option<i64>, max_height: f32) -> Option<i64> {
    let mut pick = None;
    egui::ScrollArea::vertical().id_salt("prompt_calls").max_height(max_height).show(ui, |ui| {
        for call in shown {
            let text = format!(
                "{}  {} · {} · {}+{} tok · {} ms{}\n{}",
                call.at.get(11..19).unwrap_or(&call.at),
                call.profile,
                call.model,
                call.prompt_tokens,
                call.completion_tokens,
                call.elapsed_ms,
                if call.from_cache { " · cached" } else if call.error.is_some() { " · failed" } else { "" },
                first_line(call)
            );
            if ui.selectable_label(selected == Some(call.id), text).clicked() {
                pick = Some(call.id);
            }
        }
    });
    pick
}

fn call_detail(ui: &mut egui::Ui, call: Option<&CallRecord>) {
    let Some(call) = call else {
        ui.weak("Pick a call to read its prompt.");
        return;
    };
    egui::ScrollArea::vertical().id_salt("prompt_detail").show(ui, |ui| show_call(ui, call));
}

impl PromptPanel {
    /// Latency and tokens of every call shown, a series per agent, side by side.
    fn charts(&self, ui: &mut egui::Ui) {
        egui::CollapsingHeader::new("Calls over time").id_salt("prompt_charts").default_open(true).show(ui, |ui| {
            if self.series.agents.is_empty() {
                ui.weak("No call logged yet.");
                return;
            }
            ui.columns(2, |columns| {
                fn latency(a: &AgentSeries) -> &[[f64; 2]] {
                    &a.latency_ms
                }
                fn tokens(a: &AgentSeries) -> &[[f64; 2]] {
                    &a.tokens
                }
                let charts: [(&str, &str, fn(&AgentSeries) -> &[[f64; 2]]); 2] =
                    [("Latency per call", "ms", latency), ("Tokens per call", "tokens", tokens)];
                for (ui, (title, unit, values)) in columns.iter_mut().zip(charts) {
                    ui.strong(title);
                    let series = &self.series;
                    let response = egui_plot::Plot::new(("prompt_chart", title))
                        .height(190.0)
                        .y_axis_label(unit)
                        .include_y(0.0)
                        .allow_scroll(false)
                        .x_axis_formatter(move |mark, _| series.clock(mark.value))
                        .label_formatter(move |hover| match hover {
                            egui_plot::HoverPosition::NearDataPoint { plot_name, position, .. } => {
                                Some(format!("{plot_name}\n{} · {:.0} {unit}", series.clock(position.x), position.y))
                            }
                            egui_plot::HoverPosition::Elsewhere { .. } => None,
                        })
                        .show(ui, |plot| {
                            // One colour per agent, the same in both charts; a point per call
                            // (lines joined calls across idle hours and smeared into bands).
                            for (i, agent) in series.agents.iter().enumerate() {
                                let colour = PALETTE[i % PALETTE.len()];
                                plot.points(egui_plot::Points::new(agent.agent.clone(), values(agent).to_vec()).radius(3.0).color(colour));
                            }
                        })
                        .response;
                    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Figure, true, format!("{title} chart")));
                }
            });
            // One key for both charts, below them: a dozen agents in a legend inside the
            // plot covered a third of it.
            ui.horizontal_wrapped(|ui| {
                for (i, agent) in self.series.agents.iter().enumerate() {
                    ui.colored_label(PALETTE[i % PALETTE.len()], "●");
                    ui.small(&agent.agent);
                }
            });
        });
    }
}

/// What identifies a call in the list: the start of its system prompt (the agent's
/// role is stated there), else of its first message.
fn first_line(call: &CallRecord) -> String {
    let text = call.request.messages.first().map(|m| m.content.as_str()).unwrap_or_default();
    let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('<')).unwrap_or_default();
    let mut out: String = line.chars().take(70).collect();
    if line.chars().count() > 70 {
        out.push('…');
    }
    out
}

/// The response format asked for, as a person reads it: the schema by its name (the
/// schema itself is shown pretty-printed below the line).
pub fn format_words(format: &ResponseFormat) -> String {
    match format {
        ResponseFormat::Text => "text".into(),
        ResponseFormat::Json => "JSON object".into(),
        ResponseFormat::JsonSchema { name, .. } => format!("JSON schema \"{name}\""),
        ResponseFormat::JsonObjectSchema { .. } => "JSON object, schema alongside".into(),
    }
}

fn format_schema(format: &ResponseFormat) -> Option<&serde_json::Value> {
    match format {
        ResponseFormat::JsonSchema { schema, .. } | ResponseFormat::JsonObjectSchema { schema } => Some(schema),
        ResponseFormat::Text | ResponseFormat::Json => None,
    }
}

fn show_call(ui: &mut egui::Ui, call: &CallRecord) {
    // The provider as the client keys it is `kind|description`: the description says it.
    let provider = call.provider.split_once('|').map_or(call.provider.as_str(), |(_, d)| d);
    ui.strong(format!("{} · profile {} · {provider}", call.model, call.profile));
    let sampler = serde_json::to_string(&call.request.sampler).unwrap_or_default();
    ui.weak(format!("sampler {sampler} · format {} · stream {}", format_words(&call.request.response_format), call.request.stream));
    if let Some(schema) = format_schema(&call.request.response_format) {
        egui::CollapsingHeader::new("Response schema").id_salt(("prompt_schema", call.id)).default_open(false).show(ui, |ui| {
            ui.label(RichText::new(serde_json::to_string_pretty(schema).unwrap_or_default()).monospace());
        });
    }
    for (i, message) in call.request.messages.iter().enumerate() {
        egui::CollapsingHeader::new(format!("{:?} message ({} chars)", message.role, message.content.chars().count()))
            .id_salt(("prompt_message", call.id, i))
            .default_open(true)
            .show(ui, |ui| {
                ui.label(RichText::new(&message.content).monospace());
            });
    }
    ui.separator();
    match (&call.reply, &call.error) {
        (Some(reply), _) => {
            ui.strong(format!("Reply ({})", call.finish_reason.as_deref().unwrap_or("?")));
            ui.label(RichText::new(reply).monospace());
        }
        (None, Some(error)) => {
            ui.colored_label(ui.visuals().error_fg_color, error);
        }
        (None, None) => {}
    }
}

impl super::Panel for PromptPanel {
    fn kinds(&self) -> &'static [super::PanelKind] {
        &[super::PanelKind::Prompt]
    }

    fn apply(&mut self, event: &crate::engine::Event, _outbox: &mut Vec<crate::engine::Command>) {
        if let crate::engine::Event::Llm(crate::engine::LlmEvent::Calls { calls }) = event {
            PromptPanel::apply(self, calls);
        }
    }

    fn show(&mut self, kind: super::PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<crate::engine::Command>) {
        let _ = kind;
        PromptPanel::show(self, ui, outbox);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_format_is_named_in_words_with_its_schema_apart() {
        let schema = serde_json::json!({"type": "object", "properties": {"narrative": {"type": "string"}}});
        let format = ResponseFormat::JsonSchema { name: "AgentOutput_PersonalityOutput".into(), schema: schema.clone() };
        assert_eq!(format_words(&format), "JSON schema \"AgentOutput_PersonalityOutput\"");
        assert_eq!(format_schema(&format), Some(&schema));
        assert_eq!(format_words(&ResponseFormat::Text), "text");
        assert_eq!(format_schema(&ResponseFormat::Json), None);
    }
}
