//! [`LlmClient`]: a provider wrapped with the policies every call needs.
//!
//! Order of a call: profile defaults fill the request → response cache (a hit returns
//! at once and costs no rate-limit slot) → rate-limit slot → provider attempt →
//! on a transient error, backoff and retry → a success is cached.
//!
//! Retries stop as soon as a streamed fragment has reached the caller's token sink:
//! the caller has shown those tokens and a second attempt would produce a different
//! text after them, so the error (usually `Truncated`, with the partial text) goes
//! back to the caller, who can start over cleanly. Attempts that failed before any
//! token was delivered are retried as usual.


pub mod cache;
pub mod calls;
pub mod formats;
pub mod parallel;
pub mod rate_limit;
pub mod retry;

use crate::llm::anthropic::AnthropicProvider;
use cache::ResponseCache;
use crate::llm::gemini::GeminiProvider;
use crate::llm::openai::OpenAiProvider;
use crate::llm::ResponseFormat;
use rate_limit::RateLimiter;
use crate::llm::retry::{retry_delay, sleep_cancellable};
use crate::llm::scripted::ScriptedProvider;
use crate::llm::{
    CallContext, ChatRequest, Completion, LlmError, Provider, ProviderKind, ProviderProfile, SamplerSettings, Secret,
};
use crate::store::Store;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A provider plus retries, rate limiting and the response cache, built from a profile.
/// Cheap to clone; clones share the rate limiter and the cache.
#[derive(Clone)]
pub struct LlmClient {
    provider: Arc<dyn Provider>,
    profile: ProviderProfile,
    limiter: Option<Arc<RateLimiter>>,
    cache: Option<ResponseCache>,
    /// The key, kept only to scrub it from errors and replies.
    secret: Option<Secret>,
    /// Which server answers, as part of the cache key.
    endpoint: String,
    /// Where every call is logged as sent (when the client has a library).
    calls: Option<crate::llm::calls::CallLog>,
    /// How much structure the server takes (see [`formats`]), shared by the profile's clients.
    formats: formats::FormatMemory,
    /// Requests in flight at once, when the profile limits them (see [`parallel`]).
    slots: Option<Arc<parallel::Slots>>,
    /// The agent this client calls for, as the call log records it (see [`Self::for_agent`]).
    agent: String,
    /// What the calls are for, told to calls waiting behind them (see [`Self::doing`]).
    doing: Option<String>,
}

