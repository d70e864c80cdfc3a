//! Python objects ↔ `serde_json::Value`, the currency of the params format.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyMapping, PySequence, PyString};
use serde_json::{Map, Number, Value};

use crate::errors::params_error;

/// Params nest a few levels deep; anything deeper is a mistake, most often
/// a dict or list that contains itself.
const MAX_DEPTH: usize = 32;

/// Converts dicts, lists, tuples, str, int (and numpy integers), float,
/// bool and None. Non-finite floats become strings, so validation reports
/// them at their field path instead of here. Nesting deeper than
/// [`MAX_DEPTH`] (a cyclic dict, say) is a `ParamsError` at its path.
pub fn to_value(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    to_value_at(obj, &mut Vec::new())
}

fn to_value_at(obj: &Bound<'_, PyAny>, path: &mut Vec<String>) -> PyResult<Value> {
    if path.len() > MAX_DEPTH {
        return Err(params_error(
            obj.py(),
            &dotted(path),
            format!("nested deeper than {MAX_DEPTH} levels (does a dict or list contain itself?)"),
        ));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if obj.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(obj.extract()?));
    }
    if obj.is_instance_of::<PyInt>()
        || obj.hasattr("__index__")? && !obj.is_instance_of::<PyFloat>()
    {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        return match obj.extract::<u64>() {
            Ok(u) => Ok(Value::from(u)),
            Err(_) => Ok(Value::String(obj.str()?.to_string())),
        };
    }
    if obj.is_instance_of::<PyFloat>() {
        let x: f64 = obj.extract()?;
        return Ok(Number::from_f64(x).map_or_else(|| Value::String(x.to_string()), Value::Number));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if let Ok(map) = obj.cast::<PyMapping>() {
        let mut fields = Map::new();
        for item in map.items()?.iter() {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            let key = k.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "dict keys must be str, got {}",
                    k.repr().map_or("?".into(), |r| r.to_string())
                ))
            })?;
            let key = key.to_str()?.to_owned();
            path.push(key.clone());
            let value = to_value_at(&v, path)?;
            path.pop();
            fields.insert(key, value);
        }
        return Ok(Value::Object(fields));
    }
    if let Ok(seq) = obj.cast::<PySequence>() {
        return seq
            .try_iter()?
            .enumerate()
            .map(|(i, item)| {
                path.push(format!("[{i}]"));
                let value = to_value_at(&item?, path);
                path.pop();
                value
            })
            .collect();
    }
    Err(PyTypeError::new_err(format!(
        "cannot convert {} to JSON: expected dict, list, str, int, float, bool or None",
        obj.get_type().name()?
    )))
}

/// Converts back: objects become dicts (field order kept), arrays lists.
pub fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(fields) => {
            let dict = PyDict::new(py);
            for (k, v) in fields {
                dict.set_item(k, to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// `["launch", "[0]", "x"]` → `launch[0].x`.
fn dotted(path: &[String]) -> String {
    let mut out = String::new();
    for part in path {
        if !out.is_empty() && !part.starts_with('[') {
            out.push('.');
        }
        out.push_str(part);
    }
    out
}
