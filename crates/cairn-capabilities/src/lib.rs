//! The capabilities a cairn host provides to controllers, each a
//! [`cairn_component::Capability`] registered with
//! `Runtime::builder(config).capability(...)`. The runtime journals and
//! replays every call; a capability only does it live.
//!
//! - [`model::ModelCapability`]: `cairn:model/chat@0.1.0` over
//!   OpenAI-compatible chat completions and the Anthropic Messages API.
//! - [`webhook::WebhookCapability`]: decisions nobody present can answer,
//!   POSTed signed to a workspace's webhook.
//! - [`tools::ToolsCapability`]: `cairn:tools/mcp@0.1.0`, the tools of MCP
//!   servers, kept warm per session.
//! - [`http::HttpCapability`]: outgoing HTTP (`wasi:http`), gated by a
//!   workspace's `allowed_outbound_hosts`, secrets only as header templates.
//! - [`secrets::Secrets`]: `[secrets]` resolved host-side when a call needs
//!   one; a value never reaches a guest, a journal or a message.

#![deny(missing_docs)]

pub mod http;
pub mod model;
pub mod secrets;
pub mod tools;
pub mod webhook;