impl LlmClient {
    /// Build the client for `profile`. `store` backs the response cache when the
    /// profile enables it. The API key is read from the environment now; a remote API
    /// without one is refused here rather than on the first call.
    pub fn from_profile(profile: &ProviderProfile, store: Option<&Store>) -> Result<Self, LlmError> {
        let secret = resolve_key(profile)?;
        let timeouts = profile.timeouts;
        let base_url = || {
            profile
                .base_url()
                .map(str::to_string)
                .ok_or_else(|| LlmError::Config(format!("profile {:?} has no base URL", profile.name)))
        };
        let provider: Arc<dyn Provider> = match profile.kind {
            ProviderKind::Openai => {
                Arc::new(OpenAiProvider::new(&base_url()?, timeouts, secret.clone(), profile.supports_json_schema))
            }
            ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(&base_url()?, timeouts, required(&secret, profile)?)),
            ProviderKind::Gemini => Arc::new(GeminiProvider::new(
                &base_url()?,
                timeouts,
                required(&secret, profile)?,
                profile.supports_json_schema,
            )),
            ProviderKind::Scripted => {
                let path = profile.path.as_ref().ok_or_else(|| {
                    LlmError::Config(format!("profile {:?} needs a script file (path)", profile.name))
                })?;
                Arc::new(ScriptedProvider::from_file(path, timeouts)?)
            }
            ProviderKind::Local => Arc::new(crate::llm::local::LocalProvider::from_profile(profile)?),
        };
        // Clients built from one profile share its limiter: the limit is the profile's,
        // not a single client's.
        let limiter_key = format!("{}|{}", profile.name, provider.describe());
        let limiter = profile.requests_per_minute.and_then(|rpm| rate_limit::shared(&limiter_key, rpm));
        let mut client = Self::assemble(provider, profile.clone(), limiter);
        client.secret = secret;
        Ok(match store {
            Some(store) => client.with_store(store.clone()),
            None => client,
        })
    }

    /// Wrap any provider (a fake in tests, an embedded model) with the profile's
    /// retry and rate-limit policies. Add [`Self::with_store`] for the cache.
    pub fn with_provider(provider: Arc<dyn Provider>, profile: ProviderProfile) -> Self {
        let limiter = profile.requests_per_minute.and_then(RateLimiter::per_minute).map(Arc::new);
        Self::assemble(provider, profile, limiter)
    }

    fn assemble(provider: Arc<dyn Provider>, profile: ProviderProfile, limiter: Option<Arc<RateLimiter>>) -> Self {
        let endpoint = format!("{}|{}", profile.kind.label(), provider.describe());
        let start = if profile.supports_json_schema { formats::FormatLevel::Schema } else { formats::FormatLevel::ObjectWithSchema };
        let formats = formats::FormatMemory::shared(&profile.name, &endpoint, start);
        let slots = parallel_limit(&profile).map(|limit| parallel::shared(&format!("{}|{endpoint}", profile.name), limit));
        Self { provider, profile, limiter, cache: None, secret: None, endpoint, calls: None, formats, slots, agent: String::new(), doing: None }
    }

    /// Use `store` for the response cache (only if the profile enables caching).
    pub fn with_store(mut self, store: Store) -> Self {
        self.cache = self.profile.cache.then(|| ResponseCache::new(store.clone()));
        self.formats = self.formats.clone().with_store(&store);
        self.calls = Some(crate::llm::calls::CallLog::new(store));
        self
    }

    /// Name the agent whose calls this client makes (`director`, `companion`, …): the
    /// call log keeps it, so latency and tokens can be told apart per agent.
    pub fn for_agent(mut self, agent: &str) -> Self {
        self.agent = agent.to_string();
        self
    }

    /// Say what this client's calls are for ("Tomas Reed, checkpoint 1"): a call waiting
    /// for the embedded model while one of these holds it is told so (see
    /// [`CallContext::on_wait`]). Without it, the agent's name is said.
    pub fn doing(mut self, what: impl Into<String>) -> Self {
        self.doing = Some(what.into());
        self
    }

    pub fn profile(&self) -> &ProviderProfile {
        &self.profile
    }

    pub fn describe(&self) -> String {
        self.provider.describe()
    }

    /// The response cache, when this client uses one.
    pub fn cache(&self) -> Option<&ResponseCache> {
        self.cache.as_ref()
    }

    /// One logical call: the profile's model and sampler fill what the request leaves
    /// empty, then cache, rate limit and retries apply as described above.
    pub fn complete(&self, request: &ChatRequest, ctx: CallContext<'_>) -> Result<Completion, LlmError> {
        self.complete_checked(request, ctx, &|_| true)
    }

    /// [`Self::complete`] for callers that judge the reply themselves (an empty or
    /// impersonating chat reply): a reply enters the response cache only if `accept`
    /// says so, so a rejected draw is never served again from the cache.
    pub fn complete_checked(
        &self,
        request: &ChatRequest,
        ctx: CallContext<'_>,
        accept: &dyn Fn(&Completion) -> bool,
    ) -> Result<Completion, LlmError> {
        let started = Instant::now();
        let request = self.prepare(request);
        let result = self
            .complete_prepared(&request, ctx, accept)
            .map(|mut completion| {
                completion.elapsed_ms = started.elapsed().as_millis() as u64;
                completion
            })
            .map_err(|e| e.scrub(self.secret.as_ref()));
        if let Some(log) = &self.calls {
            // Logged with the format it was last sent in, after any fallback.
            let sent = formats::at_level(&request, self.formats.level());
            let call = crate::llm::calls::Call { profile: &self.profile.name, provider: &self.endpoint, agent: &self.agent };
            log.record(call, &sent, &result, started.elapsed().as_millis() as u64);
        }
        result
    }

    fn prepare(&self, request: &ChatRequest) -> ChatRequest {
        let mut request = request.clone();
        if request.model.is_empty() {
            request.model = self.profile.model.clone();
        }
        request.sampler = merge_sampler(&request.sampler, &self.profile.sampler);
        // Every call has a reply cap: a server without one (a base model with no chat
        // template) can write to the end of its context before anything is judged. The
        // cap never reaches past the context the profile declares: a server that checks
        // prompt plus `max_tokens` against its context (vLLM, llama.cpp's server) refuses
        // the whole request otherwise. Callers that plan a budget ask for a cap that fits;
        // this catches the rest (a re-ask that grew the prompt, a caller with no budget).
        // The embedded model sizes its own from the grammar it decodes under.
        if self.profile.kind != ProviderKind::Local {
            let cap = request.sampler.max_tokens.unwrap_or_else(|| default_reply_cap(&request.response_format));
            request.sampler.max_tokens = Some(fit_reply_cap(cap, &request.messages, self.profile.max_context_tokens));
        }
        request
    }

    fn complete_prepared(
        &self,
        request: &ChatRequest,
        ctx: CallContext<'_>,
        accept: &dyn Fn(&Completion) -> bool,
    ) -> Result<Completion, LlmError> {
        if ctx.cancel.is_cancelled() {
            return Err(LlmError::Cancelled);
        }
        let cache_key = self.cache.as_ref().map(|_| ResponseCache::key(&self.endpoint, request));
        if let (Some(cache), Some(key)) = (&self.cache, &cache_key) {
            match cache.get(key) {
                Ok(Some(hit)) => {
                    if request.stream {
                        ctx.emit(&hit.text);
                    }
                    return Ok(hit);
                }
                Ok(None) => {}
                // A broken cache must not break calls: ask the provider instead.
                Err(e) => tracing::warn!(error = %e, "response cache lookup failed"),
            }
        }

        let delivered = AtomicBool::new(false);
        // Fragments are scrubbed of the key before anyone sees them, even one split in two.
        let scrubber = std::sync::Mutex::new(crate::llm::secret::StreamScrubber::new(self.secret.clone()));
        let relay = |fragment: &str| {
            delivered.store(true, Ordering::Relaxed);
            let shown = scrubber.lock().unwrap_or_else(|p| p.into_inner()).push(fragment);
            if !shown.is_empty() {
                ctx.emit(&shown);
            }
        };
        let flush = || {
            let rest = scrubber.lock().unwrap_or_else(|p| p.into_inner()).finish();
            if !rest.is_empty() {
                ctx.emit(&rest);
            }
        };
        let label = ctx.label.or(self.doing.as_deref()).unwrap_or(&self.agent);
        let attempt_ctx = CallContext {
            cancel: ctx.cancel,
            on_token: ctx.on_token.map(|_| &relay as &(dyn Fn(&str) + Send + Sync)),
            on_wait: ctx.on_wait,
            label: Some(label).filter(|l| !l.is_empty()),
        };

        let policy = self.profile.retry;
        let mut retry = 0u32;
        loop {
            if let Some(limiter) = &self.limiter {
                limiter.acquire(ctx.cancel)?;
            }
            let sent = formats::at_level(request, self.formats.level());
            let slot = match &self.slots {
                Some(slots) => Some(slots.acquire(ctx.cancel)?),
                None => None,
            };
            let outcome = self.provider.complete(&sent, attempt_ctx);
            drop(slot);
            flush();
            let error = match outcome {
                Ok(mut completion) => {
                    if let Some(secret) = &self.secret {
                        completion.text = secret.scrub(&completion.text);
                    }
                    if let (Some(cache), Some(key)) = (&self.cache, &cache_key)
                        && accept(&completion)
                        && let Err(e) = cache.put(key, self.profile.kind.label(), &completion)
                    {
                        tracing::warn!(error = %e, "could not store a reply in the response cache");
                    }
                    return Ok(completion);
                }
                Err(error) => error,
            };
            if ctx.cancel.is_cancelled() {
                return Err(LlmError::Cancelled);
            }
            // The server refused the response format: the same request would only be
            // refused again, so go one rung down (remembered) and ask there at once.
            if !delivered.load(Ordering::Relaxed)
                && formats::refuses_format(&error, &sent.response_format)
                && self.formats.step_down(formats::FormatLevel::of(&sent.response_format), &error.to_string()).is_some()
            {
                continue;
            }
            // A reply that timed out may still be generating, and billed, on the server:
            // sending the request again would pay for it twice. The caller decides
            // (the structured layer's attempts, a chat redraw), each a counted attempt.
            // Connection timeouts are `Connect` errors: nothing was sent, so they retry.
            if matches!(error, LlmError::Timeout(_)) {
                return Err(error);
            }
            if !error.is_transient() || retry >= policy.max_retries || delivered.load(Ordering::Relaxed) {
                return Err(error);
            }
            let asked = match &error {
                LlmError::RateLimited { retry_after } => *retry_after,
                LlmError::Unavailable { retry_after, .. } => Some(*retry_after),
                _ => None,
            };
            // A server asking for a longer pause than the policy allows: hand the
            // error (which says how long) to the caller instead of blocking that long.
            if asked.is_some_and(|asked| asked > Duration::from_millis(policy.max_delay_ms)) {
                return Err(error);
            }
            let delay = retry_delay(&policy, retry, asked);
            tracing::warn!(
                retry = retry + 1,
                of = policy.max_retries,
                delay_ms = delay.as_millis() as u64,
                error = %error.clone().scrub(self.secret.as_ref()),
                "transient provider error, retrying"
            );
            sleep_cancellable(delay, ctx.cancel)?;
            retry += 1;
        }
    }
}

