//! Structured output: ask a model for JSON of a Rust type, and get that type or a
//! clear account of why not.
//!
//! The JSON Schema is generated from the type with `schemars`, so schema and type
//! cannot drift. Bounds go on the fields as schemars 1 spells them, for example
//! `#[schemars(length(min = 4, max = 6))]` on a `Vec` (becomes `minItems`/`maxItems`;
//! on a `String`, `minLength`/`maxLength`), `#[schemars(range(min = 1, max = 10))]` on
//! a number, `#[schemars(regex(pattern = r"^\w+$"))]` on a string. The same keys are
//! also read from `#[validate(...)]` and `#[garde(...)]` attributes.
//!
//! Each attempt is call → [`repair`](crate::llm::repair) → validate (every error, with its
//! instance path) → deserialize. A failed attempt is answered with a re-ask that quotes
//! the reply and lists the exact errors, up to [`StructuredOptions::max_attempts`].
//! Every attempt is kept, successful or not, so the UI can show what the model said and
//! what was wrong with it. A reply cut off by the token limit is accepted when its
//! repaired form validates (asking again would hit the same limit); its attempt keeps
//! the `finish_reason` and the truncation repairs, so the cut stays visible.

#[cfg(test)]
mod tests;


pub mod content;
pub mod repair;

pub use content::{ContentCheck, ContentRules};

use crate::llm::repair::{Expect, Repair, RepairOptions, repair_json_with};
use crate::llm::{CallContext, ChatMessage, ChatRequest, LlmClient, LlmError, ResponseFormat, Role, Usage};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt;
use std::marker::PhantomData;
use std::time::Instant;

/// One violation of a schema, located by the JSON Pointer of the offending value
/// (`""` is the whole document, `/core_traits/2` the third trait).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaError {
    pub path: String,
    pub message: String,
    /// Where in the schema the failed rule lives, e.g. `/properties/fears/minItems`.
    pub schema_path: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "at the top level: {}", self.message)
        } else {
            write!(f, "at {}: {}", self.path, self.message)
        }
    }
}

/// Validator messages quote the offending value; a whole object quoted back is noise.
const MAX_MESSAGE_CHARS: usize = 300;

/// A JSON Schema compiled once (draft 2020-12) and reusable for any number of values.
pub struct CompiledSchema {
    schema: Value,
    validator: jsonschema::Validator,
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSchema").field("schema", &self.schema).finish_non_exhaustive()
    }
}

impl CompiledSchema {
    pub fn new(schema: Value) -> Result<Self, String> {
        let validator = jsonschema::draft202012::new(&schema).map_err(|e| e.to_string())?;
        Ok(Self { schema, validator })
    }

    pub fn schema(&self) -> &Value {
        &self.schema
    }

    pub fn is_valid(&self, instance: &Value) -> bool {
        self.validator.is_valid(instance)
    }

    /// Every violation, sorted by instance path so the list reads top to bottom.
    pub fn validate(&self, instance: &Value) -> Vec<SchemaError> {
        let mut errors: Vec<SchemaError> = self
            .validator
            .iter_errors(instance)
            .map(|error| SchemaError {
                path: error.instance_path().as_str().to_string(),
                message: clip(&error.to_string(), MAX_MESSAGE_CHARS),
                schema_path: error.schema_path().as_str().to_string(),
            })
            .collect();
        errors.sort_by(|a, b| a.path.cmp(&b.path));
        errors.dedup();
        errors
    }
}

/// Validates `instance` against `schema` (draft 2020-12) and returns every violation.
/// A schema that does not compile is reported as one error at the top level, so
/// callers holding schemas from storage never mistake a broken schema for success.
pub fn validate(schema: &Value, instance: &Value) -> Vec<SchemaError> {
    match CompiledSchema::new(schema.clone()) {
        Ok(compiled) => compiled.validate(instance),
        Err(message) => vec![SchemaError {
            path: String::new(),
            message: format!("the schema itself is invalid: {message}"),
            schema_path: String::new(),
        }],
    }
}

/// The draft 2020-12 JSON Schema of `T`.
pub fn schema_for<T: JsonSchema>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<T>().to_value()
}

