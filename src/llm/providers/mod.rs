//! The backends: each does one attempt of a call on its own wire format (OpenAI-
//! compatible SSE, Anthropic, Gemini) or from a script, and reports what came back.
//! Every policy around an attempt (retry, rate limit, cache, call log) is the client's.

pub mod anthropic;
pub mod gemini;
mod gemini_schema;
pub mod http;
pub mod openai;
pub mod reply;
pub mod scripted;
pub mod sse;
