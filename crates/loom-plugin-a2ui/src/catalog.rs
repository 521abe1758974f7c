//! Catalogs: the components and functions a surface may use, with their JSON Schemas, compiled
//! once into checks for outgoing components and incoming function results.
//!
//! A catalog serializes to a v1.0 catalog document (`"protocolVersion": "1.0"`, `functions` a
//! map from name to call schema carrying `returnType` and `allowedCallers`) that the reference
//! SDK loads with `Catalog.from_json`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use thiserror::Error;

/// The `$id` of the v1.0 common types, which component schemas refer to.
pub const COMMON_TYPES_ID: &str = "https://a2ui.org/specification/v1_0/common_types.json";
/// The placeholder the agent-to-renderer schema resolves `anyComponent` and `anyFunction` in.
pub const CATALOG_PLACEHOLDER_ID: &str = "https://a2ui.org/specification/v1_0/catalog.json";
/// The id of the v1.0 basic catalog (Text, Column, Row, List, Button come from it).
pub const BASIC_CATALOG_ID: &str =
    "https://a2ui.org/specification/v1_0/catalogs/basic/catalog.json";
/// The id of Loom's own small catalog (Badge), mixed in by per-component `catalogId`.
pub const LOOM_CATALOG_ID: &str = "urn:loom:a2ui:catalog:loom:v1";

