//! `[secrets] NAME = { env = "VAR" } | { file = "/path" }`: read host-side
//! each time a call needs one (a rotated key is picked up without a
//! restart). A [`Secret`] prints as its name; messages that might echo one
//! (a provider's error body) go through [`Secrets::redact`].

use cairn_types::model::SecretSource;
use std::collections::BTreeMap;

/// The host's secrets, by name.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    sources: BTreeMap<String, SecretSource>,
}

/// A secret's value. Its `Debug` and `Display` print the name only.
#[derive(Clone)]
pub struct Secret {
    name: String,
    value: String,
}

impl Secret {
    /// The value, for the one header that carries it.
    pub fn expose(&self) -> &str {
        &self.value
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({})", self.name)
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[secret {}]", self.name)
    }
}

/// A secret that could not be read (the message names it and its source,
/// never a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SecretError(pub String);

impl Secrets {
    /// Secrets from their config.
    pub fn new(sources: BTreeMap<String, SecretSource>) -> Self {
        Secrets { sources }
    }

    /// Read `name` now.
    pub fn resolve(&self, name: &str) -> Result<Secret, SecretError> {
        let source = self.sources.get(name).ok_or_else(|| {
            SecretError(format!("the secret {name:?} is not defined in [secrets]"))
        })?;
        let value = match source {
            SecretSource::Env(var) => std::env::var(var).map_err(|_| {
                SecretError(format!(
                    "the secret {name:?} reads the environment variable {var}, which is not set"
                ))
            })?,
            SecretSource::File(path) => std::fs::read_to_string(path)
                .map_err(|e| {
                    SecretError(format!(
                        "the secret {name:?} reads the file {path}: {}",
                        e.kind()
                    ))
                })?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        };
        if value.is_empty() {
            return Err(SecretError(format!("the secret {name:?} is empty")));
        }
        Ok(Secret {
            name: name.to_string(),
            value,
        })
    }

    /// `template` with each `{{secret:NAME}}` replaced by that secret's
    /// value (for a header or an environment variable the far side needs;
    /// the template is what gets written anywhere).
    pub fn expand(&self, template: &str) -> Result<String, SecretError> {
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(at) = rest.find("{{secret:") {
            out.push_str(&rest[..at]);
            let after = &rest[at + "{{secret:".len()..];
            let Some(end) = after.find("}}") else {
                return Err(SecretError(format!(
                    "{template:?} opens {{{{secret: without closing it"
                )));
            };
            out.push_str(self.resolve(after[..end].trim())?.expose());
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// `text` with every secret's current value replaced by its name (for
    /// messages made of what a far side said).
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for name in self.sources.keys() {
            if let Ok(secret) = self.resolve(name)
                && secret.value.len() >= 4
            {
                out = out.replace(&secret.value, &format!("[secret {name}]"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_prints_as_its_name_and_is_redacted_from_messages() {
        let dir = std::env::temp_dir().join(format!("cairn-secret-{}", std::process::id()));
        std::fs::write(&dir, "sk-test-0123456789\n").unwrap();
        let secrets = Secrets::new(BTreeMap::from([(
            "key".to_string(),
            SecretSource::File(dir.display().to_string()),
        )]));
        let s = secrets.resolve("key").unwrap();
        assert_eq!(s.expose(), "sk-test-0123456789");
        assert_eq!(format!("{s:?} {s}"), "Secret(key) [secret key]");
        assert_eq!(
            secrets.redact("bad key sk-test-0123456789!"),
            "bad key [secret key]!"
        );
        let missing = secrets.resolve("nope").unwrap_err();
        assert!(missing.0.contains("\"nope\""), "{missing}");
        std::fs::remove_file(&dir).unwrap();
    }
}