/// A name for `T`'s schema that every provider accepts (`response_format` names must
/// match `^[a-zA-Z0-9_-]{1,64}$` for OpenAI).
pub fn schema_name<T: JsonSchema>() -> String {
    let name: String = T::schema_name()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    if name.is_empty() { "output".into() } else { name }
}

/// The schema of `T`, compiled once. Build it once per type and reuse it for every
/// call when the same type is requested often.
pub struct OutputSchema<T> {
    name: String,
    compiled: CompiledSchema,
    _type: PhantomData<fn() -> T>,
}

impl<T: JsonSchema> OutputSchema<T> {
    pub fn new() -> Result<Self, StructuredError> {
        let name = schema_name::<T>();
        let compiled = CompiledSchema::new(schema_for::<T>())
            .map_err(|message| StructuredError::Schema { name: name.clone(), message })?;
        Ok(Self { name, compiled, _type: PhantomData })
    }
}

impl<T> OutputSchema<T> {
    /// A schema of the caller's own for `T` (tighter than `T`'s, say: a `const` name),
    /// named `name` for the request.
    pub fn with_schema(name: &str, schema: Value) -> Result<Self, StructuredError> {
        let compiled = CompiledSchema::new(schema).map_err(|message| StructuredError::Schema { name: name.to_string(), message })?;
        Ok(Self { name: name.to_string(), compiled, _type: PhantomData })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn schema(&self) -> &Value {
        self.compiled.schema()
    }

    pub fn validate(&self, instance: &Value) -> Vec<SchemaError> {
        self.compiled.validate(instance)
    }
}

#[derive(Debug, Clone)]
pub struct StructuredOptions {
    /// Calls in total, the first included. At least 1.
    pub max_attempts: u32,
    /// Also state the schema in the system prompt, for servers that ignore
    /// `response_format` (most local servers and all chat templates see only text).
    pub schema_in_prompt: bool,
    /// A failed reply is quoted back in the re-ask up to this many characters (fewer
    /// when the context leaves less room beside the reply's cap).
    pub max_echo_chars: usize,
    /// What a valid reply must also say to be accepted (see [`content`]).
    pub content: ContentRules,
    /// Answer a failed attempt with a re-ask that quotes it and lists its errors. Off:
    /// send the same request again for a fresh draw (a base model continuing a document
    /// has no conversation to be corrected in).
    pub reask: bool,
}

impl Default for StructuredOptions {
    fn default() -> Self {
        Self { max_attempts: 3, schema_in_prompt: true, max_echo_chars: 4_000, content: ContentRules::default(), reask: true }
    }
}

/// Why one attempt was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AttemptFailure {
    /// Even after repair the reply could not be read as JSON.
    Unparseable { message: String },
    /// JSON, but it breaks the schema; the details are in [`StructuredAttempt::errors`].
    Invalid,
    /// Valid against the schema, yet the Rust type refused it (a rule the schema
    /// cannot express).
    TypeRejected { message: String },
    /// Valid and typed, but it says nothing a reader could use: field names or
    /// placeholders as values, repeated items, a narrative too short or that never
    /// names its subject. The details are in [`StructuredAttempt::errors`].
    Content,
}

impl fmt::Display for AttemptFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptFailure::Unparseable { message } => write!(f, "not JSON: {message}"),
            AttemptFailure::Invalid => f.write_str("does not match the schema"),
            AttemptFailure::TypeRejected { message } => write!(f, "rejected by the type: {message}"),
            AttemptFailure::Content => f.write_str("has the right shape but not content"),
        }
    }
}

/// Everything about one call, kept whether it succeeded or not.
/// Serialisable so checkpoints can keep the attempts that produced them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructuredAttempt {
    /// 1-based.
    pub number: u32,
    /// The reply exactly as the model sent it.
    pub raw: String,
    pub repairs: Vec<Repair>,
    /// Schema violations of the repaired reply.
    pub errors: Vec<SchemaError>,
    /// `None` when this attempt was accepted.
    pub failure: Option<AttemptFailure>,
    pub usage: Usage,
    pub elapsed_ms: u64,
    pub finish_reason: Option<String>,
    pub from_cache: bool,
}

