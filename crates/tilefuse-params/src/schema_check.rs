//! Checks a JSON value against the JSON Schema that schemars derives from a
//! params struct. The schema is the single declaration of every field's
//! type and range: this check enforces it, the tuner samples from it, and
//! users read it. Only the keywords schemars emits for params are handled.
//! `required` is deliberately not checked: partial values are merged onto
//! defaults afterwards.

use serde_json::{Map, Value};

use crate::error::ParamsError;

/// Checks `value` against `schema`, resolving `$ref`s in `root`.
pub fn check(root: &Value, schema: &Value, value: &Value) -> Result<(), ParamsError> {
    let schema = resolve(root, schema);
    if let Some(branches) = schema.get("anyOf").or_else(|| schema.get("oneOf")) {
        let branches = branches.as_array().map(Vec::as_slice).unwrap_or_default();
        return match branches.iter().any(|b| check(root, b, value).is_ok()) {
            true => Ok(()),
            false => Err(mismatch(root, schema, value)),
        };
    }
    if !type_matches(schema, value)
        || schema
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.contains(value))
        || schema.get("const").is_some_and(|c| c != value)
        || out_of_range(schema, value)
    {
        return Err(mismatch(root, schema, value));
    }
    match value {
        Value::Object(fields) => check_object(root, schema, fields),
        Value::Array(items) => check_array(root, schema, items),
        _ => Ok(()),
    }
}

fn check_object(
    root: &Value,
    schema: &Value,
    fields: &Map<String, Value>,
) -> Result<(), ParamsError> {
    let props = schema.get("properties").and_then(Value::as_object);
    for (name, v) in fields {
        match props.and_then(|p| p.get(name)) {
            Some(field) => check(root, field, v).map_err(|e| e.within(name))?,
            None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                let known: Vec<&str> = props
                    .into_iter()
                    .flat_map(|p| p.keys())
                    .map(String::as_str)
                    .collect();
                return Err(ParamsError::new(
                    name.clone(),
                    format!("unknown field; expected one of {}", known.join(", ")),
                ));
            }
            None => {}
        }
    }
    Ok(())
}

fn check_array(root: &Value, schema: &Value, items: &[Value]) -> Result<(), ParamsError> {
    let len = items.len() as u64;
    let min = schema.get("minItems").and_then(Value::as_u64);
    let max = schema.get("maxItems").and_then(Value::as_u64);
    if min.is_some_and(|m| len < m) || max.is_some_and(|m| len > m) {
        return Err(ParamsError::new(
            "",
            format!("expected {}, got {len} items", describe(root, schema)),
        ));
    }
    if let Some(item) = schema.get("items") {
        for (i, v) in items.iter().enumerate() {
            check(root, item, v).map_err(|e| e.within(&format!("[{i}]")))?;
        }
    }
    Ok(())
}

fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix("#/$defs/")
            .and_then(|name| root.get("$defs")?.get(name))
            .map_or(schema, |s| resolve(root, s)),
        None => schema,
    }
}

fn types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    }
}

fn type_matches(schema: &Value, value: &Value) -> bool {
    let allowed = types(schema);
    allowed.is_empty()
        || allowed.iter().any(|t| match *t {
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "string" => value.is_string(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            "null" => value.is_null(),
            _ => false,
        })
}

fn out_of_range(schema: &Value, value: &Value) -> bool {
    let Some(x) = value.as_f64() else {
        return false;
    };
    schema
        .get("minimum")
        .and_then(Value::as_f64)
        .is_some_and(|m| x < m)
        || schema
            .get("maximum")
            .and_then(Value::as_f64)
            .is_some_and(|m| x > m)
}

fn mismatch(root: &Value, schema: &Value, value: &Value) -> ParamsError {
    ParamsError::new(
        "",
        format!("expected {}, got {}", describe(root, schema), show(value)),
    )
}

/// What a schema accepts, in words: `a positive integer`, `one of 1, 2, 4`.
pub fn describe(root: &Value, schema: &Value) -> String {
    let schema = resolve(root, schema);
    let join = |vs: &[Value]| vs.iter().map(show).collect::<Vec<_>>().join(", ");
    if let Some(branches) = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
    {
        let consts: Option<Vec<Value>> = branches
            .iter()
            .map(|b| resolve(root, b).get("const").cloned())
            .collect();
        return match consts {
            Some(cs) => format!("one of {}", join(&cs)),
            None => branches
                .iter()
                .map(|b| describe(root, b))
                .collect::<Vec<_>>()
                .join(" or "),
        };
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        return format!("one of {}", join(options));
    }
    let described: Vec<String> = types(schema)
        .into_iter()
        .map(|t| match t {
            "integer" => describe_integer(schema),
            "number" => "a number".into(),
            "boolean" => "a boolean".into(),
            "string" => "a string".into(),
            "object" => "an object".into(),
            "null" => "null".into(),
            "array" => match (schema.get("minItems"), schema.get("maxItems")) {
                (Some(a), Some(b)) if a == b => format!("a list of {a} items"),
                _ => "a list".into(),
            },
            other => other.to_owned(),
        })
        .collect();
    described.join(" or ")
}

fn describe_integer(schema: &Value) -> String {
    let min = schema.get("minimum").and_then(Value::as_i64);
    let max = schema.get("maximum").and_then(Value::as_i64);
    match (min, max) {
        (Some(1), None) => "a positive integer".into(),
        (Some(0), None) => "a non-negative integer".into(),
        (Some(a), Some(b)) => format!("an integer from {a} to {b}"),
        (Some(a), None) => format!("an integer >= {a}"),
        (None, Some(b)) => format!("an integer <= {b}"),
        (None, None) => "an integer".into(),
    }
}

/// A value as JSON, shortened: `"64"`, `-3`, `true`, `{"m": ...}`.
fn show(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}
