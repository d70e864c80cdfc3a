//! Half precision on every device: each fixture retyped to f16 and bf16,
//! scheduled by its automatic scheduler's default heuristic, against the
//! reference (which rounds each op to the dtype); special values bit for
//! bit.

mod common;

use common::{devices, f16_in_words};
use tilefuse_ir::{BinaryOp, DType, Data, Fusion, Tensor, evaluate};
use tilefuse_runtime::Device;
use tilefuse_schedulers::{heuristics, schedule};
use tilefuse_testing::{compare, fusions, in_dtype, inputs, matmul_fusions, reduction_fusions};

/// The devices `dtype` is checked on: every device, and for f16 also the
/// GPU with f16 packed in words, where the GPU has f16 arrays.
fn devices_for(dtype: DType) -> Vec<Device> {
    let mut out = devices();
    if dtype == DType::F16 {
        out.extend(f16_in_words());
    }
    out
}

/// Where the device has `shader-f16`, f16 kernels use `array<f16>`, and
/// on devices opened without it they do not.
#[test]
fn f16_kernels_use_f16_arrays_where_the_device_has_them() {
    let Some(words) = f16_in_words() else { return };
    let f = in_dtype(&fusions()[0].1, DType::F16);
    for (device, native) in [(devices().pop().unwrap(), true), (words, false)] {
        let has = device.info().features.iter().any(|x| x == "shader_f16");
        if !has && native {
            continue; // an adapter without shader-f16
        }
        let p = heuristics(&f, None, &device.info()).unwrap();
        let kernel = device
            .build(&schedule(&f, &p, &device.info()).unwrap())
            .unwrap();
        let wgsl = kernel.wgsl().unwrap();
        assert_eq!(
            wgsl.source.contains("array<f16>"),
            native,
            "{}",
            wgsl.source
        );
        assert_eq!(wgsl.features.contains(&"shader-f16"), native);
    }
}

/// The device's name and the features it was opened with.
fn label(device: &Device) -> String {
    let info = device.info();
    format!("{} [{}]", info.name, info.features.join(", "))
}

fn run(f: &Fusion, x: &[Tensor], device: &Device) -> Result<Vec<Tensor>, String> {
    let p = heuristics(f, None, &device.info()).map_err(|e| e.to_string())?;
    let s = schedule(f, &p, &device.info()).map_err(|e| e.to_string())?;
    let kernel = device.build(&s).map_err(|e| e.to_string())?;
    kernel.run(x).map_err(|e| e.to_string())
}

#[test]
fn every_fixture_in_f16_and_bf16_matches_the_reference() {
    let mut fixtures = fusions();
    fixtures.extend(reduction_fusions());
    fixtures.extend(matmul_fusions());
    let mut failures = Vec::new();
    for dtype in [DType::F16, DType::BF16] {
        for device in devices_for(dtype) {
            for (name, f) in &fixtures {
                let f = in_dtype(f, dtype);
                let x = inputs(&f, 5);
                let result = run(&f, &x, &device)
                    .and_then(|got| compare(&evaluate(&f, &x).unwrap(), &got, 1e-5));
                if let Err(e) = result {
                    failures.push(format!("{name} {dtype} on {}: {e}", label(&device)));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Matmuls whose result is of another float dtype than their operands:
/// f32 out of halves (with and without an f32 epilogue, transposed) and a
/// half out of f32s.
fn matmuls_to(half: DType) -> Vec<(String, Fusion)> {
    let mut out = Vec::new();
    for (operands, to, transpose) in [
        (half, DType::F32, false),
        (half, DType::F32, true),
        (DType::F32, half, false),
    ] {
        let mut f = Fusion::new();
        let a = f.input(&[2, 19, 40], operands, Some("a")).unwrap();
        let b = f.input(&[40, 23], operands, Some("b")).unwrap();
        let b = if transpose {
            f.permute(b, &[1, 0]).unwrap()
        } else {
            b
        };
        let mm = f.matmul_to(a, b, false, transpose, Some(to)).unwrap();
        let bias = f.input(&[23], to, Some("bias")).unwrap();
        let y = f.binary(BinaryOp::Add, mm, bias).unwrap();
        f.output(if transpose { mm } else { y }).unwrap();
        out.push((format!("{operands} @ {operands} -> {to}"), f));
    }
    out
}

#[test]
fn matmuls_round_once_to_their_out_dtype() {
    let mut failures = Vec::new();
    for half in [DType::F16, DType::BF16] {
        for (name, f) in matmuls_to(half) {
            let x = inputs(&f, 3);
            let want = evaluate(&f, &x).unwrap();
            for device in devices() {
                let result = run(&f, &x, &device).and_then(|got| compare(&want, &got, 1e-5));
                if let Err(e) = result {
                    failures.push(format!("{name} on {}: {e}", label(&device)));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The bits of a half tensor, NaNs made one value (a device may give any
/// quiet NaN).
fn bits(t: &Tensor) -> Vec<u16> {
    let canonical = |b: u16, nan: bool| if nan { 0x7fff } else { b };
    match &t.data {
        Data::F16(v) => v
            .iter()
            .map(|x| canonical(x.to_bits(), x.is_nan()))
            .collect(),
        Data::BF16(v) => v
            .iter()
            .map(|x| canonical(x.to_bits(), x.is_nan()))
            .collect(),
        other => panic!("not a half tensor: {:?}", other.dtype()),
    }
}

/// `a + b`, `a * b` and `a / b` on specials, overflow past the largest
/// finite value, subnormals and ties of rounding to nearest even: every
/// device gives the reference's bits.
#[test]
fn special_values_round_like_the_reference_on_every_device() {
    let specials = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1.0,
        -1.0,
        65504.0,
        -65504.0,
        // f16's subnormals (2^-24 and 3 * 2^-24) and its smallest normal.
        5.960464477539063e-8,
        1.7881393432617188e-7,
        6.103515625e-5,
        // 1 + 2^-8 and 1 + 3 * 2^-8: ties for bf16's 7 mantissa bits.
        1.00390625,
        1.01171875,
        3.0e38,
        1.0e-40,
    ];
    let n = specials.len();
    let a: Vec<f64> = specials.iter().flat_map(|&x| vec![x; n]).collect();
    let b: Vec<f64> = (0..n).flat_map(|_| specials).collect();
    for dtype in [DType::F16, DType::BF16] {
        let mut f = Fusion::new();
        let x = f.input(&[n * n], dtype, Some("a")).unwrap();
        let y = f.input(&[n * n], dtype, Some("b")).unwrap();
        for op in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Div] {
            let z = f.binary(op, x, y).unwrap();
            f.output(z).unwrap();
        }
        let tensor = |v: &[f64]| {
            let data = Data::from_fn(dtype, v.len(), |i| tilefuse_ir::Scalar::F(v[i])).unwrap();
            Tensor::new(vec![v.len()], data).unwrap()
        };
        let inputs = [tensor(&a), tensor(&b)];
        let want = evaluate(&f, &inputs).unwrap();
        for device in devices_for(dtype) {
            let got = run(&f, &inputs, &device).unwrap();
            for (o, (w, g)) in want.iter().zip(&got).enumerate() {
                let (w, g) = (bits(w), bits(g));
                let wrong: Vec<_> = (0..w.len())
                    .filter(|&i| w[i] != g[i])
                    .map(|i| format!("{} op {}: {:#06x} want {:#06x}", a[i], b[i], g[i], w[i]))
                    .collect();
                assert!(
                    wrong.is_empty(),
                    "{dtype} output {o} on {}:\n{}",
                    label(&device),
                    wrong.join("\n")
                );
            }
        }
    }
}