impl StructuredAttempt {
    /// One line for logs and error messages.
    pub fn summary(&self) -> String {
        match &self.failure {
            None => format!("attempt {}: accepted", self.number),
            Some(AttemptFailure::Invalid | AttemptFailure::Content) => {
                let first = self.errors.first().map(ToString::to_string).unwrap_or_default();
                let more = self.errors.len().saturating_sub(1);
                let more = if more > 0 { format!(" (and {more} more)") } else { String::new() };
                format!("attempt {}: {first}{more}", self.number)
            }
            Some(failure) => format!("attempt {}: {failure}", self.number),
        }
    }
}

/// A value of `T` read from the model, with the attempts it took.
#[derive(Debug, Clone)]
pub struct StructuredOutput<T> {
    pub value: T,
    /// The accepted JSON after repair, exactly as validated.
    pub json: Value,
    pub attempts: Vec<StructuredAttempt>,
    /// Summed over every attempt, failed ones included: they were paid for.
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StructuredError {
    #[error("cannot build the JSON Schema for {name}: {message}")]
    Schema { name: String, message: String },
    #[error("{source} (during structured attempt {})", attempts.len() + 1)]
    Llm {
        #[source]
        source: LlmError,
        /// The attempts that completed before the call failed.
        attempts: Vec<StructuredAttempt>,
    },
    #[error("no valid {name} after {} attempt(s); last {}", attempts.len(), last_summary(attempts))]
    Exhausted { name: String, attempts: Vec<StructuredAttempt> },
}

fn last_summary(attempts: &[StructuredAttempt]) -> String {
    attempts.last().map(StructuredAttempt::summary).unwrap_or_default()
}

impl StructuredError {
    pub fn attempts(&self) -> &[StructuredAttempt] {
        match self {
            StructuredError::Schema { .. } => &[],
            StructuredError::Llm { attempts, .. } | StructuredError::Exhausted { attempts, .. } => attempts,
        }
    }

