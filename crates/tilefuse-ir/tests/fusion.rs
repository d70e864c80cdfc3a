use proptest::prelude::*;
use tilefuse_ir::{
    BinaryOp, DType, Data, Fusion, FusionError, ReduceOp, Tensor, TensorId, UnaryOp, evaluate,
};

/// One random builder step; steps that do not type-check are skipped, so
/// every generated fusion is valid and varied.
#[derive(Clone, Debug)]
enum Step {
    Unary(usize, usize),
    Binary(usize, usize, usize),
    Reduce(usize, usize, i64, bool),
    Constant(f64),
    Cast(usize, usize),
    Permute(usize),
    Reshape(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let ix = 0usize..64;
    prop_oneof![
        (ix.clone(), 0..UnaryOp::ALL.len()).prop_map(|(a, f)| Step::Unary(a, f)),
        (ix.clone(), ix.clone(), 0..BinaryOp::ALL.len())
            .prop_map(|(a, b, f)| Step::Binary(a, b, f)),
        (ix.clone(), 0..ReduceOp::ALL.len(), -2i64..2, any::<bool>())
            .prop_map(|(a, f, ax, k)| Step::Reduce(a, f, ax, k)),
        prop_oneof![Just(f64::NEG_INFINITY), Just(f64::NAN), -1e6f64..1e6].prop_map(Step::Constant),
        (ix.clone(), 0..4usize).prop_map(|(a, d)| Step::Cast(a, d)),
        ix.clone().prop_map(Step::Permute),
        ix.prop_map(Step::Reshape),
    ]
}

fn build(shapes: &[(usize, usize)], steps: &[Step], names: bool) -> Fusion {
    let mut f = Fusion::new();
    let mut pool: Vec<TensorId> = Vec::new();
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let name = names.then(|| format!("in{i}"));
        pool.push(f.input(&[r, c], DType::F32, name.as_deref()).unwrap());
    }
    for s in steps {
        let pick = |i: usize| pool[i % pool.len()];
        let made = match *s {
            Step::Unary(a, func) => f.unary(UnaryOp::ALL[func], pick(a)),
            Step::Binary(a, b, func) => f.binary(BinaryOp::ALL[func], pick(a), pick(b)),
            Step::Reduce(a, func, axis, keep) => {
                f.reduce(ReduceOp::ALL[func], pick(a), Some(&[axis]), keep)
            }
            Step::Constant(v) => f.constant(v, DType::F32),
            Step::Cast(a, d) => f.cast(pick(a), DType::ALL[d]),
            Step::Permute(a) => f.permute(pick(a), &[1, 0]),
            Step::Reshape(a) => f.reshape(pick(a), &[-1]),
        };
        if let Ok(t) = made {
            pool.push(t);
        }
    }
    f.output(*pool.last().unwrap()).unwrap();
    f
}

fn fusion() -> impl Strategy<Value = (Vec<(usize, usize)>, Vec<Step>)> {
    (
        prop::collection::vec((1usize..5, 1usize..5), 1..3),
        prop::collection::vec(step(), 0..20),
    )
}

proptest! {
    #[test]
    fn json_round_trip_keeps_fusion_and_fingerprint((shapes, steps) in fusion()) {
        let f = build(&shapes, &steps, true);
        let back = Fusion::from_json(&f.to_json()).unwrap();
        prop_assert_eq!(back.fingerprint(), f.fingerprint());
        prop_assert_eq!(&back, &f);
        prop_assert_eq!(back.to_string(), f.to_string());
    }

    #[test]
    fn fingerprint_ignores_names((shapes, steps) in fusion()) {
        prop_assert_eq!(build(&shapes, &steps, true).fingerprint(), build(&shapes, &steps, false).fingerprint());
    }
}

fn softmax() -> Fusion {
    softmax_of(&[4, 8])
}

fn softmax_of(shape: &[usize]) -> Fusion {
    let mut f = Fusion::new();
    let x = f.input(shape, DType::F32, Some("x")).unwrap();
    let m = f.reduce(ReduceOp::Max, x, Some(&[1]), true).unwrap();
    let d = f.binary(BinaryOp::Sub, x, m).unwrap();
    let e = f.unary(UnaryOp::Exp, d).unwrap();
    let s = f.reduce(ReduceOp::Sum, e, Some(&[-1]), true).unwrap();
    let y = f.binary(BinaryOp::Div, e, s).unwrap();
    f.output(y).unwrap();
    f
}

#[test]
fn fingerprint_is_pinned() {
    // This value may only change together with FUSION_SCHEMA_VERSION: caches
    // shipped by users are keyed on it.
    assert_eq!(softmax().fingerprint(), "62dbf8729226c358cf5c890d1dc668fb");
}

#[test]
fn fingerprint_changes_with_any_structure() {
    let base = softmax().fingerprint();
    let mut other = Fusion::new();
    let x = other.input(&[4, 9], DType::F32, Some("x")).unwrap();
    other.output(x).unwrap();
    let mut same_but_shape = softmax();
    same_but_shape.set_name(TensorId(0), "renamed").unwrap();
    assert_eq!(same_but_shape.fingerprint(), base);
    assert_ne!(other.fingerprint(), base);
}

#[test]
fn family_leaves_out_extents_but_not_ranks_or_unit_dims() {
    let family = softmax().family();
    assert_eq!(softmax_of(&[4096, 128]).family(), family);
    assert_ne!(
        softmax_of(&[4096, 128]).fingerprint(),
        softmax().fingerprint()
    );
    // A row of one broadcasts differently, a third axis is another structure.
    assert_ne!(softmax_of(&[1, 8]).family(), family);
    assert_ne!(softmax_of(&[2, 4, 8]).family(), family);
    assert_ne!(family, softmax().fingerprint());
}

