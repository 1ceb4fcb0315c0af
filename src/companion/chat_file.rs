//! SillyTavern chat files (`.jsonl`): one JSON object per line, a header first (who
//! talks, the chat's metadata), then one object per message (`name`, `is_user`,
//! `is_system`, `send_date`, `mes`, and for a character's message its `swipes` and
//! `swipe_id`).
//!
//! A Lorekeeper chat is a list of exchanges (the user's message, the character's reply),
//! so a file maps onto it like this: each user message followed by a character message
//! is an exchange; the messages before the first user message open the chat (the
//! greeting); anything else (a hidden system message, a second user message in a row, a
//! second character message in a row) is carried with the exchange before it and named
//! in the import's notes: hidden messages are kept for the export only, as SillyTavern
//! hides them from the model; the others are read as part of the conversation
//! (`ChatTurn::carried`), though not edited or swiped here. Every message object is kept as it was read, so a file that is imported and
//! exported again comes back with the same objects: only the fields Lorekeeper changed
//! (`mes`, `swipes`, `swipe_id`) are written anew.
//!
//! Pure: no store, no clock. The caller turns exchanges into stored turns.

use serde_json::{Map, Value, json};

/// Files larger than this are refused before they are read whole.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ChatFileError {
    /// 1-based line of the file (0: the file as a whole).
    pub line: usize,
    pub message: String,
}

/// One exchange read from a file, with the objects it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct FileExchange {
    pub user_text: String,
    pub reply: String,
    pub swipes: Vec<String>,
    pub swipe: u32,
    /// When the user's message was sent (RFC 3339), when the file says so readably.
    pub at: Option<String>,
    /// `{"user": {...}, "reply": {...}, "after": [...]}`: the objects as read.
    pub raw: Value,
}

/// A chat file read whole.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatFile {
    /// `{"header": {...} | null, "opening": [...]}`: the header and the messages before
    /// the first user message, as read.
    pub raw: Value,
    /// The opening character message's text, if the chat opens with one (the greeting).
    pub greeting: Option<String>,
    pub exchanges: Vec<FileExchange>,
    /// What was carried along rather than read as conversation, line by line.
    pub notes: Vec<String>,
}

fn is_true(object: &Map<String, Value>, key: &str) -> bool {
    object.get(key).and_then(Value::as_bool).unwrap_or(false)
}

enum Kind {
    User,
    Character,
    System,
}