    /// Tokens spent before the failure.
    pub fn usage(&self) -> Usage {
        total_usage(self.attempts())
    }
}

impl From<StructuredError> for LlmError {
    fn from(error: StructuredError) -> Self {
        match error {
            StructuredError::Llm { source, .. } => source,
            StructuredError::Schema { .. } => LlmError::Config(error.to_string()),
            StructuredError::Exhausted { ref attempts, .. } => LlmError::Structured {
                attempts: u32::try_from(attempts.len()).unwrap_or(u32::MAX),
                last_error: last_summary(attempts),
            },
        }
    }
}

/// Sums usage; the total counts as reported only if every part was.
pub fn total_usage(attempts: &[StructuredAttempt]) -> Usage {
    attempts.iter().fold(Usage { prompt_tokens: 0, completion_tokens: 0, reported: true }, |sum, a| Usage {
        prompt_tokens: sum.prompt_tokens.saturating_add(a.usage.prompt_tokens),
        completion_tokens: sum.completion_tokens.saturating_add(a.usage.completion_tokens),
        reported: sum.reported && a.usage.reported,
    })
}

/// Asks `client` for a `T`; see the module documentation for the loop.
pub fn complete_structured<T: DeserializeOwned + JsonSchema>(
    client: &LlmClient,
    request: ChatRequest,
    options: &StructuredOptions,
    ctx: CallContext<'_>,
) -> Result<StructuredOutput<T>, StructuredError> {
    let schema = OutputSchema::<T>::new()?;
    complete_with_schema(client, &schema, request, options, ctx)
}

/// [`complete_structured`] with a schema compiled beforehand.
pub fn complete_with_schema<T: DeserializeOwned>(
    client: &LlmClient,
    schema: &OutputSchema<T>,
    request: ChatRequest,
    options: &StructuredOptions,
    ctx: CallContext<'_>,
) -> Result<StructuredOutput<T>, StructuredError> {
    let mut request = prepare_request(request, schema.name(), schema.schema(), options);
    let asked = request.messages.len();
    let mut attempts: Vec<StructuredAttempt> = Vec::new();
    let max_attempts = options.max_attempts.max(1);
    for number in 1..=max_attempts {
        if ctx.cancel.is_cancelled() {
            return Err(StructuredError::Llm { source: LlmError::Cancelled, attempts });
        }
        if number > 1 && !options.reask {
            // A fresh draw, not the same one again (nor the same cached reply): the
            // next seed after the configured one, or a random one.
            let configured = request.sampler.seed.or(client.profile().sampler.seed);
            request.sampler.seed = Some(match configured {
                Some(seed) => seed.wrapping_add(u64::from(number - 1)),
                None => fastrand::u64(..),
            });
        }
        let started = Instant::now();
        let completion = match client.complete(&request, ctx) {
            Ok(completion) => completion,
            Err(source) => return Err(StructuredError::Llm { source, attempts }),
        };
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let reading = read_reply::<T>(&schema.compiled, &options.content, &completion.text);
        attempts.push(StructuredAttempt {
            number,
            raw: completion.text,
            repairs: reading.repairs,
            errors: reading.errors,
            failure: reading.failure,
            usage: completion.usage,
            elapsed_ms,
            finish_reason: completion.finish_reason,
            from_cache: completion.from_cache,
        });
        if let (Some(value), Some(json)) = (reading.value, reading.json) {
            let usage = total_usage(&attempts);
            return Ok(StructuredOutput { value, json, attempts, usage });
        }
        if number < max_attempts && options.reask {
            if let Some(last) = attempts.last() {
                // Only the latest failed reply is quoted, and only as much of it as leaves
                // the reply its planned cap: re-asks that piled up every failed reply in
                // full squeezed the cap down to nothing (788 → 293 → 64 tokens).
                request.messages.truncate(asked);
                let reask = reask_message(last);
                let chars = echo_chars(client.profile(), &request, &reask, options.max_echo_chars);
                request.messages.push(ChatMessage::assistant(echo(&last.raw, chars)));
                request.messages.push(ChatMessage::user(reask));
            }
        }
    }
    Err(StructuredError::Exhausted { name: schema.name().to_string(), attempts })
}

/// Attaches the schema to the request: as `response_format` for servers that enforce
/// it, and as text in the system prompt for those that do not.
fn prepare_request(mut request: ChatRequest, name: &str, schema: &Value, options: &StructuredOptions) -> ChatRequest {
    request.response_format = ResponseFormat::JsonSchema { name: name.to_string(), schema: schema.clone() };
    if let Some(instruction) = schema_instruction(schema, options) {
        match request.messages.first_mut() {
            Some(first) if first.role == Role::System => {
                first.content = format!("{}\n\n{instruction}", first.content.trim_end());
            }
            _ => request.messages.insert(0, ChatMessage::system(instruction)),
        }
    }
    request
}

/// The text a structured call adds to the system prompt (after a blank line), `None`
/// with `schema_in_prompt` off. Public so a caller that plans a prompt's budget can
/// count it: a schema of a few thousand characters is a large share of a small context.
pub fn schema_instruction(schema: &Value, options: &StructuredOptions) -> Option<String> {
    options.schema_in_prompt.then(|| {
        format!(
            "Reply with one JSON value that validates against this JSON Schema. Reply with the JSON \
             only: no explanations, no code fences.\n<json_schema>\n{schema}\n</json_schema>"
        )
    })
}

/// The failed reply as it goes back to the model. Never empty: some APIs refuse an
/// empty assistant turn.
fn echo(raw: &str, max_chars: usize) -> String {
    if raw.trim().is_empty() {
        return "(empty reply)".into();
    }
    match raw.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}\n[... reply cut here, {} characters in all]", &raw[..cut], raw.chars().count()),
        None => raw.to_string(),
    }
}

/// The least of a failed reply a re-ask quotes, however tight the context: its start
/// says what went wrong often enough.
const MIN_ECHO_CHARS: usize = 240;

