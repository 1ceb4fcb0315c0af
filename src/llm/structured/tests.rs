//! The attempt loop against a scripted in-process provider that records every request.

use super::*;
use crate::llm::{CancelToken, Completion, Provider, ProviderProfile};
use serde::Deserialize;
use serde_json::json;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Personality {
    #[schemars(length(min = 4, max = 6))]
    core_traits: Vec<String>,
    #[schemars(length(min = 2, max = 4))]
    fears: Vec<String>,
    summary: String,
}

#[derive(Default)]
struct ScriptedReplies {
    replies: Mutex<VecDeque<Result<Completion, LlmError>>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedReplies {
    fn new(replies: Vec<Result<Completion, LlmError>>) -> Arc<Self> {
        Arc::new(Self { replies: Mutex::new(replies.into()), requests: Mutex::default() })
    }

    fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Provider for ScriptedReplies {
    fn describe(&self) -> String {
        "scripted replies (test)".into()
    }

    fn complete(&self, request: &ChatRequest, _ctx: CallContext<'_>) -> Result<Completion, LlmError> {
        if let Ok(mut requests) = self.requests.lock() {
            requests.push(request.clone());
        }
        let next = self.replies.lock().ok().and_then(|mut replies| replies.pop_front());
        next.unwrap_or_else(|| Err(LlmError::Config("the script has no more replies".into())))
    }
}

fn reply(text: &str, prompt_tokens: u32, completion_tokens: u32) -> Result<Completion, LlmError> {
    Ok(Completion {
        text: text.into(),
        usage: Usage { prompt_tokens, completion_tokens, reported: true },
        finish_reason: Some("stop".into()),
        model: "test-model".into(),
        from_cache: false,
        elapsed_ms: 0,
    })
}

fn client_for(provider: &Arc<ScriptedReplies>) -> LlmClient {
    LlmClient::with_provider(provider.clone(), ProviderProfile { model: "test-model".into(), ..ProviderProfile::default() })
}

fn ask(provider: &Arc<ScriptedReplies>) -> Result<StructuredOutput<Personality>, StructuredError> {
    let request = ChatRequest::new(
        "",
        vec![ChatMessage::system("You design characters."), ChatMessage::user("Describe Mira's personality.")],
    );
    let cancel = CancelToken::new();
    complete_structured::<Personality>(&client_for(provider), request, &StructuredOptions::default(), CallContext::new(&cancel))
}

const VALID: &str = r#"{"core_traits": ["brave", "wry", "loyal", "stubborn"], "fears": ["fire", "debt"], "summary": "A scout."}"#;
const TOO_FEW_TRAITS: &str = r#"{"core_traits": ["brave", "wry"], "fears": ["fire", "debt"], "summary": "A scout."}"#;

#[test]
fn schema_carries_the_schemars_bounds() {
    let schema = schema_for::<Personality>();
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    assert_eq!(schema["properties"]["core_traits"]["minItems"], 4);
    assert_eq!(schema["properties"]["core_traits"]["maxItems"], 6);
    assert_eq!(schema["properties"]["fears"]["minItems"], 2);
    assert_eq!(schema["required"], json!(["core_traits", "fears", "summary"]));
    assert_eq!(schema_name::<Personality>(), "Personality");
    assert_eq!(schema_name::<Vec<Personality>>(), "Array_of_Personality");
}

#[test]
fn validate_collects_every_error_with_its_path() {
    let schema = schema_for::<Personality>();
    let errors = validate(&schema, &json!({"core_traits": ["a", 7], "fears": []}));
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["", "/core_traits", "/core_traits/1", "/fears"], "{errors:#?}");
    assert!(errors[0].message.contains("\"summary\" is a required property"), "{errors:#?}");
    assert!(errors[1].message.contains("has less than 4 items"), "{errors:#?}");
    assert_eq!(errors[1].schema_path, "/properties/core_traits/minItems");
    assert!(validate(&schema, &serde_json::from_str(VALID).unwrap_or_default()).is_empty());

    let broken = validate(&json!({"type": "no-such-type"}), &json!(1));
    assert_eq!(broken.len(), 1);
    assert!(broken[0].message.starts_with("the schema itself is invalid"), "{broken:?}");
}

#[test]
fn damaged_but_repairable_reply_succeeds_in_one_attempt() {
    let damaged = "Here you go!\n```json\n{\"core_traits\": [\"brave\", \"wry\", \"loyal\", \"stubborn\",],\n 'fears': [\"fire\", \"debt\"], \"summary\": \"A scout.\"\n";
    let provider = ScriptedReplies::new(vec![reply(damaged, 100, 40)]);
    let output = match ask(&provider) {
        Ok(output) => output,
        Err(error) => panic!("a repairable reply should succeed: {error}"),
    };
    assert_eq!(output.value.core_traits, ["brave", "wry", "loyal", "stubborn"]);
    assert_eq!(output.attempts.len(), 1);
    let attempt = &output.attempts[0];
    assert_eq!(attempt.raw, damaged);
    assert_eq!(attempt.failure, None);
    for repair in [Repair::CodeFence, Repair::TrailingComma, Repair::SingleQuotes, Repair::ClosedTruncated] {
        assert!(attempt.repairs.contains(&repair), "{repair:?} missing from {:?}", attempt.repairs);
    }

    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    let ResponseFormat::JsonSchema { name, schema } = &requests[0].response_format else {
        panic!("the request must carry the schema, got {:?}", requests[0].response_format);
    };
    assert_eq!(name, "Personality");
    assert_eq!(schema, &schema_for::<Personality>());
    // The schema is also in the prompt, appended to the caller's system message.
    assert_eq!(requests[0].messages.len(), 2);
    assert!(requests[0].messages[0].content.starts_with("You design characters."));
    assert!(requests[0].messages[0].content.contains("\"minItems\":4"));
    assert_eq!(requests[0].model, "test-model");
}

/// A re-ask quotes only the latest failed reply, and only as much of it as leaves the
/// reply its planned cap: long failed replies used to pile up until the cap was 64.
#[test]
fn re_asks_quote_a_bounded_excerpt_and_keep_the_reply_cap() {
    let long = format!(r#"{{"core_traits": ["brave"], "fears": ["fire", "debt"], "summary": "{}"}}"#, "A scout of the hills. ".repeat(300));
    let provider = ScriptedReplies::new(vec![reply(&long, 100, 30), reply(&long, 100, 30), reply(&long, 100, 30)]);
    let profile = ProviderProfile { model: "test-model".into(), max_context_tokens: 2048, ..ProviderProfile::default() };
    let client = LlmClient::with_provider(provider.clone(), profile.clone());
    let request = ChatRequest::new("", vec![ChatMessage::system("You design characters."), ChatMessage::user("Describe Mira's personality.")]);
    let cancel = CancelToken::new();
    let result = complete_structured::<Personality>(&client, request, &StructuredOptions::default(), CallContext::new(&cancel));
    assert!(result.is_err(), "every reply is invalid");
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    let planned = crate::llm::client::default_reply_cap(&requests[0].response_format);
    for (i, request) in requests.iter().enumerate() {
        assert_eq!(request.sampler.max_tokens, Some(planned), "attempt {}: the reply keeps its cap", i + 1);
        let prompt = crate::llm::tokens::estimate_messages(&request.messages);
        assert!(prompt + planned <= 2048, "attempt {}: prompt {prompt}", i + 1);
    }
    for request in &requests[1..] {
        assert_eq!(request.messages.len(), 4, "system, user, the latest failed reply, the re-ask");
        assert!(request.messages[2].content.contains("reply cut here"), "{}", request.messages[2].content);
        assert!(request.messages[2].content.starts_with(r#"{"core_traits": ["brave"]"#));
    }
}

#[test]
fn invalid_reply_is_re_asked_with_the_validation_errors() {
    let provider = ScriptedReplies::new(vec![reply(TOO_FEW_TRAITS, 100, 30), reply(VALID, 160, 35)]);
    let output = match ask(&provider) {
        Ok(output) => output,
        Err(error) => panic!("the second reply is valid: {error}"),
    };
    assert_eq!(output.attempts.len(), 2);
    assert_eq!(output.attempts[0].failure, Some(AttemptFailure::Invalid));
    assert_eq!(output.attempts[0].errors.len(), 1);
    assert_eq!(output.attempts[0].errors[0].path, "/core_traits");
    assert_eq!(output.attempts[1].failure, None);
    assert_eq!(output.json, serde_json::from_str::<Value>(VALID).unwrap_or_default());

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let reask = &requests[1].messages;
    assert_eq!(reask.len(), 4, "system, user, the failed reply, the re-ask");
    assert_eq!(reask[..2], requests[0].messages[..]);
    assert_eq!(reask[2], ChatMessage::assistant(TOO_FEW_TRAITS));
    assert_eq!(reask[3].role, Role::User);
    assert!(
        reask[3].content.contains(r#"- at /core_traits: ["brave","wry"] has less than 4 items"#),
        "the re-ask must quote the validation error: {}",
        reask[3].content
    );
    assert_eq!(requests[1].response_format, requests[0].response_format);

    // Attempts serialise for the UI and the store, and read back unchanged.
    let stored = serde_json::to_value(&output.attempts[0]).unwrap_or_default();
    assert_eq!(stored["failure"], json!({"kind": "invalid"}));
    assert_eq!(stored["errors"][0]["path"], "/core_traits");
    assert_eq!(stored["usage"]["prompt_tokens"], 100);
    let restored: StructuredAttempt = serde_json::from_value(stored).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(restored, output.attempts[0]);
}

#[test]
fn three_failures_give_a_clear_error_with_every_attempt() {
    let provider = ScriptedReplies::new(vec![
        reply(TOO_FEW_TRAITS, 100, 30),
        reply("Sorry, I cannot do that.", 150, 8),
        reply(r#"{"core_traits": ["a", "b", "c", "d"], "fears": ["x"]}"#, 180, 20),
        reply(VALID, 1, 1),
    ]);
    let error = match ask(&provider) {
        Ok(output) => panic!("all three replies are invalid, got {:?}", output.value),
        Err(error) => error,
    };
    let StructuredError::Exhausted { name, attempts } = &error else { panic!("wrong error: {error:?}") };
    assert_eq!(name, "Personality");
    assert_eq!(attempts.len(), 3);
    assert_eq!(provider.requests().len(), 3, "no fourth call");
    assert_eq!(attempts[0].raw, TOO_FEW_TRAITS);
    assert_eq!(attempts[1].failure, Some(AttemptFailure::Unparseable {
        message: "the reply contains no JSON object or array".into()
    }));
    assert_eq!(attempts[2].errors.len(), 2, "{:?}", attempts[2].errors);
    assert_eq!(
        error.to_string(),
        "no valid Personality after 3 attempt(s); last attempt 3: at the top level: \"summary\" is a required property (and 1 more)"
    );
    // The unparseable reply is answered as such, in place of the first re-ask.
    let third = provider.requests()[2].messages.clone();
    assert!(third[3].content.contains("it is not valid JSON (the reply contains no JSON object or array)"), "{}", third[3].content);
    assert_eq!(third.len(), 4);

    let usage = error.usage();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.reported), (430, 58, true));
    let as_llm: LlmError = error.into();
    assert!(matches!(as_llm, LlmError::Structured { attempts: 3, .. }), "{as_llm:?}");
}

#[test]
fn usage_is_summed_over_attempts() {
    let mut estimated = reply(VALID, 7, 3);
    if let Ok(completion) = &mut estimated {
        completion.usage.reported = false;
    }
    let provider = ScriptedReplies::new(vec![reply("{oops", 100, 10), reply(TOO_FEW_TRAITS, 200, 20), estimated]);
    let output = match ask(&provider) {
        Ok(output) => output,
        Err(error) => panic!("the third reply is valid: {error}"),
    };
    assert_eq!(output.attempts.len(), 3);
    assert_eq!(output.usage, Usage { prompt_tokens: 307, completion_tokens: 33, reported: false });
    assert_eq!(output.attempts.iter().map(|a| a.usage.prompt_tokens).collect::<Vec<_>>(), [100, 200, 7]);
}

#[test]
fn provider_failure_stops_the_loop_and_keeps_earlier_attempts() {
    let provider = ScriptedReplies::new(vec![
        reply(TOO_FEW_TRAITS, 10, 10),
        Err(LlmError::Http { status: 400, message: "bad request".into() }),
    ]);
    let error = match ask(&provider) {
        Ok(_) => panic!("the provider failed"),
        Err(error) => error,
    };
    assert!(matches!(&error, StructuredError::Llm { source: LlmError::Http { status: 400, .. }, .. }), "{error:?}");
    assert_eq!(error.attempts().len(), 1);
    assert_eq!(error.to_string(), "the provider answered HTTP 400: bad request (during structured attempt 2)");
}

#[test]
fn cancelled_before_the_call_reaches_no_provider() {
    let provider = ScriptedReplies::new(vec![reply(VALID, 1, 1)]);
    let cancel = CancelToken::new();
    cancel.cancel();
    let request = ChatRequest::new("", vec![ChatMessage::user("hi")]);
    let result = complete_structured::<Personality>(
        &client_for(&provider),
        request,
        &StructuredOptions::default(),
        CallContext::new(&cancel),
    );
    assert!(matches!(result, Err(StructuredError::Llm { source: LlmError::Cancelled, .. })));
    assert!(provider.requests().is_empty());
}

#[test]
fn schema_picks_the_right_candidate_and_instruction_is_inserted() {
    // A draft that breaks the schema, then the real answer: one attempt, no re-ask.
    let text = format!("Draft: {TOO_FEW_TRAITS}\nFinal answer: {VALID}");
    let provider = ScriptedReplies::new(vec![reply(&text, 1, 1)]);
    let cancel = CancelToken::new();
    let options = StructuredOptions { max_attempts: 1, ..StructuredOptions::default() };
    let request = ChatRequest::new("", vec![ChatMessage::user("Describe Mira.")]);
    let output = complete_structured::<Personality>(&client_for(&provider), request, &options, CallContext::new(&cancel));
    let output = match output {
        Ok(output) => output,
        Err(error) => panic!("the second object is valid: {error}"),
    };
    assert_eq!(output.value.core_traits.len(), 4);
    assert!(output.attempts[0].repairs.contains(&Repair::SkippedCandidates { count: 1 }));
    // With no system message, one is inserted in front.
    let messages = &provider.requests()[0].messages;
    assert_eq!(messages[0].role, Role::System);
    assert!(messages[0].content.contains("<json_schema>"));
    assert_eq!(messages[1], ChatMessage::user("Describe Mira."));
}

#[test]
fn long_failed_replies_are_cut_in_the_echo() {
    assert_eq!(echo("  ", 10), "(empty reply)");
    assert_eq!(echo("short", 10), "short");
    let long = "é".repeat(30);
    assert_eq!(echo(&long, 10), format!("{}\n[... reply cut here, 30 characters in all]", "é".repeat(10)));
}

/// The schema says string, the type wants a number: valid JSON the type still refuses.
#[derive(Debug, Deserialize, JsonSchema)]
struct Level {
    #[schemars(with = "String")]
    #[allow(dead_code)]
    level: u8,
}

#[test]
fn type_rejection_is_recorded_and_re_asked() {
    let provider = ScriptedReplies::new(vec![reply(r#"{"level": "high"}"#, 1, 1), reply(r#"{"level": "low"}"#, 1, 1)]);
    let cancel = CancelToken::new();
    let options = StructuredOptions { max_attempts: 2, ..StructuredOptions::default() };
    let request = ChatRequest::new("", vec![ChatMessage::user("How tense is the scene?")]);
    let result = complete_structured::<Level>(&client_for(&provider), request, &options, CallContext::new(&cancel));
    let Err(StructuredError::Exhausted { attempts, .. }) = result else { panic!("both replies are refused: {result:?}") };
    assert_eq!(attempts.len(), 2);
    assert!(attempts[0].errors.is_empty());
    let Some(AttemptFailure::TypeRejected { message }) = &attempts[0].failure else { panic!("{:?}", attempts[0]) };
    assert!(message.contains("expected u8"), "{message}");
    let reask = &provider.requests()[1].messages[3].content;
    assert!(reask.contains("expected u8"), "{reask}");
}

/// A reply that validates but is made of the schema's own words is re-asked, for every
/// provider, with the problems listed; content rules can be switched off by a caller
/// that judges the value itself.
#[test]
fn a_valid_reply_of_field_names_is_re_asked_as_content() {
    const FIELD_NAMES: &str = r#"{"core_traits": ["fears", "summary", "core traits", "..."], "fears": ["fire", "fire"], "summary": "A scout."}"#;
    let provider = ScriptedReplies::new(vec![reply(FIELD_NAMES, 100, 30), reply(VALID, 160, 35)]);
    let output = match ask(&provider) {
        Ok(output) => output,
        Err(error) => panic!("the second reply has content: {error}"),
    };
    assert_eq!(output.attempts.len(), 2);
    assert_eq!(output.attempts[0].failure, Some(AttemptFailure::Content));
    let paths: Vec<&str> = output.attempts[0].errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["/core_traits/0", "/core_traits/1", "/core_traits/2", "/core_traits/3", "/fears"]);
    assert!(output.attempts[0].summary().contains("is the name of the field"), "{}", output.attempts[0].summary());
    let reask = &provider.requests()[1].messages;
    let last = &reask[reask.len() - 1].content;
    assert!(last.contains("not content") && last.contains("at /fears: has 2 items that are all the same"), "{last}");

    let provider = ScriptedReplies::new(vec![reply(FIELD_NAMES, 100, 30)]);
    let request = ChatRequest::new("", vec![ChatMessage::user("Describe Mira.")]);
    let cancel = CancelToken::new();
    let options = StructuredOptions { content: ContentRules::none(), ..StructuredOptions::default() };
    let output = complete_structured::<Personality>(&client_for(&provider), request, &options, CallContext::new(&cancel));
    assert!(output.is_ok_and(|o| o.attempts.len() == 1));
}

/// Without re-asks (a base model continuing a document) a failed draw is followed by
/// the same request under a new seed: the same page, a different draw.
#[test]
fn without_reasks_the_same_request_is_drawn_again_under_a_new_seed() {
    let provider = ScriptedReplies::new(vec![reply(TOO_FEW_TRAITS, 100, 30), reply(VALID, 100, 35)]);
    let mut request = ChatRequest::new("", vec![ChatMessage::system("Character: Mira.\nIn brief:")]);
    request.sampler.seed = Some(40);
    let cancel = CancelToken::new();
    let options = StructuredOptions { reask: false, schema_in_prompt: false, ..StructuredOptions::default() };
    let output = complete_structured::<Personality>(&client_for(&provider), request, &options, CallContext::new(&cancel));
    assert!(output.is_ok_and(|o| o.attempts.len() == 2));
    let requests = provider.requests();
    assert_eq!(requests[0].messages, requests[1].messages);
    assert_eq!((requests[0].sampler.seed, requests[1].sampler.seed), (Some(40), Some(41)));
}