/// The request's own sampler values win; the profile's fill the gaps.
/// Prose replies (a chat turn, a character's line, a narration) get a few hundred tokens;
/// a structured reply room for its schema: about one token per four characters of the
/// schema, times four for the values, within 1,024..8,192.
pub fn default_reply_cap(format: &ResponseFormat) -> u32 {
    match format {
        ResponseFormat::Text => TEXT_REPLY_CAP,
        ResponseFormat::Json => 2048,
        ResponseFormat::JsonSchema { schema, .. } | ResponseFormat::JsonObjectSchema { schema } => {
            (schema.to_string().len() as u32).clamp(1024, 8192)
        }
    }
}

/// The reply cap a caller that plans its prompt's budget asks for and reserves: the
/// profile's `max_tokens` when it sets one (respected; the budget makes room for it),
/// else the default cap for the format held to a quarter of the context.
pub fn planned_reply_cap(profile: &ProviderProfile, format: &ResponseFormat) -> u32 {
    let max = profile.max_context_tokens;
    profile.sampler.max_tokens.unwrap_or_else(|| default_reply_cap(format).min(max / 4)).min(max)
}

/// A reply cap below which a call is not worth sending: when the prompt leaves less
/// room than this, the cap stays here and the server's own refusal says why.
pub const MIN_REPLY_CAP: u32 = 64;

