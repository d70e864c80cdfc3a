use std::collections::HashSet;

use proptest::prelude::*;
use proptest::test_runner::TestRng;
use serde_json::{Map, Value, json};
use tilefuse_params::{
    HeuristicParams, MatmulParams, PARAMS_VERSION, ParamsStruct, PointwiseParams, ReductionParams,
    structs,
};

/// Draws a value that the schema admits (cross-field rules aside), so the
/// property tests cover every declared field without a hand-written
/// generator per struct.
fn sample(root: &Value, schema: &Value, rng: &mut TestRng) -> Value {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => &root["$defs"][r.trim_start_matches("#/$defs/")],
        None => schema,
    };
    if let Some(branches) = schema
        .get("oneOf")
        .or(schema.get("anyOf"))
        .and_then(Value::as_array)
    {
        let pick = &branches[rng.random_range(0..branches.len())];
        return sample(root, pick, rng);
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        return options[rng.random_range(0..options.len())].clone();
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec!["object"],
    };
    match types[rng.random_range(0..types.len())] {
        "null" => Value::Null,
        "boolean" => Value::Bool(rng.random()),
        "integer" => {
            let lo = schema.get("minimum").and_then(Value::as_u64).unwrap_or(0);
            let hi = schema
                .get("maximum")
                .and_then(Value::as_u64)
                .unwrap_or(lo + 256)
                .min(lo + 256);
            // Mostly powers of two, like real tile sizes, so that draws often
            // pass the divisibility rules too.
            let pows: Vec<u64> = (0..12)
                .map(|e| 1 << e)
                .filter(|p| (lo..=hi).contains(p))
                .collect();
            match pows.is_empty() || rng.random_ratio(1, 4) {
                true => json!(rng.random_range(lo..=hi)),
                false => json!(pows[rng.random_range(0..pows.len())]),
            }
        }
        "string" => json!("x"),
        "array" => {
            let n = schema["minItems"].as_u64().unwrap_or(1) as usize;
            (0..n)
                .map(|_| sample(root, &schema["items"], rng))
                .collect()
        }
        _ => {
            let mut fields = Map::new();
            for (name, field) in schema["properties"].as_object().unwrap() {
                // Leave some fields out: they must take their defaults.
                if rng.random_ratio(3, 4) {
                    fields.insert(name.clone(), sample(root, field, rng));
                }
            }
            Value::Object(fields)
        }
    }
}

fn round_trip<T: ParamsStruct + PartialEq + std::fmt::Debug>(
    seed: u64,
) -> Result<(), TestCaseError> {
    let mut rng = TestRng::from_seed(
        proptest::test_runner::RngAlgorithm::ChaCha,
        &seed.to_le_bytes().repeat(4),
    );
    let schema = T::schema();
    let mut value = sample(schema, schema, &mut rng);
    value["version"] = json!(PARAMS_VERSION);
    // Cross-field rules reject some draws; those must say where.
    let p = match T::from_value(value) {
        Ok(p) => p,
        Err(e) => {
            prop_assert!(!e.path.is_empty(), "rejection without a path: {e}");
            return Ok(());
        }
    };
    p.validate()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back = T::from_json(&p.to_json()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&back, &p);
    let via_union = HeuristicParams::from_value(p.to_value());
    if let Some(tag) = T::SCHEDULER {
        prop_assert_eq!(via_union.unwrap().scheduler(), tag);
    }
    Ok(())
}

proptest! {
    #[test]
    fn pointwise_round_trips(seed in any::<u64>()) { round_trip::<PointwiseParams>(seed)?; }
    #[test]
    fn reduction_round_trips(seed in any::<u64>()) { round_trip::<ReductionParams>(seed)?; }
    #[test]
    fn matmul_round_trips(seed in any::<u64>()) { round_trip::<MatmulParams>(seed)?; }
}

fn matmul_err(value: Value) -> String {
    MatmulParams::from_value(value).unwrap_err().to_string()
}

