//! [`AgentEvent`]'s reading: internally tagged (`{"type": "text_delta", …}`),
//! which serde's derive reads by buffering the whole object first. Every
//! writer puts `type` first, so this reads the tag and then the variant's
//! fields straight from the input; an object whose tag comes later is
//! buffered as before. Same wire, same errors for unknown tags and fields.

use super::AgentEvent;
use serde::Deserialize;
use serde::de::{self, Deserializer, IntoDeserializer, MapAccess, Visitor};

const VARIANTS: &[&str] = super::AGENT_KINDS;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Text {
    text: String,
    #[serde(default)]
    by: Option<super::By>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCall {
    id: String,
    name: String,
    arguments: serde_json::Value,
    #[serde(default)]
    by: Option<super::By>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Progress {
    message: String,
    done: u64,
    #[serde(default)]
    total: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Retrying {
    attempt: u32,
    after_ms: u64,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Custom {
    name: String,
    data: serde_json::Value,
}

/// The variant `tag` names, its fields read by `fields`.
fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<AgentEvent, D::Error> {
    Ok(match tag {
        "text_delta" => {
            let Text { text, by } = Text::deserialize(fields)?;
            AgentEvent::TextDelta { text, by }
        }
        "reasoning_delta" => {
            let Text { text, by } = Text::deserialize(fields)?;
            AgentEvent::ReasoningDelta { text, by }
        }
        "tool_call" => {
            let ToolCall {
                id,
                name,
                arguments,
                by,
            } = ToolCall::deserialize(fields)?;
            AgentEvent::ToolCall {
                id,
                name,
                arguments,
                by,
            }
        }
        "progress" => {
            let Progress {
                message,
                done,
                total,
            } = Progress::deserialize(fields)?;
            AgentEvent::Progress {
                message,
                done,
                total,
            }
        }
        "retrying" => {
            let Retrying {
                attempt,
                after_ms,
                reason,
            } = Retrying::deserialize(fields)?;
            AgentEvent::Retrying {
                attempt,
                after_ms,
                reason,
            }
        }
        "custom" => {
            let Custom { name, data } = Custom::deserialize(fields)?;
            AgentEvent::Custom { name, data }
        }
        other => return Err(de::Error::unknown_variant(other, VARIANTS)),
    })
}

struct AgentVisitor;

impl<'de> Visitor<'de> for AgentVisitor {
    type Value = AgentEvent;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an agent event: an object with a \"type\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AgentEvent, A::Error> {
        let Some(first) = map.next_key::<std::borrow::Cow<'de, str>>()? else {
            return Err(de::Error::missing_field("type"));
        };
        if first == "type" {
            // The common case: the tag, then the fields as they come.
            let tag = map.next_value::<std::borrow::Cow<'de, str>>()?;
            return variant(&tag, de::value::MapAccessDeserializer::new(map));
        }
        // The tag comes later: buffer the object, take the tag out of it.
        let mut object = serde_json::Map::new();
        object.insert(first.into_owned(), map.next_value()?);
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value()?;
            if object.insert(key.clone(), value).is_some() {
                return Err(de::Error::custom(format!("duplicate field `{key}`")));
            }
        }
        let tag = match object.remove("type") {
            Some(serde_json::Value::String(tag)) => tag,
            Some(_) => return Err(de::Error::custom("\"type\" is not a string")),
            None => return Err(de::Error::missing_field("type")),
        };
        variant(&tag, serde_json::Value::Object(object).into_deserializer())
            .map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for AgentEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(AgentVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::AgentEvent;
    use serde_json::json;

    pub(super) fn samples() -> Vec<AgentEvent> {
        vec![
            AgentEvent::TextDelta {
                text: "a \"quoted\" \\ line\n".into(),
                by: None,
            },
            AgentEvent::TextDelta {
                text: "tok".into(),
                by: Some(super::super::By::Model),
            },
            AgentEvent::ReasoningDelta {
                text: "why".into(),
                by: None,
            },
            AgentEvent::ToolCall {
                id: "c1".into(),
                name: "search".into(),
                arguments: json!({"q": [1, {"type": "x"}]}),
                by: None,
            },
            AgentEvent::Progress {
                message: "m".into(),
                done: 3,
                total: Some(9),
            },
            AgentEvent::Progress {
                message: "m".into(),
                done: 3,
                total: None,
            },
            AgentEvent::Retrying {
                attempt: 2,
                after_ms: 500,
                reason: "429".into(),
            },
            AgentEvent::Custom {
                name: "n".into(),
                data: json!(null),
            },
        ]
    }

    #[test]
    fn every_variant_reads_back_from_bytes_and_from_a_value() {
        for event in samples() {
            let line = serde_json::to_string(&event).unwrap();
            assert!(line.starts_with("{\"type\":"), "{line}");
            assert_eq!(serde_json::from_str::<AgentEvent>(&line).unwrap(), event);
            let value = serde_json::to_value(&event).unwrap();
            assert_eq!(serde_json::from_value::<AgentEvent>(value).unwrap(), event);
        }
    }

    #[test]
    fn a_tag_that_comes_last_reads_the_same() {
        let e: AgentEvent = serde_json::from_str(r#"{"text":"hi","type":"text_delta"}"#).unwrap();
        assert_eq!(
            e,
            AgentEvent::TextDelta {
                text: "hi".into(),
                by: None
            }
        );
        let e: AgentEvent =
            serde_json::from_str(r#"{"done":1,"message":"m","type":"progress"}"#).unwrap();
        assert_eq!(
            e,
            AgentEvent::Progress {
                message: "m".into(),
                done: 1,
                total: None
            }
        );
    }

    #[test]
    fn bad_objects_are_refused_by_name() {
        let err = |s: &str| {
            serde_json::from_str::<AgentEvent>(s)
                .unwrap_err()
                .to_string()
        };
        assert!(err(r#"{"type":"nope","text":"x"}"#).contains("unknown variant `nope`"));
        assert!(err(r#"{"text":"x","type":"nope"}"#).contains("unknown variant `nope`"));
        assert!(
            err(r#"{"type":"text_delta","text":"x","extra":1}"#).contains("unknown field `extra`")
        );
        assert!(
            err(r#"{"text":"x","extra":1,"type":"text_delta"}"#).contains("unknown field `extra`")
        );
        assert!(err(r#"{"type":"text_delta"}"#).contains("missing field `text`"));
        assert!(err(r#"{"text":"x"}"#).contains("missing field `type`"));
        assert!(err(r#"{}"#).contains("missing field `type`"));
        assert!(err(r#"{"type":7,"text":"x"}"#).contains("invalid type"));
        assert!(err(r#"{"text":"x","type":7}"#).contains("\"type\" is not a string"));
        assert!(err(r#"[1]"#).contains("invalid type"));
    }
}

#[cfg(test)]
mod lines {
    use super::super::{LifecycleEvent, Payload, SessionEvent};
    use crate::ids::{RunId, SegmentId, Seq, SessionId};

    /// A line built around a payload's JSON is the line serde writes.
    #[test]
    fn a_line_around_its_payload_json_is_the_serialized_line() {
        let payloads = super::tests::samples()
            .into_iter()
            .map(Payload::Agent)
            .chain([Payload::Lifecycle(LifecycleEvent::DecisionTimedOut {
                decision_id: crate::ids::DecisionId::derive(&SessionId::new(), Seq(4)),
            })]);
        for (i, payload) in payloads.enumerate() {
            for run_id in [None, Some(RunId::new())] {
                let event = SessionEvent {
                    session_id: SessionId::parse("a.b:c@d+e=f_g-h").expect("a safe id"),
                    segment_id: SegmentId::new(),
                    run_id,
                    seq: Seq(i as u64 + 1),
                    at_ms: u64::MAX - i as u64,
                    payload: payload.clone(),
                    facts: None,
                    line: Default::default(),
                };
                let expected = event.clone().line().to_string();
                assert!(expected.starts_with(&serde_json::to_string(&event).unwrap()[..20]));
                let json = serde_json::to_string(&event.payload).unwrap();
                // The start one writer keeps for a run's emits, summed once.
                let summed = super::super::LinePrefix::new(
                    &event.session_id,
                    &event.segment_id,
                    event.run_id.as_ref(),
                );
                assert_eq!(summed.as_str(), event.line_prefix());
                // As an emit builds its line, around its payload's JSON.
                let built = super::super::emit_line(&summed, event.seq, event.at_ms, &json);
                assert_eq!(&*built, expected);
                // As the committer builds an entry's line, a delta's text
                // escaped straight into it.
                assert!(!event.has_line());
                assert_eq!(event.line_from_prefix(&summed), expected);
                assert!(event.has_line());
                super::super::check_line(expected.as_bytes()).unwrap();
                let parsed: SessionEvent = serde_json::from_str(&expected).unwrap();
                assert_eq!(parsed.line(), expected);
            }
        }
    }

    #[test]
    fn a_deltas_json_is_serdes_to_the_byte_and_within_the_same_bounds() {
        use super::super::{AgentEvent, By};
        let texts = [
            String::new(),
            "a typical short text delta".to_string(),
            "quotes \" and \\ backslashes, / slashes".to_string(),
            "controls \u{0} \u{1} \u{1f} \t \n \r \u{7f}".to_string(),
            "unicode: é 漢字 🦀 \u{2028} \u{2029}".to_string(),
            "\u{1}".repeat(40),
            "x".repeat(5000),
            (0u8..0x20).chain([0x7f]).map(char::from).collect(),
            "é\"漢\\🦀\n\"\"\\".to_string(),
        ];
        for text in &texts {
            for payload in [
                Payload::Agent(AgentEvent::TextDelta {
                    text: text.clone(),
                    by: None,
                }),
                Payload::Agent(AgentEvent::ReasoningDelta {
                    text: text.clone(),
                    by: None,
                }),
                Payload::Agent(AgentEvent::TextDelta {
                    text: text.clone(),
                    by: Some(By::Model),
                }),
            ] {
                let serde = serde_json::to_string(&payload).unwrap();
                let len = serde.len() as u64;
                // Roomy, exact, one short, and the bounds around the fast
                // path's own (six bytes a text byte, and 64 around).
                let fast_bound = text.len() as u64 * 6 + 64;
                for max in [
                    u64::MAX,
                    len,
                    len.saturating_sub(1),
                    fast_bound,
                    fast_bound - 1,
                    0,
                ] {
                    assert_eq!(
                        payload.json_within(max),
                        crate::json::json_within(&payload, max),
                        "{serde} within {max}"
                    );
                    // Measured, a delta's JSON is counted to the byte.
                    assert_eq!(
                        payload.measure(max).map(|m| m.len()),
                        crate::json::json_within(&payload, max).map(|j| j.len() as u64),
                        "{serde} measured within {max}"
                    );
                }
                assert_eq!(payload.json_within(u64::MAX).unwrap(), serde);
                let counted = matches!(
                    payload.measure(u64::MAX),
                    Ok(super::super::Measured::Counted(_))
                );
                let by = matches!(
                    payload,
                    Payload::Agent(AgentEvent::TextDelta { by: Some(_), .. })
                );
                assert_eq!(counted, !by, "only a delta without `by` is counted");
            }
        }
    }
}