#[test]
fn printer_is_readable() {
    let text = softmax().to_string();
    assert!(text.contains("x: f32[4, 8] = input(0)"), "{text}");
    assert!(
        text.contains("t1: f32[4, 1] = max(x, axes=[1], keepdims=true)"),
        "{text}"
    );
    assert!(text.contains("return t5"), "{text}");
}

#[test]
fn a_signature_names_types_and_ops_once_but_no_tensors() {
    assert_eq!(
        softmax().signature(),
        "f32[4, 8] -> f32[4, 8]: max, sub, exp, sum, div"
    );
}

#[test]
fn errors_name_the_op_and_shapes() {
    let mut f = Fusion::new();
    let a = f.input(&[4, 3], DType::F32, None).unwrap();
    let b = f.input(&[5], DType::F32, None).unwrap();
    let i = f.input(&[4, 3], DType::I32, None).unwrap();
    let err = f.binary(BinaryOp::Add, a, b).unwrap_err();
    assert_eq!(
        err.to_string(),
        "add: cannot broadcast shapes (4, 3) and (5,)"
    );
    let err = f.unary(UnaryOp::Exp, i).unwrap_err();
    assert_eq!(
        err.to_string(),
        "exp: expected a float (f32, f16, bf16) operand, got i32"
    );
    let err = f.matmul(a, a, false, false).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("matmul: inner dimensions differ"),
        "{err}"
    );
    let t = f.permute(a, &[1, 0]).unwrap();
    let err = f
        .matmul_to(a, t, false, false, Some(DType::I32))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "matmul: out_dtype must be a float (f32, f16, bf16), got i32"
    );
    let err = f.reshape(a, &[5, -1]).unwrap_err();
    assert!(
        matches!(err, FusionError::Op { op: "reshape", .. }),
        "{err}"
    );
    assert!(f.input(&[1], DType::F32, Some("1x")).is_err());
    let err = f.input(&[1 << 20, 1 << 20], DType::F32, None).unwrap_err();
    assert!(err.to_string().contains("32-bit indexing"), "{err}");
}

#[test]
fn evaluate_softmax_rows_sum_to_one() {
    let x: Vec<f32> = (0..32).map(|i| (i as f32 * 0.37).sin()).collect();
    let out = evaluate(
        &softmax(),
        &[Tensor::new(vec![4, 8], Data::F32(x)).unwrap()],
    )
    .unwrap();
    let Data::F32(y) = &out[0].data else {
        panic!("f32 output")
    };
    for row in y.chunks(8) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}

#[test]
fn evaluate_rejects_wrong_arguments() {
    let err = evaluate(
        &softmax(),
        &[Tensor::new(vec![4, 7], Data::F32(vec![1.0; 28])).unwrap()],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "input 0 (x): expected f32[4, 8], got f32[4, 7]"
    );
}

#[test]
fn integer_division_follows_wgsl() {
    let mut f = Fusion::new();
    let a = f.input(&[3], DType::I32, None).unwrap();
    let b = f.input(&[3], DType::I32, None).unwrap();
    let q = f.binary(BinaryOp::Div, a, b).unwrap();
    f.output(q).unwrap();
    let t = |v: Vec<i32>| Tensor::new(vec![3], Data::I32(v)).unwrap();
    let out = evaluate(&f, &[t(vec![7, -7, i32::MIN]), t(vec![2, 0, -1])]).unwrap();
    assert_eq!(out[0].data, Data::I32(vec![3, -7, i32::MIN]));
}

#[test]
fn a_matmul_out_dtype_types_prints_and_saves_its_result() {
    let mut f = Fusion::new();
    let a = f.input(&[2, 3], DType::BF16, Some("a")).unwrap();
    let b = f.input(&[3, 4], DType::BF16, Some("b")).unwrap();
    let plain = f.matmul(a, b, false, false).unwrap();
    let wide = f.matmul_to(a, b, false, false, Some(DType::F32)).unwrap();
    f.output(plain).unwrap();
    f.output(wide).unwrap();
    assert_eq!(f.ty(plain).unwrap().dtype, DType::BF16);
    assert_eq!(f.ty(wide).unwrap().dtype, DType::F32);
    assert!(f.to_string().contains("out_dtype=f32"), "{f}");
    let json = f.to_json();
    // Absent where it is the operands' dtype: saved fusions and their
    // fingerprints stay as they were.
    assert_eq!(json.matches("out_dtype").count(), 1, "{json}");
    let back = Fusion::from_json(&json).unwrap();
    assert_eq!(back.fingerprint(), f.fingerprint());
    assert_eq!(back.ty(wide).unwrap().dtype, DType::F32);
    // f64 sums rounded once: to bf16 for one, kept in f32 by the other.
    let x = Tensor::new(
        vec![2, 3],
        Data::from_fn(DType::BF16, 6, |_| {
            tilefuse_ir::Scalar::F(1.0 + 1.0 / 128.0)
        })
        .unwrap(),
    )
    .unwrap();
    let y = Tensor::new(
        vec![3, 4],
        Data::from_fn(DType::BF16, 12, |_| tilefuse_ir::Scalar::F(1.0)).unwrap(),
    )
    .unwrap();
    let out = evaluate(&f, &[x, y]).unwrap();
    // 3 * (1 + 2^-7) = 3.0234375: bf16 keeps 8 bits (3.03125), f32 all.
    assert_eq!(out[0].data.get(0).as_f64(), 3.03125);
    assert_eq!(out[1].data.get(0).as_f64(), 3.0234375);
}