/// How much of a failed reply a re-ask of `request` may quote: what the context leaves
/// once the request, the re-ask's own words and the reply's planned cap are counted, at
/// about three characters a token (JSON is dense), within `MIN_ECHO_CHARS..=max_chars`.
fn echo_chars(profile: &crate::llm::ProviderProfile, request: &ChatRequest, reask: &str, max_chars: usize) -> usize {
    if profile.max_context_tokens == 0 {
        return max_chars;
    }
    // The cap the client will send (see `LlmClient::complete`).
    let cap = request
        .sampler
        .max_tokens
        .or(profile.sampler.max_tokens)
        .unwrap_or_else(|| crate::llm::client::default_reply_cap(&request.response_format));
    let used = crate::llm::tokens::estimate_messages(&request.messages)
        .saturating_add(crate::llm::tokens::estimate(reask))
        .saturating_add(16);
    let room = profile.max_context_tokens.saturating_sub(cap.saturating_add(used)) as usize;
    room.saturating_mul(3).clamp(MIN_ECHO_CHARS.min(max_chars), max_chars)
}

/// How many schema errors a re-ask lists; more only lengthen the prompt.
const MAX_REASK_ERRORS: usize = 25;

fn reask_message(attempt: &StructuredAttempt) -> String {
    let mut message = String::from("Your previous reply could not be used");
    match &attempt.failure {
        Some(AttemptFailure::Unparseable { message: why }) => {
            message.push_str(&format!(": it is not valid JSON ({why})."));
        }
        Some(AttemptFailure::Invalid) | None => {
            message.push_str(". It does not match the JSON Schema:");
            for error in attempt.errors.iter().take(MAX_REASK_ERRORS) {
                message.push_str(&format!("\n- {error}"));
            }
            if attempt.errors.len() > MAX_REASK_ERRORS {
                message.push_str(&format!("\n- ... and {} more", attempt.errors.len() - MAX_REASK_ERRORS));
            }
        }
        Some(AttemptFailure::TypeRejected { message: why }) => {
            message.push_str(&format!(": {why}."));
        }
        Some(AttemptFailure::Content) => {
            message.push_str(
                ". It has the right shape, but these values are not content (field names, placeholders, \
                 repeats or too little):",
            );
            for error in attempt.errors.iter().take(MAX_REASK_ERRORS) {
                message.push_str(&format!("\n- {error}"));
            }
            message.push_str("\nWrite real words about the subject itself in every field.");
        }
    }
    message.push_str(
        "\nReply again with the complete, corrected JSON only: no explanations, no code fences.",
    );
    message
}

struct Reading<T> {
    value: Option<T>,
    json: Option<Value>,
    repairs: Vec<Repair>,
    errors: Vec<SchemaError>,
    failure: Option<AttemptFailure>,
}

/// Repair, validate, deserialize: the whole judgement of one reply.
fn read_reply<T: DeserializeOwned>(schema: &CompiledSchema, rules: &ContentRules, raw: &str) -> Reading<T> {
    let accept = |value: &Value| schema.is_valid(value);
    let options = RepairOptions { expect: Expect::from_schema(schema.schema()), accept: Some(&accept) };
    let repaired = match repair_json_with(raw, &options) {
        Ok(repaired) => repaired,
        Err(error) => {
            return Reading {
                value: None,
                json: None,
                repairs: Vec::new(),
                errors: Vec::new(),
                failure: Some(AttemptFailure::Unparseable { message: error.to_string() }),
            };
        }
    };
    let errors = schema.validate(&repaired.value);
    if !errors.is_empty() {
        return Reading { value: None, json: None, repairs: repaired.repairs, errors, failure: Some(AttemptFailure::Invalid) };
    }
    match T::deserialize(&repaired.value) {
        Ok(value) => {
            let problems = content::check(schema.schema(), &repaired.value, rules);
            if !problems.is_empty() {
                return Reading { value: None, json: None, repairs: repaired.repairs, errors: problems, failure: Some(AttemptFailure::Content) };
            }
            Reading { value: Some(value), json: Some(repaired.value), repairs: repaired.repairs, errors, failure: None }
        }
        Err(error) => Reading {
            value: None,
            json: None,
            repairs: repaired.repairs,
            errors,
            failure: Some(AttemptFailure::TypeRejected { message: error.to_string() }),
        },
    }
}

/// `text` cut to `max_chars` characters, with an ellipsis where it was cut.
pub fn clip(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}