/// `cap`, lowered so the prompt of `messages` (as estimated) plus the reply fit
/// `max_context_tokens`, but not below [`MIN_REPLY_CAP`] (nor raised to it).
pub fn fit_reply_cap(cap: u32, messages: &[crate::llm::ChatMessage], max_context_tokens: u32) -> u32 {
    let room = max_context_tokens.saturating_sub(crate::llm::tokens::estimate_messages(messages));
    cap.min(room.max(MIN_REPLY_CAP.min(cap)))
}

/// The reply cap of a prose call with no `max_tokens` of its own or its profile's.
pub const TEXT_REPLY_CAP: u32 = 600;

fn merge_sampler(request: &SamplerSettings, profile: &SamplerSettings) -> SamplerSettings {
    SamplerSettings {
        temperature: request.temperature.or(profile.temperature),
        top_p: request.top_p.or(profile.top_p),
        top_k: request.top_k.or(profile.top_k),
        max_tokens: request.max_tokens.or(profile.max_tokens),
        seed: request.seed.or(profile.seed),
        stop: if request.stop.is_empty() { profile.stop.clone() } else { request.stop.clone() },
        presence_penalty: request.presence_penalty.or(profile.presence_penalty),
        frequency_penalty: request.frequency_penalty.or(profile.frequency_penalty),
        avoid: if request.avoid.is_empty() { profile.avoid.clone() } else { request.avoid.clone() },
    }
}

/// The key for `profile`: its environment variable first, then the keyring's entry for
/// the profile. Remote APIs need one; an OpenAI-compatible server on this machine or
/// the local network usually does not, and gets a key only from a variable its profile
/// names (or its own keyring entry): the default `OPENAI_API_KEY` holds a key for
/// OpenAI, which has no business going to a box on the local network. A keyring entry
/// is the profile's own, so it goes wherever the profile points.
fn resolve_key(profile: &ProviderProfile) -> Result<Option<Secret>, LlmError> {
    let stored = |name: &str| crate::llm::keyring::stored_key(name);
    resolve_key_with(profile, Secret::from_env, stored)
}

/// Which key `profile` would use and where it comes from (never the key itself).
pub fn key_source(profile: &ProviderProfile) -> crate::llm::keyring::KeySource {
    key_source_with(profile, Secret::from_env, |name| crate::llm::keyring::stored_key(name))
}

fn key_source_with(
    profile: &ProviderProfile,
    lookup: impl Fn(&str) -> Option<Secret>,
    stored: impl Fn(&str) -> Option<Secret>,
) -> crate::llm::keyring::KeySource {
    use crate::llm::keyring::KeySource;
    if let Some(var) = env_var_for(profile).filter(|var| lookup(var).is_some()) {
        return KeySource::Environment { var: var.to_string() };
    }
    if matches!(profile.kind, ProviderKind::Scripted | ProviderKind::Local) || stored(&profile.name).is_none() {
        KeySource::None
    } else {
        KeySource::Keyring
    }
}

/// The environment variable `profile` takes its key from, if any may be used for it.
fn env_var_for(profile: &ProviderProfile) -> Option<&str> {
    let var = profile.key_env().filter(|v| !v.trim().is_empty());
    let named = profile.api_key_env.as_deref().filter(|v| !v.trim().is_empty());
    match profile.kind {
        ProviderKind::Scripted | ProviderKind::Local => None,
        ProviderKind::Anthropic | ProviderKind::Gemini => var,
        ProviderKind::Openai if profile.base_url().is_some_and(is_local_address) => named,
        // `OPENAI_API_KEY` is OpenAI's: another host gets a key only from a variable its
        // profile names.
        ProviderKind::Openai if named.is_none() && !profile.base_url().is_none_or(is_official_openai) => None,
        ProviderKind::Openai => var,
    }
}

fn resolve_key_with(
    profile: &ProviderProfile,
    lookup: impl Fn(&str) -> Option<Secret>,
    stored: impl Fn(&str) -> Option<Secret>,
) -> Result<Option<Secret>, LlmError> {
    if matches!(profile.kind, ProviderKind::Scripted | ProviderKind::Local) {
        return Ok(None);
    }
    let key = env_var_for(profile).and_then(&lookup).or_else(|| stored(&profile.name));
    let named = profile.api_key_env.as_deref().filter(|v| !v.trim().is_empty());
    if key.is_none() && profile.kind == ProviderKind::Openai && !profile.base_url().is_some_and(is_local_address) {
        return Err(if named.is_none() && !profile.base_url().is_none_or(is_official_openai) {
            LlmError::MissingKey {
                var: "(none named: OPENAI_API_KEY goes only to api.openai.com; set api_key_env in the profile)".into(),
            }
        } else {
            missing(profile)
        });
    }
    // A key over plain HTTP to anything but this machine can be read on the way.
    if key.is_some()
        && !profile.allow_key_over_http
        && let Some(url) = profile.base_url()
        && url.trim().to_ascii_lowercase().starts_with("http://")
        && !is_loopback_address(url)
    {
        return Err(LlmError::Config(format!(
            "profile {:?}: its key would go over plain http:// to {}; use https, or set allow_key_over_http = true",
            profile.name,
            crate::llm::http::endpoint_of(url)
        )));
    }
    Ok(key)
}