#[test]
fn errors_name_the_field_path() {
    assert_eq!(
        matmul_err(json!({"tile_sizes": {"cta_tile": {"m": "64"}}})),
        "tile_sizes.cta_tile.m: expected a positive integer, got \"64\""
    );
    assert_eq!(
        matmul_err(json!({"tile_sizes": {"warp_tile": {"n": -3}}})),
        "tile_sizes.warp_tile.n: expected a positive integer, got -3"
    );
    assert!(
        matmul_err(json!({"tile_sizes": {"cta_tile": {"q": 1}}}))
            .starts_with("tile_sizes.cta_tile.q: unknown field; expected one of m, n, k")
    );
    assert_eq!(
        matmul_err(json!({"launch": {"workgroup_size": [64, 0, 1]}})),
        "launch.workgroup_size[1]: expected an integer from 1 to 1024, got 0"
    );
    assert_eq!(
        matmul_err(json!({"cta_order": "diagonal"})),
        "cta_order: expected one of \"row_major\", \"column_major\", got \"diagonal\""
    );
    assert_eq!(
        matmul_err(json!({"tile_sizes": {"warp_tile": {"m": 48}}})),
        "tile_sizes.warp_tile.m: 48 does not divide cta_tile.m (128)"
    );
    assert_eq!(
        matmul_err(json!({"scheduler": "pointwise"})),
        "scheduler: expected \"matmul\" for MatmulParams, got \"pointwise\""
    );
    assert!(matmul_err(json!({"version": PARAMS_VERSION + 1})).starts_with("version: "));
    let truncated = MatmulParams::from_json("{\"tile_sizes\": {\"cta_tile\": ").unwrap_err();
    assert!(
        truncated
            .to_string()
            .starts_with("invalid JSON: EOF while parsing"),
        "{truncated}"
    );
    let tag = HeuristicParams::from_value(json!({"scheduler": "conv"})).unwrap_err();
    assert_eq!(tag.path, "scheduler");
    let err = ReductionParams::from_value(json!({"subgroup_inner_reduction": true})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "subgroup_inner_reduction: needs compile.use_subgroups = true"
    );
}

#[test]
fn serde_deserialize_goes_through_the_same_checks() {
    let p: HeuristicParams =
        serde_json::from_str(r#"{"scheduler": "matmul", "splitk_factor": 2}"#).unwrap();
    let HeuristicParams::Matmul(m) = &p else {
        panic!("matmul")
    };
    assert_eq!(m.splitk_factor, 2);
    let err =
        serde_json::from_str::<HeuristicParams>(r#"{"scheduler": "matmul", "splitk_factor": 0}"#)
            .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("splitk_factor: expected an integer from 1 to 64, got 0"),
        "{err}"
    );
    assert_eq!(serde_json::to_value(&p).unwrap(), p.to_value());
}

#[test]
fn partial_values_take_defaults_in_context() {
    let p = MatmulParams::from_value(json!({"tile_sizes": {"cta_tile": {"m": 64}}})).unwrap();
    let d = MatmulParams::default();
    assert_eq!(p.tile_sizes.cta_tile.m, 64);
    assert_eq!(p.tile_sizes.cta_tile.n, d.tile_sizes.cta_tile.n);
    assert_eq!(p.tile_sizes.warp_tile, d.tile_sizes.warp_tile);
    // A value written before a field existed (here: without most of them).
    let old = json!({"scheduler": "pointwise", "version": 1, "vectorization_factor": 4});
    let HeuristicParams::Pointwise(p) = HeuristicParams::from_value(old).unwrap() else {
        panic!()
    };
    assert_eq!((p.vectorization_factor, p.unroll_factor_inner), (4, 1));
}

#[test]
fn equality_and_hash_cover_launch_params() {
    let a = HeuristicParams::from(MatmulParams::default());
    let mut m = MatmulParams::default();
    m.launch.workgroup_size = Some([64, 2, 1]);
    let b = HeuristicParams::from(m);
    assert_ne!(a, b);
    let set: HashSet<_> = [a.clone(), b, a].into_iter().collect();
    assert_eq!(set.len(), 2);
}

#[test]
fn every_struct_has_a_schema_with_documented_fields() {
    for s in structs() {
        let schema = (s.schema)();
        let props = schema["properties"].as_object().unwrap();
        for (name, field) in props {
            let documented = field.get("description").is_some()
                || field.get("$ref").is_some_and(|r| {
                    let def = r.as_str().unwrap().trim_start_matches("#/$defs/");
                    schema["$defs"][def].get("description").is_some()
                });
            assert!(documented, "{}.{name} has no doc comment", s.name);
        }
    }
}