const COMMON_TYPES: &str = include_str!("../schemas/common_types.json");
const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Who may call a catalog function (`allowedCallers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllowedCallers {
    /// Only the renderer itself (the v1.0 default): the agent may not call it.
    #[default]
    RendererOnly,
    /// Only the agent.
    AgentOnly,
    /// Either.
    RendererOrAgent,
}

impl AllowedCallers {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RendererOnly => "rendererOnly",
            Self::AgentOnly => "agentOnly",
            Self::RendererOrAgent => "rendererOrAgent",
        }
    }

    /// Whether the agent (Loom) may call a function with these callers.
    pub fn agent_may_call(self) -> bool {
        !matches!(self, Self::RendererOnly)
    }
}

/// A catalog function: its arguments, what it returns and who may call it.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDef {
    name: String,
    description: Option<String>,
    args_schema: Value,
    return_type: String,
    return_schema: Value,
    allowed_callers: AllowedCallers,
    max_reply_bytes: Option<usize>,
}

/// Starts the definition of a catalog function called `name` (no arguments, returns anything,
/// `rendererOnly` until said otherwise).
pub fn define_function(name: impl Into<String>) -> FunctionDef {
    FunctionDef {
        name: name.into(),
        description: None,
        args_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        return_type: "any".into(),
        return_schema: json!({}),
        allowed_callers: AllowedCallers::RendererOnly,
        max_reply_bytes: None,
    }
}

impl FunctionDef {
    /// The JSON Schema of `args`.
    pub fn args(mut self, schema: Value) -> Self {
        self.args_schema = schema;
        self
    }

    /// What the function returns: the A2UI `returnType` (`string`, `number`, `boolean`,
    /// `array`, `object`, `any`, ...) and the JSON Schema a result is checked against.
    pub fn returns(mut self, return_type: impl Into<String>, schema: Value) -> Self {
        self.return_type = return_type.into();
        self.return_schema = schema;
        self
    }

    /// Who may call it.
    pub fn allowed_callers(mut self, callers: AllowedCallers) -> Self {
        self.allowed_callers = callers;
        self
    }

    /// The largest reply a renderer may send to a call of it, in bytes as sent (the whole
    /// `rendererFunctionResponse` or `error` message), tighter than the edge's
    /// [`Limits::max_reply_bytes`](crate::Limits::max_reply_bytes); larger is refused
    /// before anything is recorded. Not part of the catalog document.
    pub fn max_reply_bytes(mut self, bytes: usize) -> Self {
        self.max_reply_bytes = Some(bytes);
        self
    }

    /// The bound [`FunctionDef::max_reply_bytes`] set, if any.
    pub fn reply_bound(&self) -> Option<usize> {
        self.max_reply_bytes
    }

    /// A description for the catalog document.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Who may call it.
    pub fn callers(&self) -> AllowedCallers {
        self.allowed_callers
    }

    /// The A2UI `returnType` it declares (`string`, `number`, ..., `any`).
    pub fn return_type(&self) -> &str {
        &self.return_type
    }

    /// The JSON Schema results are checked against.
    pub fn return_schema(&self) -> &Value {
        &self.return_schema
    }

    /// The call schema as the catalog document writes it.
    pub fn to_document(&self) -> Value {
        let mut entry = json!({
            "type": "object",
            "properties": {
                "@call": {"const": self.name},
                "args": self.args_schema,
            },
            "required": ["@call"],
            "returnType": self.return_type,
            "allowedCallers": self.allowed_callers.as_str(),
        });
        if let (Some(text), Value::Object(map)) = (&self.description, &mut entry) {
            map.insert("description".into(), Value::String(text.clone()));
        }
        entry
    }
}

/// A catalog being defined: an id, components and functions.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogDef {
    catalog_id: String,
    title: Option<String>,
    components: BTreeMap<String, Value>,
    functions: BTreeMap<String, FunctionDef>,
}

/// Starts the definition of a catalog with this id.
pub fn define_catalog(catalog_id: impl Into<String>) -> CatalogDef {
    CatalogDef {
        catalog_id: catalog_id.into(),
        title: None,
        components: BTreeMap::new(),
        functions: BTreeMap::new(),
    }
}

impl CatalogDef {
    /// Adds a component type with the JSON Schema of its properties (including
    /// `"component": {"const": name}`; the common `id`, `catalogId`, `accessibility` and
    /// `metadata` are added by the wire).
    pub fn component(mut self, name: impl Into<String>, schema: Value) -> Self {
        self.components.insert(name.into(), schema);
        self
    }

    /// Adds a function.
    pub fn function(mut self, function: FunctionDef) -> Self {
        self.functions.insert(function.name.clone(), function);
        self
    }

    /// A title for the catalog document.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The catalog's id.
    pub fn id(&self) -> &str {
        &self.catalog_id
    }

    /// The v1.0 catalog document, loadable by the reference SDK's `Catalog.from_json`.
    pub fn to_document(&self) -> Value {
        let mut doc = Map::new();
        doc.insert("$schema".into(), Value::String(DRAFT_2020_12.into()));
        doc.insert("$id".into(), Value::String(self.catalog_id.clone()));
        doc.insert("catalogId".into(), Value::String(self.catalog_id.clone()));
        doc.insert("protocolVersion".into(), Value::String("1.0".into()));
        if let Some(title) = &self.title {
            doc.insert("title".into(), Value::String(title.clone()));
        }
        doc.insert(
            "components".into(),
            Value::Object(
                self.components
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
        );
        doc.insert(
            "functions".into(),
            Value::Object(
                self.functions
                    .iter()
                    .map(|(k, f)| (k.clone(), f.to_document()))
                    .collect(),
            ),
        );
        Value::Object(doc)
    }
}

/// A catalog set could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// Two catalogs have one id.
    #[error("catalog `{catalog_id}` is defined twice")]
    DuplicateCatalog {
        /// The catalog's id.
        catalog_id: String,
    },
    /// The default catalog is not in the set.
    #[error("the default catalog `{catalog_id}` is not in the set")]
    UnknownDefault {
        /// The catalog's id.
        catalog_id: String,
    },
    /// A name is not a UAX #31 identifier, as v1.0 requires.
    #[error("`{name}` in catalog `{catalog_id}` is not a UAX #31 identifier")]
    InvalidName {
        /// The catalog's id.
        catalog_id: String,
        /// The name refused.
        name: String,
    },
    /// A function's `returnType` is not one of A2UI v1.0's.
    #[error(
        "function `{name}` in catalog `{catalog_id}` returns `{return_type}`, which is none of {RETURN_TYPES:?}"
    )]
    UnknownReturnType {
        /// The catalog's id.
        catalog_id: String,
        /// The function's name.
        name: String,
        /// The `returnType` declared.
        return_type: String,
    },
    /// A schema does not compile.
    #[error("the schema of `{name}` in catalog `{catalog_id}` does not compile: {detail}")]
    InvalidSchema {
        /// The catalog's id.
        catalog_id: String,
        /// The function's name.
        name: String,
        /// What went wrong, in words.
        detail: String,
    },
}

/// An outgoing component refused by its catalog.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ComponentError {
    /// Not an object with string `id` and `component`.
    #[error("component #{index} is not an object with string `id` and `component`")]
    Malformed {
        /// The position of the component in the list.
        index: usize,
    },
    /// The id is not a UAX #31 identifier (`order_total`, not `order-total`).
    #[error("component id `{id}` is not a UAX #31 identifier")]
    InvalidId {
        /// The component id concerned.
        id: String,
    },
    /// Two components share an id.
    #[error("component id `{id}` is used twice")]
    DuplicateId {
        /// The component id concerned.
        id: String,
    },
    /// No component has id `root`.
    #[error("no component has id `root`")]
    NoRoot,
    /// The catalog named (or the surface's default) is not in the set.
    #[error("component `{id}` names catalog `{catalog_id}`, which the surface does not have")]
    UnknownCatalog {
        /// The component id concerned.
        id: String,
        /// The catalog it names.
        catalog_id: String,
    },
    /// The catalog does not define the component type.
    #[error("component `{id}`: catalog `{catalog_id}` has no component `{component}`")]
    UnknownComponent {
        /// The component id concerned.
        id: String,
        /// The catalog's id.
        catalog_id: String,
        /// The component's type name.
        component: String,
    },
    /// The component does not match its schema.
    #[error("component `{id}` ({component}) does not match its schema: {detail}")]
    Invalid {
        /// The component id concerned.
        id: String,
        /// The component's type name.
        component: String,
        /// What went wrong, in words.
        detail: String,
    },
}

/// Whether `name` is a UAX #31 identifier (`XID_Start | _` then `XID_Continue*`), as v1.0
/// requires of component ids and catalog names. Alphabetic / alphanumeric stand in for the
/// XID classes, which they contain for every character the wire is likely to carry.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c == '_' || c.is_alphabetic() => {}
        _ => return false,
    }
    chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// The `returnType`s A2UI v1.0 names.
pub const RETURN_TYPES: [&str; 8] = [
    "string",
    "number",
    "boolean",
    "array",
    "object",
    "validationResult",
    "any",
    "void",
];

/// Whether `value` is of the A2UI `return_type` (one of [`RETURN_TYPES`]).
fn fits_return_type(return_type: &str, value: &Value) -> bool {
    match return_type {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" | "validationResult" => value.is_object(),
        "void" => value.is_null(),
        _ => true,
    }
}

struct Compiled {
    def: CatalogDef,
    components: BTreeMap<String, jsonschema::Validator>,
    returns: BTreeMap<String, jsonschema::Validator>,
    args: BTreeMap<String, jsonschema::Validator>,
}

/// A compiled set of catalogs with a default: what a surface may use. Cheap to clone.
#[derive(Clone)]
pub struct Catalogs {
    inner: Arc<CatalogsInner>,
}

struct CatalogsInner {
    default_catalog: String,
    catalogs: BTreeMap<String, Compiled>,
}

impl fmt::Debug for Catalogs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Catalogs")
            .field("default", &self.inner.default_catalog)
            .field("catalogs", &self.inner.catalogs.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn first_errors(validator: &jsonschema::Validator, instance: &Value) -> Option<String> {
    let shown: Vec<String> = validator
        .iter_errors(instance)
        .take(3)
        .map(|e| {
            let at = e.instance_path().to_string();
            format!("at {}: {e}", if at.is_empty() { "/" } else { &at })
        })
        .collect();
    if shown.is_empty() {
        None
    } else {
        Some(shown.join("; "))
    }
}

impl Catalogs {
    /// Compiles `catalogs`, whose components and function calls default to `default_catalog`.
    pub fn new(
        default_catalog: impl Into<String>,
        catalogs: impl IntoIterator<Item = CatalogDef>,
    ) -> Result<Self, CatalogError> {
        let default_catalog = default_catalog.into();
        let defs: Vec<CatalogDef> = catalogs.into_iter().collect();
        let mut seen = BTreeMap::new();
        for def in &defs {
            if seen.insert(def.catalog_id.clone(), ()).is_some() {
                return Err(CatalogError::DuplicateCatalog {
                    catalog_id: def.catalog_id.clone(),
                });
            }
            for name in def.components.keys().chain(def.functions.keys()) {
                if !is_identifier(name) {
                    return Err(CatalogError::InvalidName {
                        catalog_id: def.catalog_id.clone(),
                        name: name.clone(),
                    });
                }
            }
        }
        if !seen.contains_key(&default_catalog) {
            return Err(CatalogError::UnknownDefault {
                catalog_id: default_catalog,
            });
        }
        let schema_error =
            |catalog_id: &str, name: &str, detail: String| CatalogError::InvalidSchema {
                catalog_id: catalog_id.to_owned(),
                name: name.to_owned(),
                detail,
            };
        let registry = registry_of(&defs, &default_catalog)?;
        let options = || jsonschema::options().with_registry(&registry);
        let mut compiled = BTreeMap::new();
        for def in defs {
            let mut components = BTreeMap::new();
            for name in def.components.keys() {
                let schema = json!({
                    "$schema": DRAFT_2020_12,
                    "allOf": [
                        {"$ref": format!("{COMMON_TYPES_ID}#/$defs/ComponentCommon")},
                        {"$ref": format!("{}#/components/{name}", def.catalog_id)},
                        {"properties": {"component": {"not": {"const": "Surface"}}}}
                    ],
                    "unevaluatedProperties": false
                });
                let validator = options()
                    .build(&schema)
                    .map_err(|err| schema_error(&def.catalog_id, name, err.to_string()))?;
                components.insert(name.clone(), validator);
            }
            let mut returns = BTreeMap::new();
            let mut args = BTreeMap::new();
            for (name, function) in &def.functions {
                if !RETURN_TYPES.contains(&function.return_type.as_str()) {
                    return Err(CatalogError::UnknownReturnType {
                        catalog_id: def.catalog_id.clone(),
                        name: name.clone(),
                        return_type: function.return_type.clone(),
                    });
                }
                let validator = options()
                    .build(&function.return_schema)
                    .map_err(|err| schema_error(&def.catalog_id, name, err.to_string()))?;
                returns.insert(name.clone(), validator);
                let validator = options()
                    .build(&function.args_schema)
                    .map_err(|err| schema_error(&def.catalog_id, name, err.to_string()))?;
                args.insert(name.clone(), validator);
            }
            compiled.insert(
                def.catalog_id.clone(),
                Compiled {
                    def,
                    components,
                    returns,
                    args,
                },
            );
        }
        Ok(Self {
            inner: Arc::new(CatalogsInner {
                default_catalog,
                catalogs: compiled,
            }),
        })
    }

    /// The default set: Text, Column, Row, List and Button from the v1.0 basic catalog (the
    /// surface default) and Badge from Loom's catalog, plus `extra` catalogs (for the functions
    /// a flow calls).
    pub fn default_with(extra: impl IntoIterator<Item = CatalogDef>) -> Result<Self, CatalogError> {
        let mut all = vec![basic_catalog(), loom_catalog()];
        all.extend(extra);
        Self::new(BASIC_CATALOG_ID, all)
    }

    /// The surface-level default catalog id.
    pub fn default_catalog(&self) -> &str {
        &self.inner.default_catalog
    }

    /// The catalog definitions, in id order.
    pub fn definitions(&self) -> impl Iterator<Item = &CatalogDef> + '_ {
        self.inner.catalogs.values().map(|c| &c.def)
    }

    /// The document the agent-to-renderer schema resolves `catalog.json` to: every component and
    /// function of the set (for checking whole messages).
    pub fn placeholder_document(&self) -> Value {
        let defs: Vec<CatalogDef> = self.definitions().cloned().collect();
        placeholder_document(&defs)
    }

    /// A function by catalog (the default when `None`) and name.
    pub fn function(&self, catalog_id: Option<&str>, name: &str) -> Option<&FunctionDef> {
        let catalog = catalog_id.unwrap_or(&self.inner.default_catalog);
        self.inner.catalogs.get(catalog)?.def.functions.get(name)
    }

    /// The tightest reply bound a function called `name` declares in any catalog
    /// ([`FunctionDef::max_reply_bytes`]).
    pub fn reply_bound(&self, name: &str) -> Option<usize> {
        self.inner
            .catalogs
            .values()
            .filter_map(|catalog| catalog.def.functions.get(name)?.max_reply_bytes)
            .min()
    }

    /// Checks a function result against the function's declared `returnType` and return
    /// schema; `Err` says how it fails. An unknown function fails.
    pub fn check_result(&self, catalog_id: &str, name: &str, result: &Value) -> Result<(), String> {
        let compiled = self.inner.catalogs.get(catalog_id);
        let (Some(validator), Some(function)) = (
            compiled.and_then(|c| c.returns.get(name)),
            compiled.and_then(|c| c.def.functions.get(name)),
        ) else {
            return Err(format!("catalog `{catalog_id}` has no function `{name}`"));
        };
        if !fits_return_type(&function.return_type, result) {
            return Err(format!(
                "the value is not of the declared returnType `{}`",
                function.return_type
            ));
        }
        match first_errors(validator, result) {
            None => Ok(()),
            Some(detail) => Err(detail),
        }
    }

    /// Checks a call's `args` against the function's declared args schema; `Err` says how they
    /// fail. An unknown function fails.
    pub fn check_args(
        &self,
        catalog_id: &str,
        name: &str,
        args: &serde_json::Map<String, Value>,
    ) -> Result<(), String> {
        let validator = self
            .inner
            .catalogs
            .get(catalog_id)
            .and_then(|c| c.args.get(name))
            .ok_or_else(|| format!("catalog `{catalog_id}` has no function `{name}`"))?;
        match first_errors(validator, &Value::Object(args.clone())) {
            None => Ok(()),
            Some(detail) => Err(detail),
        }
    }

    /// Checks a component list as `createSurface` / `updateComponents` carry it: each
    /// component against its catalog, ids UAX #31 and unique; `root` required when `needs_root`.
    pub fn check_components(
        &self,
        components: &[Value],
        needs_root: bool,
    ) -> Result<(), ComponentError> {
        let mut ids = std::collections::BTreeSet::new();
        for (index, component) in components.iter().enumerate() {
            let (Some(id), Some(kind)) = (
                component.get("id").and_then(Value::as_str),
                component.get("component").and_then(Value::as_str),
            ) else {
                return Err(ComponentError::Malformed { index });
            };
            if !is_identifier(id) {
                return Err(ComponentError::InvalidId { id: id.to_owned() });
            }
            if !ids.insert(id) {
                return Err(ComponentError::DuplicateId { id: id.to_owned() });
            }
            let catalog_id = match component.get("catalogId") {
                Some(Value::String(c)) => c.as_str(),
                _ => self.inner.default_catalog.as_str(),
            };
            let catalog = self.inner.catalogs.get(catalog_id).ok_or_else(|| {
                ComponentError::UnknownCatalog {
                    id: id.to_owned(),
                    catalog_id: catalog_id.to_owned(),
                }
            })?;
            let validator =
                catalog
                    .components
                    .get(kind)
                    .ok_or_else(|| ComponentError::UnknownComponent {
                        id: id.to_owned(),
                        catalog_id: catalog_id.to_owned(),
                        component: kind.to_owned(),
                    })?;
            if let Some(detail) = first_errors(validator, component) {
                return Err(ComponentError::Invalid {
                    id: id.to_owned(),
                    component: kind.to_owned(),
                    detail,
                });
            }
        }
        if needs_root && !ids.contains("root") {
            return Err(ComponentError::NoRoot);
        }
        Ok(())
    }
}

/// The schema registry of a catalog set: the common types, `catalog.json` resolved to every
/// component and function of the set, and each catalog's own document (errors name
/// `blamed_catalog` where no one catalog is at fault).
pub(crate) fn registry_of(
    defs: &[CatalogDef],
    blamed_catalog: &str,
) -> Result<jsonschema::Registry<'static>, CatalogError> {
    let schema_error = |catalog_id: &str, name: &str, detail: String| CatalogError::InvalidSchema {
        catalog_id: catalog_id.to_owned(),
        name: name.to_owned(),
        detail,
    };
    let common: Value = serde_json::from_str(COMMON_TYPES)
        .map_err(|err| schema_error(COMMON_TYPES_ID, "common_types", err.to_string()))?;
    let mut builder = jsonschema::Registry::new()
        .add(COMMON_TYPES_ID, common)
        .and_then(|b| b.add(CATALOG_PLACEHOLDER_ID, placeholder_document(defs)))
        .map_err(|err| schema_error(CATALOG_PLACEHOLDER_ID, "catalog", err.to_string()))?;
    for def in defs {
        builder = builder
            .add(&def.catalog_id, def.to_document())
            .map_err(|err| schema_error(&def.catalog_id, "catalog", err.to_string()))?;
    }
    builder
        .prepare()
        .map_err(|err| schema_error(blamed_catalog, "catalog", err.to_string()))
}

fn placeholder_document(defs: &[CatalogDef]) -> Value {
    let mut any_component = Vec::new();
    let mut any_function = Vec::new();
    let mut function_names = std::collections::BTreeSet::new();
    for def in defs {
        for name in def.components.keys() {
            any_component.push(json!({"$ref": format!("{}#/components/{name}", def.catalog_id)}));
        }
        for name in def.functions.keys() {
            // One entry per name: `oneOf` would refuse a call that two catalogs both match.
            if function_names.insert(name.clone()) {
                any_function.push(json!({"$ref": format!("{}#/functions/{name}", def.catalog_id)}));
            }
        }
    }
    if any_function.is_empty() {
        any_function.push(json!({"not": {}}));
    }
    json!({
        "$schema": DRAFT_2020_12,
        "$id": CATALOG_PLACEHOLDER_ID,
        "$defs": {
            "anyComponent": {"oneOf": any_component},
            "anyFunction": {"oneOf": any_function},
        }
    })
}

fn dynamic(kind: &str) -> Value {
    json!({"$ref": format!("{COMMON_TYPES_ID}#/$defs/{kind}")})
}

fn layout(name: &str, extra: Value) -> Value {
    let mut properties = json!({
        "component": {"const": name},
        "children": dynamic("ChildList"),
        "align": {"type": "string", "enum": ["start", "center", "end", "stretch"]},
        "weight": {"type": "number"},
    });
    if let (Value::Object(props), Value::Object(extra)) = (&mut properties, extra) {
        props.extend(extra);
    }
    json!({"type": "object", "properties": properties, "required": ["component", "children"]})
}

/// The part of the v1.0 basic catalog Loom uses: Text, Column, Row, List, Button (same id, same
/// schemas as the published catalog, `@`-bindings of the 0.4.0 common types).
pub fn basic_catalog() -> CatalogDef {
    let justify = json!({"type": "string", "enum": ["start", "center", "end", "spaceBetween", "spaceAround", "spaceEvenly", "stretch"]});
    define_catalog(BASIC_CATALOG_ID)
        .title("A2UI Basic Catalog (the part Loom uses)")
        .component(
            "Text",
            json!({"type": "object", "properties": {
                "component": {"const": "Text"},
                "text": dynamic("DynamicString"),
                "variant": {"type": "string", "enum": ["caption", "body"]},
                "weight": {"type": "number"}
            }, "required": ["component", "text"]}),
        )
        .component("Column", layout("Column", json!({"justify": justify.clone()})))
        .component("Row", layout("Row", json!({"justify": justify})))
        .component(
            "List",
            layout(
                "List",
                json!({"direction": {"type": "string", "enum": ["vertical", "horizontal"]}}),
            ),
        )
        .component(
            "Button",
            json!({"type": "object", "allOf": [dynamic("Checkable"), {"type": "object", "properties": {
                "component": {"const": "Button"},
                "child": dynamic("Child"),
                "variant": {"type": "string", "enum": ["default", "primary", "borderless"]},
                "action": dynamic("Action"),
                "weight": {"type": "number"}
            }, "required": ["component", "child", "action"]}]}),
        )
}

/// Loom's catalog: `Badge`, a short status label with a tone.
pub fn loom_catalog() -> CatalogDef {
    define_catalog(LOOM_CATALOG_ID)
        .title("Loom components")
        .component(
            "Badge",
            json!({"type": "object", "properties": {
                "component": {"const": "Badge"},
                "text": dynamic("DynamicString"),
                "tone": {"type": "string", "enum": ["neutral", "info", "success", "warning", "danger"]},
                "weight": {"type": "number"}
            }, "required": ["component", "text"]}),
        )
}