/// How many requests `profile` may have in flight (`None`: no limit).
fn parallel_limit(profile: &ProviderProfile) -> Option<u32> {
    match profile.max_parallel {
        Some(0) => None,
        Some(n) => Some(n),
        None if profile.kind == ProviderKind::Openai && profile.base_url().is_some_and(is_local_address) => Some(1),
        None => None,
    }
}

/// Whether `url` is OpenAI's own API.
fn is_official_openai(url: &str) -> bool {
    let endpoint = crate::llm::http::endpoint_of(url).to_ascii_lowercase();
    endpoint == "https://api.openai.com"
}

/// The host of `url`, lower-case, without port or IPv6 brackets.
fn host_of(url: &str) -> String {
    let endpoint = crate::llm::http::endpoint_of(url);
    let authority = endpoint.split_once("://").map_or(endpoint.as_str(), |(_, a)| a);
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        authority.rsplit_once(':').map_or(authority, |(host, _)| host)
    };
    host.to_ascii_lowercase()
}

/// Whether `url` points at this machine itself.
fn is_loopback_address(url: &str) -> bool {
    let host = host_of(url);
    host == "localhost" || host.ends_with(".localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn required(secret: &Option<Secret>, profile: &ProviderProfile) -> Result<Secret, LlmError> {
    secret.clone().ok_or_else(|| missing(profile))
}

fn missing(profile: &ProviderProfile) -> LlmError {
    let var = profile.key_env().filter(|v| !v.trim().is_empty()).unwrap_or("(none named: set api_key_env in the profile)");
    LlmError::MissingKey { var: var.to_string() }
}

/// Whether `url` points at this machine or a private network, where self-hosted
/// servers (llama.cpp, Ollama, LM Studio, vLLM) run without keys.
pub(crate) fn is_local_address(url: &str) -> bool {
    let host = host_of(url);
    if host == "localhost" || host.ends_with(".localhost") || host.ends_with(".local") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified(),
        Ok(std::net::IpAddr::V6(ip)) => ip.is_loopback() || ip.is_unique_local() || ip.is_unicast_link_local(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{CancelToken, ChatMessage, RetryPolicy, Usage};
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_call_to_a_server_carries_a_reply_cap() {
        let profile = |max_tokens| ProviderProfile {
            name: "server".into(),
            kind: ProviderKind::Openai,
            base_url: Some("http://127.0.0.1:9/v1".into()),
            model: "m".into(),
            sampler: SamplerSettings { max_tokens, ..Default::default() },
            ..Default::default()
        };
        let prose = ChatRequest::new("m", vec![ChatMessage::user("hello")]);
        let client = LlmClient::from_profile(&profile(None), None).unwrap();
        assert_eq!(client.prepare(&prose).sampler.max_tokens, Some(TEXT_REPLY_CAP));
        let mut structured = prose.clone();
        structured.response_format = ResponseFormat::JsonSchema { name: "x".into(), schema: serde_json::json!({"type": "object"}) };
        assert_eq!(client.prepare(&structured).sampler.max_tokens, Some(1024), "at least 1,024 for a structured reply");
        // The profile's own cap, and the request's, win over the default.
        let capped = LlmClient::from_profile(&profile(Some(200)), None).unwrap();
        assert_eq!(capped.prepare(&prose).sampler.max_tokens, Some(200));
        let mut asked = prose.clone();
        asked.sampler.max_tokens = Some(32);
        assert_eq!(client.prepare(&asked).sampler.max_tokens, Some(32));
    }

    /// A vLLM-style server refuses a request whose prompt plus `max_tokens` exceeds its
    /// context: the cap (the profile's, the request's or the default) is lowered to the
    /// room the prompt leaves, and never below a floor worth sending.
    #[test]
    fn the_reply_cap_never_reaches_past_the_context() {
        let profile = |max_tokens, context| ProviderProfile {
            name: "server".into(),
            kind: ProviderKind::Openai,
            base_url: Some("http://127.0.0.1:9/v1".into()),
            model: "m".into(),
            max_context_tokens: context,
            sampler: SamplerSettings { max_tokens, ..Default::default() },
            ..Default::default()
        };
        let long = "The harbour bells ring while the tide climbs the stair. ".repeat(150);
        let mut request = ChatRequest::new("m", vec![ChatMessage::system(long), ChatMessage::user("Go on.")]);
        request.response_format = ResponseFormat::JsonSchema { name: "x".into(), schema: serde_json::json!({"description": "d".repeat(3000)}) };
        let prompt = crate::llm::tokens::estimate_messages(&request.messages);
        assert!(prompt > 1000 && prompt < 3000, "{prompt}");
        for (max_tokens, context) in [(None, 4096u32), (Some(3000), 4096), (None, 8192)] {
            let sent = LlmClient::from_profile(&profile(max_tokens, context), None).unwrap().prepare(&request).sampler.max_tokens.unwrap();
            assert!(prompt + sent <= context, "{prompt} + {sent} > {context}");
            let asked = max_tokens.unwrap_or_else(|| default_reply_cap(&request.response_format));
            assert_eq!(sent, asked.min(context - prompt), "the asked cap, or all the room there is");
        }
        // A prompt that leaves no room keeps a cap worth sending (the server says why it refuses).
        let tiny = LlmClient::from_profile(&profile(Some(500), 512), None).unwrap();
        assert_eq!(tiny.prepare(&request).sampler.max_tokens, Some(MIN_REPLY_CAP));
    }

    /// Answers from a queue of outcomes, counting calls; streams replies in two halves.
    struct Fake {
        outcomes: Mutex<Vec<Result<String, LlmError>>>,
        calls: AtomicU32,
        seen: Mutex<Vec<ChatRequest>>,
        stream_before_failing: bool,
    }

    impl Fake {
        fn new(outcomes: Vec<Result<&str, LlmError>>) -> Arc<Self> {
            Arc::new(Self {
                outcomes: Mutex::new(outcomes.into_iter().rev().map(|o| o.map(str::to_string)).collect()),
                calls: AtomicU32::new(0),
                seen: Mutex::new(Vec::new()),
                stream_before_failing: false,
            })
        }
    }

    impl Provider for Fake {
        fn describe(&self) -> String {
            "fake".into()
        }
        fn complete(&self, request: &ChatRequest, ctx: CallContext<'_>) -> Result<Completion, LlmError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.seen.lock().unwrap().push(request.clone());
            let outcome = self.outcomes.lock().unwrap().pop().unwrap_or_else(|| Ok("default".into()));
            if self.stream_before_failing && outcome.is_err() {
                ctx.emit("partial ");
            }
            let text = outcome?;
            if request.stream {
                let (a, b) = text.split_at(text.len() / 2);
                ctx.emit(a);
                ctx.emit(b);
            }
            Ok(Completion {
                text,
                usage: Usage { prompt_tokens: 1, completion_tokens: 1, reported: true },
                finish_reason: Some("stop".into()),
                model: request.model.clone(),
                from_cache: false,
                elapsed_ms: 0,
            })
        }
    }

    fn profile() -> ProviderProfile {
        ProviderProfile {
            name: "test".into(),
            model: "profile-model".into(),
            retry: RetryPolicy { max_retries: 2, base_delay_ms: 5, max_delay_ms: 50 },
            ..Default::default()
        }
    }

    fn call(client: &LlmClient) -> Result<Completion, LlmError> {
        client.complete(&ChatRequest::new("", vec![ChatMessage::user("hi")]), CallContext::new(&CancelToken::new()))
    }

    fn http(status: u16) -> LlmError {
        LlmError::Http { status, message: "x".into() }
    }

    #[test]
    fn transient_errors_are_retried_until_success() {
        let fake = Fake::new(vec![Err(http(500)), Err(LlmError::RateLimited { retry_after: None }), Ok("fine")]);
        let client = LlmClient::with_provider(fake.clone(), profile());
        let c = call(&client).unwrap();
        assert_eq!(c.text, "fine");
        assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
        assert_eq!(c.model, "profile-model", "the profile fills an empty model");
    }

    #[test]
    fn retries_stop_at_the_policy_limit_and_on_permanent_errors() {
        let fake = Fake::new(vec![Err(http(503)), Err(http(503)), Err(http(503)), Ok("never")]);
        let client = LlmClient::with_provider(fake.clone(), profile());
        assert_eq!(call(&client), Err(http(503)));
        assert_eq!(fake.calls.load(Ordering::SeqCst), 3, "one try and two retries");

        let fake = Fake::new(vec![Err(http(401)), Ok("never")]);
        let client = LlmClient::with_provider(fake.clone(), profile());
        assert_eq!(call(&client), Err(http(401)));
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_503_that_says_when_to_come_back_is_waited_for() {
        let asked = Duration::from_millis(40);
        let busy = LlmError::Unavailable { message: "loading model".into(), retry_after: asked };
        let fake = Fake::new(vec![Err(busy), Ok("fine")]);
        let client = LlmClient::with_provider(fake.clone(), profile());
        let started = Instant::now();
        assert_eq!(call(&client).unwrap().text, "fine");
        assert!(started.elapsed() >= asked, "waited {:?}, asked {asked:?}", started.elapsed());
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_retry_after_beyond_the_policy_is_returned_not_waited() {
        let long = LlmError::RateLimited { retry_after: Some(Duration::from_secs(60)) };
        let fake = Fake::new(vec![Err(long.clone()), Ok("never")]);
        let client = LlmClient::with_provider(fake.clone(), profile());
        let started = Instant::now();
        assert_eq!(call(&client), Err(long));
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn no_retry_once_tokens_reached_the_caller() {
        let fake = Arc::new(Fake {
            stream_before_failing: true,
            ..Arc::into_inner(Fake::new(vec![Err(LlmError::Truncated { partial: "partial ".into() }), Ok("never")])).unwrap()
        });
        let client = LlmClient::with_provider(fake.clone(), profile());
        let seen = Mutex::new(String::new());
        let sink = |t: &str| seen.lock().unwrap().push_str(t);
        let cancel = CancelToken::new();
        let mut request = ChatRequest::new("m", vec![ChatMessage::user("hi")]);
        request.stream = true;
        let result = client.complete(&request, CallContext::with_tokens(&cancel, &sink));
        assert_eq!(result, Err(LlmError::Truncated { partial: "partial ".into() }));
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
        assert_eq!(*seen.lock().unwrap(), "partial ");
    }

    #[test]
    fn the_profile_sampler_fills_gaps_only() {
        let fake = Fake::new(vec![Ok("x")]);
        let mut p = profile();
        p.sampler.temperature = Some(0.9);
        p.sampler.max_tokens = Some(100);
        let client = LlmClient::with_provider(fake.clone(), p);
        let mut request = ChatRequest::new("explicit", vec![ChatMessage::user("hi")]);
        request.sampler.temperature = Some(0.1);
        client.complete(&request, CallContext::new(&CancelToken::new())).unwrap();
        let sent = fake.seen.lock().unwrap()[0].clone();
        assert_eq!(sent.model, "explicit");
        assert_eq!(sent.sampler.temperature, Some(0.1));
        assert_eq!(sent.sampler.max_tokens, Some(100));
    }

    #[test]
    fn the_cache_applies_to_wrapped_providers_and_replays_streams() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let fake = Fake::new(vec![Ok("cached answer"), Ok("second answer")]);
        let client = LlmClient::with_provider(fake.clone(), ProviderProfile { cache: true, ..profile() }).with_store(store);
        let first = call(&client).unwrap();
        assert!(!first.from_cache);
        let seen = Mutex::new(String::new());
        let sink = |t: &str| seen.lock().unwrap().push_str(t);
        let cancel = CancelToken::new();
        let mut request = ChatRequest::new("", vec![ChatMessage::user("hi")]);
        request.stream = true;
        let second = client.complete(&request, CallContext::with_tokens(&cancel, &sink)).unwrap();
        assert!(second.from_cache);
        assert_eq!(second.text, "cached answer");
        assert_eq!(*seen.lock().unwrap(), "cached answer");
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_cache_stays_off_unless_the_profile_enables_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let fake = Fake::new(vec![Ok("a"), Ok("b")]);
        let client = LlmClient::with_provider(fake.clone(), profile()).with_store(store);
        assert!(client.cache().is_none());
        assert_eq!(call(&client).unwrap().text, "a");
        assert_eq!(call(&client).unwrap().text, "b");
    }

    #[test]
    fn a_cancelled_call_never_reaches_the_provider() {
        let fake = Fake::new(vec![Ok("x")]);
        let client = LlmClient::with_provider(fake.clone(), profile());
        let cancel = CancelToken::new();
        cancel.cancel();
        let result = client.complete(&ChatRequest::new("m", vec![]), CallContext::new(&cancel));
        assert_eq!(result, Err(LlmError::Cancelled));
        assert_eq!(fake.calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn keys_are_required_where_they_must_be() {
        let var = "LOREKEEPER_TEST_KEY_THAT_IS_NEVER_SET_5f1c";
        let remote = |kind, url: &str| ProviderProfile {
            kind,
            base_url: Some(url.into()),
            api_key_env: Some(var.into()),
            model: "m".into(),
            ..Default::default()
        };
        let err = |p: ProviderProfile| LlmClient::from_profile(&p, None).err();
        assert_eq!(err(remote(ProviderKind::Openai, "https://api.openai.com/v1")), Some(LlmError::MissingKey { var: var.into() }));
        assert_eq!(err(remote(ProviderKind::Anthropic, "http://127.0.0.1:1")), Some(LlmError::MissingKey { var: var.into() }));
        assert_eq!(err(remote(ProviderKind::Gemini, "http://127.0.0.1:1")), Some(LlmError::MissingKey { var: var.into() }));
        assert_eq!(err(remote(ProviderKind::Openai, "http://127.0.0.1:8080/v1")), None);
        assert_eq!(err(remote(ProviderKind::Openai, "http://192.168.1.20:11434/v1")), None);
        let missing_model = ProviderProfile {
            kind: ProviderKind::Local,
            path: Some("/nonexistent/lorekeeper/model.gguf".into()),
            ..Default::default()
        };
        assert!(matches!(err(missing_model), Some(LlmError::Config(_))));
        assert!(matches!(err(ProviderProfile { kind: ProviderKind::Scripted, ..Default::default() }), Some(LlmError::Config(_))));
    }

    #[test]
    fn the_default_openai_key_never_goes_to_a_local_server() {
        let env = |var: &str| (var == "OPENAI_API_KEY" || var == "MY_LOCAL_KEY").then(|| Secret::new(format!("value-of-{var}")));
        let nothing = |_: &str| None;
        let openai = |url: &str, var: Option<&str>| ProviderProfile {
            kind: ProviderKind::Openai,
            base_url: Some(url.into()),
            api_key_env: var.map(str::to_string),
            ..Default::default()
        };
        let key = |p: ProviderProfile| resolve_key_with(&p, env, nothing).unwrap().map(|s| s.expose().to_string());
        assert_eq!(key(openai("http://127.0.0.1:8080/v1", None)), None);
        assert_eq!(key(openai("http://127.0.0.1:8080/v1", Some("MY_LOCAL_KEY"))).as_deref(), Some("value-of-MY_LOCAL_KEY"));
        assert_eq!(key(openai("https://api.openai.com/v1", None)).as_deref(), Some("value-of-OPENAI_API_KEY"));
        // OpenAI's key never goes to another host on its own.
        let other = resolve_key_with(&openai("https://openrouter.ai/api/v1", None), env, nothing);
        assert!(matches!(other, Err(LlmError::MissingKey { ref var }) if var.contains("api.openai.com")), "{other:?}");
        assert_eq!(key(openai("https://openrouter.ai/api/v1", Some("MY_LOCAL_KEY"))).as_deref(), Some("value-of-MY_LOCAL_KEY"));
        // A key over plain http to a machine on the network is refused unless allowed.
        let lan = openai("http://10.0.0.5:8080/v1", Some("MY_LOCAL_KEY"));
        assert!(matches!(resolve_key_with(&lan, env, nothing), Err(LlmError::Config(m)) if m.contains("plain http://")));
        let allowed = ProviderProfile { allow_key_over_http: true, ..lan };
        assert_eq!(key(allowed).as_deref(), Some("value-of-MY_LOCAL_KEY"));
        let anthropic = ProviderProfile { kind: ProviderKind::Anthropic, ..Default::default() };
        assert_eq!(key(anthropic), None, "ANTHROPIC_API_KEY is not set in this fake environment");
    }

    #[test]
    fn the_environment_wins_then_the_profiles_keyring_entry() {
        use crate::llm::keyring::KeySource;
        let env = |var: &str| (var == "MY_KEY").then(|| Secret::new("from-env-1234"));
        let stored = |name: &str| (name == "kept").then(|| Secret::new("from-keyring-5678"));
        let profile = |name: &str, url: &str, var: Option<&str>| ProviderProfile {
            name: name.into(),
            kind: ProviderKind::Openai,
            base_url: Some(url.into()),
            api_key_env: var.map(str::to_string),
            ..Default::default()
        };
        let key = |p: &ProviderProfile| resolve_key_with(p, env, stored).map(|k| k.map(|s| s.expose().to_string()));
        let both = profile("kept", "https://openrouter.ai/api/v1", Some("MY_KEY"));
        assert_eq!(key(&both).unwrap().as_deref(), Some("from-env-1234"));
        assert_eq!(key_source_with(&both, env, stored), KeySource::Environment { var: "MY_KEY".into() });
        // A variable that is not set falls through to the keyring.
        let unset = profile("kept", "https://openrouter.ai/api/v1", Some("UNSET_KEY"));
        assert_eq!(key(&unset).unwrap().as_deref(), Some("from-keyring-5678"));
        assert_eq!(key_source_with(&unset, env, stored), KeySource::Keyring);
        // The profile's own entry goes to its host even with no variable named.
        let unnamed = profile("kept", "https://openrouter.ai/api/v1", None);
        assert_eq!(key(&unnamed).unwrap().as_deref(), Some("from-keyring-5678"));
        let local = profile("kept", "http://127.0.0.1:8080/v1", None);
        assert_eq!(key(&local).unwrap().as_deref(), Some("from-keyring-5678"));
        // Another profile's entry is not this one's.
        let other = profile("other", "https://openrouter.ai/api/v1", None);
        assert!(matches!(key(&other), Err(LlmError::MissingKey { .. })));
        assert_eq!(key_source_with(&other, env, stored), KeySource::None);
        // The plain-http guard holds for keyring keys too.
        let lan = profile("kept", "http://10.0.0.5:8080/v1", None);
        assert!(matches!(key(&lan), Err(LlmError::Config(m)) if m.contains("plain http://")));
        let scripted = ProviderProfile { name: "kept".into(), kind: ProviderKind::Scripted, ..Default::default() };
        assert_eq!(key(&scripted).unwrap(), None);
    }

    #[test]
    fn local_addresses() {
        for url in ["http://localhost:8080/v1", "http://127.0.0.1:1234", "http://[::1]:8080/v1", "http://10.0.0.5/v1", "http://gpu-box.local:8000"] {
            assert!(is_local_address(url), "{url}");
        }
        for url in ["https://api.openai.com/v1", "https://openrouter.ai/api/v1", "http://8.8.8.8/v1", "https://localhost.example.com"] {
            assert!(!is_local_address(url), "{url}");
        }
    }
}