/// Read a SillyTavern chat file. A line that is not a JSON object, or a message
/// without text, is an error naming the line; nothing is half-read.
pub fn parse(text: &str) -> Result<ChatFile, ChatFileError> {
    let mut file = ChatFile::default();
    let mut header = Value::Null;
    let mut opening: Vec<Value> = Vec::new();
    let mut pending_user: Option<(usize, Map<String, Value>)> = None;
    let mut exchanges: Vec<FileExchange> = Vec::new();
    let mut seen_first = false;
    // Messages that are not part of an exchange go after the last exchange, or before
    // the first one while there is none (into the opening if none ever comes).
    let mut before_first: Vec<Value> = Vec::new();
    let carry = |exchanges: &mut Vec<FileExchange>, before_first: &mut Vec<Value>, object: Value| match exchanges.last_mut() {
        Some(last) => {
            if let Some(after) = last.raw.get_mut("after").and_then(Value::as_array_mut) {
                after.push(object);
            }
        }
        None => before_first.push(object),
    };
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(line).map_err(|e| ChatFileError { line: number, message: format!("not JSON ({e})") })?;
        let Value::Object(object) = value else {
            return Err(ChatFileError { line: number, message: "not a JSON object".into() });
        };
        // The header: the first line, when it is not a message.
        let seen_before = std::mem::replace(&mut seen_first, true);
        if !seen_before && !object.contains_key("mes") {
            header = Value::Object(object);
            continue;
        }
        let Some(mes) = object.get("mes") else {
            return Err(ChatFileError { line: number, message: "a message without \"mes\" (its text)".into() });
        };
        if !mes.is_string() {
            return Err(ChatFileError { line: number, message: "\"mes\" is not text".into() });
        }
        let kind = if is_true(&object, "is_system") {
            Kind::System
        } else if is_true(&object, "is_user") {
            Kind::User
        } else {
            Kind::Character
        };
        match kind {
            Kind::User => {
                if let Some((line, orphan)) = pending_user.take() {
                    file.notes.push(format!("line {line}: a user message with no reply of its own is kept after the exchange before it (sent to the model as part of the chat; it cannot be edited or swiped here)"));
                    carry(&mut exchanges, &mut before_first, Value::Object(orphan));
                }
                pending_user = Some((number, object));
            }
            Kind::Character => match pending_user.take() {
                Some((_, user)) => {
                    let mut made = exchange(user, object);
                    if exchanges.is_empty() && !before_first.is_empty() {
                        made.raw["before"] = Value::Array(std::mem::take(&mut before_first));
                    }
                    exchanges.push(made);
                }
                None if exchanges.is_empty() && !opening.iter().chain(&before_first).any(is_character) => {
                    file.greeting = object.get("mes").and_then(Value::as_str).map(str::to_string);
                    // What came before the greeting stays before it.
                    opening.append(&mut before_first);
                    opening.push(Value::Object(object));
                }
                None => {
                    file.notes.push(format!("line {number}: a second character message in a row is kept after the exchange before it (sent to the model as part of the chat; it cannot be edited or swiped here)"));
                    carry(&mut exchanges, &mut before_first, Value::Object(object));
                }
            },
            Kind::System => {
                if let Some((line, orphan)) = pending_user.take() {
                    file.notes.push(format!("line {line}: a user message with no reply of its own is kept after the exchange before it (sent to the model as part of the chat; it cannot be edited or swiped here)"));
                    carry(&mut exchanges, &mut before_first, Value::Object(orphan));
                }
                file.notes.push(format!("line {number}: a hidden (system) message is kept for export, not sent to the model, as SillyTavern hides it"));
                carry(&mut exchanges, &mut before_first, Value::Object(object));
            }
        }
    }
    if let Some((line, orphan)) = pending_user.take() {
        file.notes.push(format!("line {line}: the last user message has no reply; it is kept after the last exchange (sent to the model as part of the chat)"));
        carry(&mut exchanges, &mut before_first, Value::Object(orphan));
    }
    opening.append(&mut before_first);
    if header.is_null() && opening.is_empty() && exchanges.is_empty() {
        return Err(ChatFileError { line: 0, message: "the file holds no chat".into() });
    }
    file.raw = json!({ "header": header, "opening": opening });
    file.exchanges = exchanges;
    Ok(file)
}

fn is_character(value: &Value) -> bool {
    value.as_object().is_some_and(|o| !is_true(o, "is_user") && !is_true(o, "is_system"))
}

fn exchange(user: Map<String, Value>, reply: Map<String, Value>) -> FileExchange {
    let text = |o: &Map<String, Value>| o.get("mes").and_then(Value::as_str).unwrap_or("").to_string();
    let reply_text = text(&reply);
    let mut swipes: Vec<String> =
        reply.get("swipes").and_then(Value::as_array).map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default();
    let mut swipe = reply.get("swipe_id").and_then(Value::as_u64).unwrap_or(0).min(u64::from(u32::MAX)) as u32;
    if swipes.is_empty() {
        swipes.push(reply_text.clone());
        swipe = 0;
    }
    if swipe as usize >= swipes.len() {
        swipe = (swipes.len() - 1) as u32;
    }
    // The shown text is the chosen swipe.
    swipes[swipe as usize] = reply_text.clone();
    let at = user.get("send_date").and_then(super::model::send_date);
    FileExchange {
        user_text: text(&user),
        reply: reply_text,
        swipes,
        swipe,
        at,
        raw: json!({ "user": Value::Object(user), "reply": Value::Object(reply), "after": [] }),
    }
}


/// One exchange as it is written out: its stored objects (if it came from a file) with
/// the text Lorekeeper holds now, or new objects.
pub struct ExportExchange<'a> {
    pub user_text: &'a str,
    /// The name the user wrote it under (`None`: the chat's).
    pub user_name: Option<&'a str>,
    pub reply: &'a str,
    pub swipes: &'a [String],
    pub swipe: u32,
    pub at: &'a str,
    pub raw: Option<&'a Value>,
}

/// What a chat file is written from.
pub struct ExportChat<'a> {
    pub user_name: &'a str,
    pub character_name: &'a str,
    /// The header and opening as read (`ChatFile::raw`), for a chat that came from a file.
    pub raw: Option<&'a Value>,
    /// The greeting and its swipes (the card's greetings) when the chat did not come
    /// from a file but reaches back to its start.
    pub greeting: Option<(&'a [String], u32)>,
    pub created: &'a str,
    pub exchanges: Vec<ExportExchange<'a>>,
    /// The chat variables as they stand (`chat_metadata.variables`, where SillyTavern
    /// keeps them).
    pub variables: &'a std::collections::BTreeMap<String, String>,
    /// The chat's Author's Note as it stands (`chat_metadata.note_*`).
    pub author_note: Option<&'a super::model::AuthorNote>,
}

