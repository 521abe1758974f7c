//! JSON Schema checks on an effect's input and output, compiled once per definition. With the
//! `schemas` feature off, no schema can be given, so none is ever compiled or checked.

#[cfg(feature = "schemas")]
pub(crate) use compiled::SchemaCheck;
#[cfg(not(feature = "schemas"))]
pub(crate) use none::SchemaCheck;

#[cfg(feature = "schemas")]
mod compiled {
    use std::fmt;
    use std::sync::Arc;

    use serde_json::Value;

    use crate::error::DefinitionError;

    /// A compiled schema. The draft follows the schema's `$schema` (2020-12 when it names none).
    #[derive(Clone)]
    pub(crate) struct SchemaCheck {
        validator: Arc<jsonschema::Validator>,
    }

    impl fmt::Debug for SchemaCheck {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("SchemaCheck")
        }
    }

    impl SchemaCheck {
        pub(crate) fn compile(
            effect: &str,
            which: &'static str,
            schema: &Value,
        ) -> Result<Self, DefinitionError> {
            let validator = jsonschema::validator_for(schema).map_err(|err| {
                DefinitionError::InvalidSchema {
                    effect: effect.to_owned(),
                    which,
                    detail: err.to_string(),
                }
            })?;
            Ok(Self {
                validator: Arc::new(validator),
            })
        }

        /// `Err` names the first few violations with where they are, for the recorded error.
        pub(crate) fn check(&self, instance: &Value) -> Result<(), String> {
            const SHOWN: usize = 3;
            let mut errors = self.validator.iter_errors(instance).peekable();
            if errors.peek().is_none() {
                return Ok(());
            }
            let mut shown = Vec::new();
            let mut more = 0usize;
            for error in errors {
                if shown.len() < SHOWN {
                    let at = error.instance_path().to_string();
                    let at = if at.is_empty() { "/".to_owned() } else { at };
                    shown.push(format!("at {at}: {error}"));
                } else {
                    more += 1;
                }
            }
            let mut detail = shown.join("; ");
            if more > 0 {
                detail.push_str(&format!(" (and {more} more)"));
            }
            Err(detail)
        }
    }
}

#[cfg(not(feature = "schemas"))]
mod none {
    use serde_json::Value;

    /// No schema exists without the `schemas` feature: this type has no value.
    #[derive(Clone, Debug)]
    pub(crate) enum SchemaCheck {}

    impl SchemaCheck {
        pub(crate) fn check(&self, _instance: &Value) -> Result<(), String> {
            match *self {}
        }
    }
}
