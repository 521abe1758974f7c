//! Function calls and their responses, as both directions carry them.

use serde_json::{Map, Value};

use super::envelope::insert_opt;
use super::reader::ObjectReader;
use super::{FunctionCall, FunctionError, FunctionOutcome, FunctionResponse, WireError};

impl FunctionCall {
    /// The wire form.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("@call".to_owned(), Value::String(self.name.clone()));
        insert_opt(&mut map, "catalogId", self.catalog_id.clone());
        insert_opt(&mut map, "args", self.args.clone().map(Value::Object));
        Value::Object(map)
    }

    pub(super) fn read(at: String, value: &Value) -> Result<Self, WireError> {
        let mut r = ObjectReader::new(at, value)?;
        let name = r.required_str("@call")?;
        let catalog_id = r.optional_str("catalogId")?;
        let args = r.optional_object("args")?;
        r.finish()?;
        Ok(Self {
            name,
            catalog_id,
            args,
        })
    }
}

impl FunctionResponse {
    /// The wire form of the response body.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert(
            "functionCallId".to_owned(),
            Value::String(self.function_call_id.clone()),
        );
        match &self.outcome {
            FunctionOutcome::Value(value) => {
                map.insert("value".to_owned(), value.clone());
            }
            FunctionOutcome::Error(error) => {
                let mut e = Map::new();
                e.insert("code".to_owned(), Value::String(error.code.clone()));
                e.insert("message".to_owned(), Value::String(error.message.clone()));
                map.insert("error".to_owned(), Value::Object(e));
            }
        }
        Value::Object(map)
    }

    pub(super) fn read(at: String, value: &Value) -> Result<Self, WireError> {
        let mut r = ObjectReader::new(at.clone(), value)?;
        let function_call_id = r.required_str("functionCallId")?;
        let result = r.optional("value");
        let error = r.optional("error");
        let outcome = match (result, error) {
            (Some(_), Some(_)) => {
                return Err(WireError::InvalidValue {
                    at: format!("{at}/error"),
                    detail: "a response carries `value` or `error`, not both".into(),
                });
            }
            (None, None) => {
                return Err(WireError::MissingField {
                    at: format!("{at}/value"),
                });
            }
            (Some(value), None) => FunctionOutcome::Value(value.clone()),
            (None, Some(error)) => {
                let mut e = ObjectReader::new(format!("{at}/error"), error)?;
                let code = e.required_str("code")?;
                let message = e.required_str("message")?;
                e.finish()?;
                FunctionOutcome::Error(FunctionError { code, message })
            }
        };
        r.finish()?;
        Ok(Self {
            function_call_id,
            outcome,
        })
    }
}
