//! Loading params from JSON values, the one path every front end (Rust,
//! Python dicts, JSON files, caches) goes through:
//!
//! 1. the value is checked against the struct's JSON Schema (types, ranges,
//!    unknown fields), so errors carry the full field path;
//! 2. it is merged onto the struct's defaults, so partial nested values are
//!    complete (`{"tile_sizes": {"cta_tile": {"m": 64}}}` keeps n and k);
//! 3. serde builds the struct, and its cross-field rules are checked.

use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::ParamsError;
use crate::schema_check::check;
use crate::version::PARAMS_VERSION;

/// A struct of the params format. Everything here is derived from the serde
/// and schemars declarations; implementors only add rules that span fields.
pub trait ParamsStruct: Serialize + DeserializeOwned + JsonSchema {
    /// The struct's name, as in the JSON Schema's `$defs` and in Python.
    const NAME: &'static str;
    /// For scheduler params, the `"scheduler"` tag that names them.
    const SCHEDULER: Option<&'static str> = None;

    /// The value missing fields are taken from; `None` when every field must
    /// be given.
    fn default_value() -> Option<Self>;

    /// Rules that span several fields (one tile dividing another, ...). The
    /// error path is relative to this struct.
    fn check_fields(&self) -> Result<(), ParamsError> {
        Ok(())
    }

    /// The JSON Schema of the struct, generated once.
    fn schema() -> &'static Value;

    /// Checks the schema and the cross-field rules.
    fn validate(&self) -> Result<(), ParamsError> {
        check(Self::schema(), Self::schema(), &self.to_value_untagged())?;
        self.check_fields()
    }

    /// Loads a possibly partial value (see the module docs).
    fn from_value(value: Value) -> Result<Self, ParamsError> {
        let mut value = value;
        if let (Some(tag), Value::Object(fields)) = (Self::SCHEDULER, &mut value) {
            match fields.remove("scheduler") {
                None => {}
                Some(Value::String(s)) if s == tag => {}
                Some(other) => {
                    return Err(ParamsError::new(
                        "scheduler",
                        format!("expected \"{tag}\" for {}, got {other}", Self::NAME),
                    ));
                }
            }
        }
        let schema = Self::schema();
        check(schema, schema, &value)?;
        if let Some(version) = value.get("version").and_then(Value::as_u64)
            && version > u64::from(PARAMS_VERSION)
        {
            return Err(ParamsError::new(
                "version",
                format!("{version} is newer than this tilefuse reads ({PARAMS_VERSION})"),
            ));
        }
        if let Some(default) = Self::default_value() {
            let mut merged = serde_json::to_value(default).expect("params serialize");
            merge(&mut merged, value);
            value = merged;
        }
        let parsed: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            ParamsError::new(
                if path == "." { String::new() } else { path },
                e.inner().to_string(),
            )
        })?;
        parsed.check_fields()?;
        Ok(parsed)
    }

    /// Parses JSON text; syntax errors name the line and column.
    fn from_json(text: &str) -> Result<Self, ParamsError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ParamsError::new("", format!("invalid JSON: {e}")))?;
        Self::from_value(value)
    }

    /// The value as JSON, with the `"scheduler"` tag for scheduler params.
    fn to_value(&self) -> Value {
        let mut value = self.to_value_untagged();
        if let (Some(tag), Value::Object(fields)) = (Self::SCHEDULER, &mut value) {
            let mut tagged = Map::new();
            tagged.insert("scheduler".into(), tag.into());
            tagged.extend(std::mem::take(fields));
            return Value::Object(tagged);
        }
        value
    }

    fn to_value_untagged(&self) -> Value {
        serde_json::to_value(self).expect("params serialize")
    }

    fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.to_value()).expect("params serialize")
    }
}

/// Overlays `patch` onto `base`: objects merge field by field, anything else
/// replaces.
fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (k, v) in patch {
                match base.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        base.insert(k, v);
                    }
                }
            }
        }
        (base, patch) => *base = patch,
    }
}

/// Generates a struct's schema once per process.
pub(crate) fn cached_schema<T: JsonSchema>(cell: &'static OnceLock<Value>) -> &'static Value {
    cell.get_or_init(|| schemars::schema_for!(T).to_value())
}

/// Implements [`ParamsStruct`] for a struct: its name, scheduler tag,
/// defaults and cross-field rules.
macro_rules! params_struct {
    ($ty:ty $(, scheduler = $tag:literal)? $(, default = $default:expr)? $(, check = $check:expr)?) => {
        impl $crate::convert::ParamsStruct for $ty {
            const NAME: &'static str = stringify!($ty);
            $(const SCHEDULER: Option<&'static str> = Some($tag);)?

            fn default_value() -> Option<Self> {
                None $(.or(Some($default)))?
            }

            $(fn check_fields(&self) -> Result<(), $crate::ParamsError> {
                ($check)(self)
            })?

            fn schema() -> &'static serde_json::Value {
                static SCHEMA: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
                $crate::convert::cached_schema::<$ty>(&SCHEMA)
            }
        }
    };
}
pub(crate) use params_struct;