/// The chat variables a file's header keeps (`chat_metadata.variables`): text as text,
/// numbers and other values as their JSON.
pub fn variables(file: &ChatFile) -> std::collections::BTreeMap<String, String> {
    let Some(vars) = file.raw["header"]["chat_metadata"]["variables"].as_object() else { return Default::default() };
    vars.iter()
        .filter(|(name, _)| !name.trim().is_empty())
        .take(crate::prompting::macros::MAX_VARIABLES)
        .map(|(name, v)| (name.clone(), v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())))
        .collect()
}

/// Write a chat as a SillyTavern chat file.
pub fn render(chat: &ExportChat<'_>) -> String {
    let mut lines: Vec<Value> = Vec::new();
    let stored_header = chat.raw.and_then(|r| r.get("header")).filter(|h| h.is_object()).cloned();
    let mut header = stored_header.unwrap_or_else(|| {
        json!({ "user_name": chat.user_name, "character_name": chat.character_name, "create_date": chat.created, "chat_metadata": {} })
    });
    if !chat.variables.is_empty() {
        if !header.get("chat_metadata").is_some_and(Value::is_object) {
            header["chat_metadata"] = json!({});
        }
        // A value that came in as JSON (a number, as SillyTavern's `incvar` keeps one,
        // `true`, a list) goes out as it came; text stays text.
        let values: serde_json::Map<String, Value> = chat
            .variables
            .iter()
            .map(|(name, v)| {
                let as_json = serde_json::from_str::<Value>(v).ok().filter(|j| !j.is_string() && j.to_string() == *v);
                (name.clone(), as_json.unwrap_or_else(|| json!(v)))
            })
            .collect();
        header["chat_metadata"]["variables"] = Value::Object(values);
    }
    // The note as it is now, not as the file came in (one removed here is no longer
    // SillyTavern's either); a header whose note is unchanged goes out as it came.
    let as_read = super::model::AuthorNote::from_chat_metadata(&header["chat_metadata"]);
    if as_read.as_ref() != chat.author_note {
        if !header.get("chat_metadata").is_some_and(Value::is_object) {
            header["chat_metadata"] = json!({});
        }
        let keys = chat.author_note.cloned().unwrap_or_default().to_chat_metadata();
        for (k, v) in keys {
            header["chat_metadata"][k] = v;
        }
    }
    lines.push(header);
    match chat.raw.and_then(|r| r.get("opening")).and_then(Value::as_array) {
        Some(opening) => lines.extend(opening.iter().cloned()),
        None => {
            if let Some((all, chosen)) = chat.greeting.filter(|(all, _)| !all.is_empty()) {
                let chosen = chosen.min(all.len() as u32 - 1);
                lines.push(json!({
                    "name": chat.character_name, "is_user": false, "is_system": false, "send_date": chat.created,
                    "mes": all[chosen as usize], "swipes": all, "swipe_id": chosen, "extra": {}
                }));
            }
        }
    }
    for e in &chat.exchanges {
        let stored = |key: &str| e.raw.and_then(|r| r.get(key)).filter(|v| v.is_object()).cloned();
        if let Some(before) = e.raw.and_then(|r| r.get("before")).and_then(Value::as_array) {
            lines.extend(before.iter().cloned());
        }
        let mut user = stored("user")
            .unwrap_or_else(|| json!({ "name": e.user_name.unwrap_or(chat.user_name), "is_user": true, "is_system": false, "send_date": e.at, "mes": "", "extra": {} }));
        user["mes"] = Value::String(e.user_text.to_string());
        lines.push(user);
        let mut reply = stored("reply").unwrap_or_else(|| {
            json!({ "name": chat.character_name, "is_user": false, "is_system": false, "send_date": e.at, "mes": "", "extra": {} })
        });
        reply["mes"] = Value::String(e.reply.to_string());
        let had_swipes = reply.get("swipes").is_some();
        if had_swipes || e.swipes.len() > 1 {
            reply["swipes"] = json!(e.swipes);
            reply["swipe_id"] = json!(e.swipe);
        }
        lines.push(reply);
        if let Some(after) = e.raw.and_then(|r| r.get("after")).and_then(Value::as_array) {
            lines.extend(after.iter().cloned());
        }
    }
    let mut out = String::new();
    for line in lines {
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::model::send_date;
    use super::*;

    /// A chat as SillyTavern writes one: a header, a greeting with alternates, two
    /// exchanges (the second with swipes), a system note and an unanswered message.
    const FILE: &str = r#"{"user_name":"Tamsin","character_name":"Maren Vosk","create_date":"2026-11-20@18h02m11s","chat_metadata":{"note_prompt":"","objective":{"goal":"cross"}}}
{"name":"Maren Vosk","is_user":false,"is_system":false,"send_date":"November 20, 2026 6:02pm","mes":"Lock's closed.","swipes":["Lock's closed.","Who goes there?"],"swipe_id":0,"extra":{}}
{"name":"Tamsin","is_user":true,"is_system":false,"send_date":"November 20, 2026 6:03pm","mes":"Open it, please.","extra":{"bias":""}}
{"name":"Maren Vosk","is_user":false,"is_system":false,"send_date":"November 20, 2026 6:03pm","mes":"Not after dark.","extra":{"api":"openai","model":"x"},"gen_started":"2026-11-20T18:03:01.000Z"}
{"name":"Tamsin","is_user":true,"is_system":false,"send_date":"2026-11-20T18:04:00.000Z","mes":"I have a coin.","extra":{}}
{"name":"Maren Vosk","is_user":false,"is_system":false,"send_date":1795716300000,"mes":"A coin, then.","swipes":["Keep it.","A coin, then."],"swipe_id":1,"swipe_info":[{},{}],"extra":{}}
{"name":"System","is_user":false,"is_system":true,"send_date":"","mes":"Tamsin crossed the lock.","extra":{"type":"narrator"}}
{"name":"Tamsin","is_user":true,"is_system":false,"send_date":"","mes":"Thank you.","extra":{}}
"#;

    #[test]
    fn a_file_reads_as_exchanges_with_the_rest_carried() {
        let file = parse(FILE).unwrap();
        assert_eq!(file.greeting.as_deref(), Some("Lock's closed."));
        assert_eq!(file.exchanges.len(), 2);
        let second = &file.exchanges[1];
        assert_eq!((second.user_text.as_str(), second.reply.as_str(), second.swipe), ("I have a coin.", "A coin, then.", 1));
        assert_eq!(second.swipes, ["Keep it.", "A coin, then."]);
        assert_eq!(file.exchanges[0].at.as_deref(), Some("2026-11-20T18:03:00Z"));
        assert_eq!(second.at.as_deref(), Some("2026-11-20T18:04:00Z"));
        assert_eq!(file.notes.len(), 2, "{:?}", file.notes);
        assert!(file.notes[0].starts_with("line 7: a hidden (system) message"), "{:?}", file.notes);
        assert!(file.notes[1].starts_with("line 8: the last user message has no reply"), "{:?}", file.notes);
    }

    /// Messages in a row before the first exchange go with it, before it; what came
    /// before the greeting stays before it; the file round-trips in its order.
    #[test]
    fn messages_before_the_first_exchange_keep_their_place() {
        let m = |name: &str, user: bool, system: bool, mes: &str| {
            json!({ "name": name, "is_user": user, "is_system": system, "send_date": "", "mes": mes, "extra": {} }).to_string()
        };
        let text = [
            json!({ "user_name": "Ash", "character_name": "Maren", "chat_metadata": {} }).to_string(),
            m("System", false, true, "HIDDEN"),
            m("Maren", false, false, "GREETING"),
            m("Ash", true, false, "FIRST"),
            m("Ash", true, false, "SECOND"),
            m("Maren", false, false, "REPLY"),
        ]
        .join("\n")
            + "\n";
        let file = parse(&text).unwrap();
        assert_eq!(file.greeting.as_deref(), Some("GREETING"));
        let opening: Vec<&str> = file.raw["opening"].as_array().unwrap().iter().map(|o| o["mes"].as_str().unwrap()).collect();
        assert_eq!(opening, ["HIDDEN", "GREETING"]);
        assert_eq!((file.exchanges[0].user_text.as_str(), file.exchanges[0].raw["before"][0]["mes"].as_str()), ("SECOND", Some("FIRST")));
        let e = &file.exchanges[0];
        let out = render(&ExportChat {
            user_name: "Ash",
            character_name: "Maren",
            raw: Some(&file.raw),
            greeting: None,
            created: "",
            exchanges: vec![ExportExchange { user_text: &e.user_text, user_name: None, reply: &e.reply, swipes: &e.swipes, swipe: e.swipe, at: "", raw: Some(&e.raw) }],
            variables: &Default::default(),
            author_note: None,
        });
        assert_eq!(out, text);
    }

    #[test]
    fn a_file_round_trips_object_for_object() {
        let file = parse(FILE).unwrap();
        let exchanges = file
            .exchanges
            .iter()
            .map(|e| ExportExchange { user_text: &e.user_text, user_name: None, reply: &e.reply, swipes: &e.swipes, swipe: e.swipe, at: "", raw: Some(&e.raw) })
            .collect();
        let out = render(&ExportChat {
            user_name: "Tamsin",
            character_name: "Maren Vosk",
            raw: Some(&file.raw),
            greeting: None,
            created: "",
            exchanges,
            variables: &Default::default(),
            author_note: None,
        });
        assert_eq!(out, FILE, "the same objects, in the same order, with the same keys");
    }

    #[test]
    fn chat_variables_go_out_as_they_came_in() {
        let vars: std::collections::BTreeMap<String, String> =
            [("n", "2"), ("flag", "true"), ("list", "[1,2]"), ("text", "hello"), ("none", "null"), ("padded", " 2")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let out = render(&ExportChat {
            user_name: "Tamsin",
            character_name: "Maren",
            raw: None,
            greeting: None,
            created: "",
            exchanges: Vec::new(),
            variables: &vars,
            author_note: None,
        });
        let header: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(
            header["chat_metadata"]["variables"],
            json!({ "n": 2, "flag": true, "list": [1, 2], "text": "hello", "none": null, "padded": " 2" })
        );
        let back = parse(&out).unwrap();
        assert_eq!(variables(&back), vars, "read back as the same text");
    }

    #[test]
    fn a_chat_made_here_is_written_as_sillytavern_reads_it() {
        let greetings = ["Hello.".to_string(), "Evening.".to_string()];
        let swipes = ["No.".to_string(), "Yes.".to_string()];
        let out = render(&ExportChat {
            user_name: "Tamsin",
            character_name: "Maren",
            raw: None,
            greeting: Some((&greetings, 1)),
            created: "2026-11-23T10:00:00Z",
            exchanges: vec![ExportExchange { user_text: "Open?", user_name: None, reply: "Yes.", swipes: &swipes, swipe: 1, at: "2026-11-23T10:01:00Z", raw: None }],
            variables: &Default::default(),
            author_note: None,
        });
        let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["character_name"], "Maren");
        assert_eq!((lines[1]["mes"].as_str(), lines[1]["swipe_id"].as_u64()), (Some("Evening."), Some(1)));
        assert_eq!(lines[2]["is_user"], true);
        assert_eq!(lines[3]["swipes"], json!(["No.", "Yes."]));
        // And it reads back as the same chat.
        let again = parse(&out).unwrap();
        assert_eq!(again.greeting.as_deref(), Some("Evening."));
        assert_eq!(again.exchanges[0].reply, "Yes.");
    }

    #[test]
    fn a_broken_line_is_named() {
        let broken = FILE.replace(r#""mes":"I have a coin.","#, r#""mes":"I have a coin.,"#);
        let e = parse(&broken).unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        let e = parse("{\"user_name\":\"a\"}\n[1,2]\n").unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (2, "not a JSON object"));
        let e = parse("{\"user_name\":\"a\"}\n{\"name\":\"x\",\"is_user\":true}\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(parse("").is_err());
        assert!(send_date(&json!("2026-11-23 @14h 08m 37s 123ms")).is_some_and(|t| t == "2026-11-23T14:08:37Z"));
    }

    #[test]
    fn every_send_date_form_sillytavern_writes_is_read() {
        let read = |v: Value| send_date(&v);
        assert_eq!(read(json!("November 24, 2026 7:03pm")).as_deref(), Some("2026-11-24T19:03:00Z"));
        assert_eq!(read(json!("November 4, 2026 11:03am")).as_deref(), Some("2026-11-04T11:03:00Z"));
        assert_eq!(read(json!("2026-11-24T19:03:05.123Z")).as_deref(), Some("2026-11-24T19:03:05Z"));
        assert_eq!(read(json!(1795716300000_i64)).as_deref(), Some("2026-11-26T18:05:00Z"));
        assert_eq!(read(json!("1795716300000")).as_deref(), Some("2026-11-26T18:05:00Z"));
        assert_eq!(read(json!("2026-11-24 @19h 03m 05s")).as_deref(), Some("2026-11-24T19:03:05Z"));
        assert_eq!(read(json!("")), None);
        assert_eq!(read(json!("yesterday")), None);
    }
}
