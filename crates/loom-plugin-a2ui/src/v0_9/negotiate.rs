//! Which protocol version a renderer session speaks, from what the renderer announces: its
//! capabilities document (`{"v1.0": {...}}`, `{"v0.9": {...}}`) or the names it offers in the
//! transport's handshake (a WebSocket subprotocol such as `a2ui.v0.9`).

use serde_json::Value;
use thiserror::Error;

/// The WebSocket subprotocol naming A2UI v1.0.
pub const SUBPROTOCOL_V1_0: &str = "a2ui.v1.0";
/// The WebSocket subprotocol naming A2UI v0.9.
pub const SUBPROTOCOL_V0_9: &str = "a2ui.v0.9";

/// An A2UI protocol version a session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProtocolVersion {
    /// v1.0, as `a2ui-core` 0.4.0 accepts it (the default).
    #[default]
    V1_0,
    /// v0.9, as its published schemas and `@a2ui/lit` 0.11 accept it.
    V0_9,
}

/// What a renderer announced names no version this agent speaks.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NegotiationError {
    /// The capabilities are not an object keyed by version.
    #[error(
        "the renderer's capabilities must be an object keyed by protocol version, found {found}"
    )]
    NotAnObject {
        /// The JSON type found.
        found: &'static str,
    },
    /// None of the versions offered is one this agent speaks.
    #[error("the renderer offers {offered:?}; this agent speaks \"v1.0\" and \"v0.9\"")]
    NoCommonVersion {
        /// What the renderer offered.
        offered: Vec<String>,
    },
}

impl ProtocolVersion {
    /// The `version` its messages carry.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1_0 => crate::wire::PROTOCOL_VERSION,
            Self::V0_9 => super::PROTOCOL_VERSION_V0_9,
        }
    }

    /// The WebSocket subprotocol naming it.
    pub fn subprotocol(self) -> &'static str {
        match self {
            Self::V1_0 => SUBPROTOCOL_V1_0,
            Self::V0_9 => SUBPROTOCOL_V0_9,
        }
    }

    /// The version for a renderer's capabilities document: v1.0 when it has a `v1.0` entry,
    /// else v0.9 when it has `v0.9` (or `v0.9.1`, whose messages v0.9 messages are).
    pub fn from_capabilities(capabilities: &Value) -> Result<Self, NegotiationError> {
        let Value::Object(map) = capabilities else {
            return Err(NegotiationError::NotAnObject {
                found: json_type(capabilities),
            });
        };
        Self::choose(map.keys().map(String::as_str))
    }

    /// The catalogs a renderer's capabilities document lists for this version
    /// (`{"v1.0": {"supportedCatalogIds": [...]}}`; for v0.9 the first `v0.9*` entry), or
    /// `None` when it lists none or the list is not an array of strings. The renderer's
    /// `inlineCatalogs` are not read: this agent accepts none.
    pub fn supported_catalogs(self, capabilities: &Value) -> Option<Vec<String>> {
        let Value::Object(map) = capabilities else {
            return None;
        };
        let entry = match self {
            Self::V1_0 => map.get("v1.0"),
            Self::V0_9 => ["v0.9", "v0.9.1"].iter().find_map(|key| map.get(*key)),
        }?;
        entry
            .get("supportedCatalogIds")?
            .as_array()?
            .iter()
            .map(|id| id.as_str().map(str::to_owned))
            .collect()
    }

    /// The version for the names a renderer offers in a handshake, in any order: the
    /// subprotocols `a2ui.v1.0` and `a2ui.v0.9`, or the bare versions `v1.0`, `v0.9`,
    /// `v0.9.1`. v1.0 wins when both are offered.
    pub fn from_offered<'a>(
        offered: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, NegotiationError> {
        Self::choose(offered)
    }

    fn choose<'a>(offered: impl IntoIterator<Item = &'a str>) -> Result<Self, NegotiationError> {
        let mut seen = Vec::new();
        let mut best: Option<Self> = None;
        for name in offered {
            let name = name.trim();
            let version = match name {
                "v1.0" | SUBPROTOCOL_V1_0 => Some(Self::V1_0),
                "v0.9" | "v0.9.1" | SUBPROTOCOL_V0_9 | "a2ui.v0.9.1" => Some(Self::V0_9),
                _ => None,
            };
            match (version, best) {
                (Some(Self::V1_0), _) => best = Some(Self::V1_0),
                (Some(Self::V0_9), None) => best = Some(Self::V0_9),
                _ => {}
            }
            seen.push(name.to_owned());
        }
        best.ok_or(NegotiationError::NoCommonVersion { offered: seen })
    }
}

impl std::fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn capabilities_choose_v1_0_over_v0_9_and_refuse_what_names_neither() {
        let both =
            json!({"v0.9": {"supportedCatalogIds": []}, "v1.0": {"supportedCatalogIds": []}});
        assert_eq!(
            ProtocolVersion::from_capabilities(&both),
            Ok(ProtocolVersion::V1_0)
        );
        let lit = json!({"v0.9": {"supportedCatalogIds": ["https://a2ui.org/specification/v0_9/catalogs/basic/catalog.json"]}});
        assert_eq!(
            ProtocolVersion::from_capabilities(&lit),
            Ok(ProtocolVersion::V0_9)
        );
        let later = json!({"v0.9.1": {"supportedCatalogIds": []}});
        assert_eq!(
            ProtocolVersion::from_capabilities(&later),
            Ok(ProtocolVersion::V0_9)
        );
        assert_eq!(
            ProtocolVersion::from_capabilities(&json!({"v0.8": {}})),
            Err(NegotiationError::NoCommonVersion {
                offered: vec!["v0.8".into()]
            })
        );
        assert_eq!(
            ProtocolVersion::from_capabilities(&json!(["v0.9"])),
            Err(NegotiationError::NotAnObject { found: "an array" })
        );
        assert!(ProtocolVersion::from_capabilities(&json!({})).is_err());
    }

    #[test]
    fn supported_catalogs_are_read_for_the_version_and_nothing_for_a_malformed_list() {
        let caps = json!({
            "v1.0": {"supportedCatalogIds": ["a", "b"]},
            "v0.9": {"supportedCatalogIds": ["c"]},
        });
        assert_eq!(
            ProtocolVersion::V1_0.supported_catalogs(&caps),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(
            ProtocolVersion::V0_9.supported_catalogs(&caps),
            Some(vec!["c".to_owned()])
        );
        for malformed in [
            json!({"v1.0": {}}),
            json!({"v1.0": {"supportedCatalogIds": "a"}}),
            json!({"v1.0": {"supportedCatalogIds": ["a", 1]}}),
            json!({"v1.0": []}),
            json!("v1.0"),
        ] {
            assert_eq!(ProtocolVersion::V1_0.supported_catalogs(&malformed), None);
        }
    }

    #[test]
    fn subprotocols_choose_v1_0_over_v0_9_in_any_order() {
        assert_eq!(
            ProtocolVersion::from_offered(["a2ui.v0.9", "a2ui.v1.0"]),
            Ok(ProtocolVersion::V1_0)
        );
        assert_eq!(
            ProtocolVersion::from_offered([" a2ui.v0.9"]),
            Ok(ProtocolVersion::V0_9)
        );
        assert!(ProtocolVersion::from_offered(["chat", ""]).is_err());
    }
}
