//! How a packet is kept in the library: each block as a span of the message it was cut
//! from, not a second copy of its text.
//!
//! Why: every block of a [`Packet`] is a piece of its messages (`packet::assemble` cuts
//! them out of the rendered prompt), and the outer block holds the inner ones again, so
//! a packet stored whole held its prompt two to three times over — ~69 KB per exchange,
//! ~70 MB for a 2,000-message chat. Stored, a block keeps `span: [message, start, end]`
//! (byte offsets into that message's `content`) in place of `text`; reading puts the
//! text back, so every reader (history with packets, the inspector, exports, a saved
//! chat switched back to) gets the packet as it was sent. A block whose text is not
//! found in a message keeps its text. Rows written before this shape (migration 0035
//! rewrites them; a row it could not read is left alone) are read as they are.

use super::model::Packet;
use crate::store::StoreError;
use serde_json::Value;

/// The packet as stored: JSON with its blocks as spans of its messages.
pub fn to_stored(packet: &Packet) -> Result<Value, StoreError> {
    let mut value = serde_json::to_value(packet).map_err(|e| StoreError::Corrupt(format!("cannot encode a packet: {e}")))?;
    let spans: Vec<Option<[usize; 3]>> = packet.blocks.iter().map(|b| span_of(packet, &b.text)).collect();
    if let Some(blocks) = value.get_mut("blocks").and_then(Value::as_array_mut) {
        for (block, span) in blocks.iter_mut().zip(spans) {
            if let (Some(object), Some(span)) = (block.as_object_mut(), span) {
                object.remove("text");
                object.insert("span".into(), span.iter().copied().collect());
            }
        }
    }
    Ok(value)
}

/// [`to_stored`] as text, for a row.
pub fn to_stored_json(packet: &Packet) -> Result<String, StoreError> {
    Ok(to_stored(packet)?.to_string())
}

/// The packet from its stored JSON, in either shape (spans, or blocks with their text).
pub fn from_stored(mut value: Value) -> Result<Packet, String> {
    restore_texts(&mut value)?;
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// [`from_stored`] from a row's text.
pub fn from_stored_json(text: &str) -> Result<Packet, String> {
    from_stored(serde_json::from_str(text).map_err(|e| e.to_string())?)
}

/// Where `text` first occurs in the packet's messages: `[message, start, end]`.
fn span_of(packet: &Packet, text: &str) -> Option<[usize; 3]> {
    if text.is_empty() {
        return None;
    }
    packet.messages.iter().enumerate().find_map(|(i, m)| m.content.find(text).map(|start| [i, start, start + text.len()]))
}

/// Put each spanned block's text back, in place (a packet inside a larger document).
pub fn restore_texts(packet: &mut Value) -> Result<(), String> {
    let contents: Vec<String> = packet
        .get("messages")
        .and_then(Value::as_array)
        .map(|ms| ms.iter().map(|m| m.get("content").and_then(Value::as_str).unwrap_or_default().to_string()).collect())
        .unwrap_or_default();
    let Some(blocks) = packet.get_mut("blocks").and_then(Value::as_array_mut) else { return Ok(()) };
    for block in blocks.iter_mut().filter_map(Value::as_object_mut) {
        if block.contains_key("text") {
            continue;
        }
        let Some(span) = block.remove("span") else { continue };
        let numbers: Vec<usize> = span.as_array().map(|a| a.iter().filter_map(Value::as_u64).map(|n| n as usize).collect()).unwrap_or_default();
        let text = match numbers.as_slice() {
            [m, start, end] => contents.get(*m).and_then(|c| c.get(*start..*end)),
            _ => None,
        };
        let Some(text) = text else { return Err(format!("a block's span {span} is outside its packet's messages")) };
        block.insert("text".into(), Value::String(text.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::companion::model::PacketBlock;
    use crate::llm::ChatMessage;

    fn block(tag: &str, text: &str) -> PacketBlock {
        PacketBlock { tag: tag.into(), text: text.into(), tokens: 3, budget: Some(10), content_tokens: None, dropped: Vec::new() }
    }

    fn packet() -> Packet {
        let system = "<system_directive>\nBe Ilse, ü and 漢字.\n<lore>\n- bells\n</lore>\n</system_directive>\n<temporal_data>\nnow\n</temporal_data>";
        let user = "<chat_history>\n(no earlier messages)\n</chat_history>\n\n<user_input>\nhi\n</user_input>";
        Packet {
            messages: vec![ChatMessage::system(system), ChatMessage::user(user)],
            blocks: vec![
                block("system_directive", "<system_directive>\nBe Ilse, ü and 漢字.\n<lore>\n- bells\n</lore>\n</system_directive>"),
                block("lore", "<lore>\n- bells\n</lore>"),
                block("temporal_data", "<temporal_data>\nnow\n</temporal_data>"),
                block("user_input", "<user_input>\nhi\n</user_input>"),
                // Not a piece of any message: kept as it is.
                block("odd", "<odd>elsewhere</odd>"),
            ],
            notes: vec!["a note".into()],
            tokens: 40,
            max_context_tokens: 8192,
            reply_tokens: 300,
        }
    }

    #[test]
    fn a_stored_packet_holds_each_block_once_and_reads_back_the_same() {
        let packet = packet();
        let stored = to_stored_json(&packet).unwrap();
        let whole = serde_json::to_string(&packet).unwrap();
        assert!(stored.len() < whole.len() - 100, "{} vs {}", stored.len(), whole.len());
        assert_eq!(stored.matches("- bells").count(), 1, "{stored}");
        assert!(stored.contains("elsewhere"), "a block not found in the messages keeps its text");
        assert_eq!(from_stored_json(&stored).unwrap(), packet);
        // The shape stored before: read as it is.
        assert_eq!(from_stored_json(&whole).unwrap(), packet);
    }

    #[test]
    fn a_span_outside_its_messages_is_an_error_not_a_panic() {
        let mut value = to_stored(&packet()).unwrap();
        value["blocks"][0]["span"] = serde_json::json!([0, 5, 999_999]);
        assert!(from_stored(value.clone()).is_err());
        // Inside a character (ü is two bytes).
        let system = &packet().messages[0].content;
        let inside = system.find('ü').unwrap() + 1;
        value["blocks"][0]["span"] = serde_json::json!([0, 0, inside]);
        assert!(from_stored(value.clone()).is_err());
        value["blocks"][0]["span"] = serde_json::json!([7, 0, 1]);
        assert!(from_stored(value).is_err());
    }
}
