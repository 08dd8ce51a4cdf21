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
//!
//! A secret is read host-side when a call needs it, and prints as its name:
//!
//! ```
//! use cairn_capabilities::secrets::Secrets;
//! use cairn_types::model::SecretSource;
//! use std::collections::BTreeMap;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("key");
//! std::fs::write(&path, "sk-example-0123\n")?;
//! let secrets = Secrets::new(BTreeMap::from([(
//!     "provider".to_string(),
//!     SecretSource::File(path.display().to_string()),
//! )]));
//! let key = secrets.resolve("provider")?;
//! assert_eq!(key.expose(), "sk-example-0123");
//! assert_eq!(format!("{key} {key:?}"), "[secret provider] Secret(provider)");
//! let header = secrets.expand("Bearer {{secret:provider}}")?;
//! assert_eq!(secrets.redact(&format!("provider said: bad {header}")), "provider said: bad Bearer [secret provider]");
//! assert!(secrets.resolve("missing").unwrap_err().to_string().contains("not defined"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod http;
pub mod model;
pub mod secrets;
pub mod tools;
pub mod webhook;
