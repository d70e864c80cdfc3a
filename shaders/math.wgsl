// Math helpers that generated kernels call (prefixed tf_ to stay out of
// WGSL's and the user's way). Validated by naga in tilefuse-sched's tests.

// exp; near 0 (|x| < 2^-13, the x^2 / 2 left out under 2^-27) 1 + x, which
// is 1 wherever exp(x) rounds to 1: drivers' exp may be ulps off there
// (lavapipe gave exp(-2.6e-13) = 1 - 1 ulp, which an i32 cast made 0).
fn tf_exp(x: f32) -> f32 {
    return select(exp(x), 1.0 + x, abs(x) < 0.0001220703125);
}

fn tf_sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + tf_exp(-x));
}

// tanh to a few ulp of relative error everywhere (Cephes' tanhf). Drivers'
// tanh, (e^2x - 1) / (e^2x + 1) on Mesa, keeps no relative precision near 0
// (tanh(1e-12) came out 3e-8), and some return NaN for large arguments:
// |x| >= 10 is already +-1 in f32. Below 0.625 a polynomial, x (1 + x^2
// P(x^2)), which keeps x's sign and -0; above, 1 - 2 / (e^2|x| + 1) with
// x's sign. NaN stays NaN (min of NaN may give either operand).
fn tf_tanh(x: f32) -> f32 {
    let s = x * x;
    let p = (((-5.70498872745e-3 * s + 2.06390887954e-2) * s - 5.37397155531e-2) * s
        + 1.33314422036e-1) * s - 3.33332819422e-1;
    let near_zero = x * (1.0 + s * p);
    let far = 1.0 - 2.0 / (exp(2.0 * min(abs(x), 10.0)) + 1.0);
    let signed = bitcast<f32>(bitcast<u32>(far) | (bitcast<u32>(x) & 0x80000000u));
    return select(select(signed, near_zero, abs(x) < 0.625), x, tf_isnan(x));
}

// GELU, tanh approximation (torch's approximate="tanh"): 0.5 x (1 + tanh u)
// as x / (1 + e^-2u), which does not cancel to 0 for negative x.
fn tf_gelu(x: f32) -> f32 {
    return x / (1.0 + tf_exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
}

// relu(NaN) is NaN (as torch's relu and numpy's maximum(x, 0)).
fn tf_relu_f32(x: f32) -> f32 {
    return select(max(x, 0.0), x, tf_isnan(x));
}

fn tf_relu_i32(x: i32) -> i32 {
    return max(x, 0);
}

// vec4 forms, for vectorized loops.
fn tf_exp4(x: vec4<f32>) -> vec4<f32> {
    return select(exp(x), 1.0 + x, abs(x) < vec4<f32>(0.0001220703125));
}

fn tf_sigmoid4(x: vec4<f32>) -> vec4<f32> {
    return 1.0 / (1.0 + tf_exp4(-x));
}

fn tf_tanh4(x: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(tf_tanh(x.x), tf_tanh(x.y), tf_tanh(x.z), tf_tanh(x.w));
}

fn tf_gelu4(x: vec4<f32>) -> vec4<f32> {
    return x / (1.0 + tf_exp4(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
}

fn tf_relu4(x: vec4<f32>) -> vec4<f32> {
    return select(max(x, vec4<f32>(0.0)), x, tf_isnan4(x));
}

// NaN by its bits: a comparison like x != x may be folded away by a
// compiler that assumes no NaNs.
fn tf_isnan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn tf_isnan4(x: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
}

// Float comparisons per IEEE 754 (numpy's): every comparison with a NaN
// is false except !=, which is true. naga writes WGSL's != as SPIR-V's
// ordered OpFOrdNotEqual (false for NaN), and a compiler that assumes no
// NaNs may fold any comparison, so NaN operands are tested by their bits.
fn tf_unordered(a: f32, b: f32) -> bool {
    return tf_isnan(a) || tf_isnan(b);
}

fn tf_eq(a: f32, b: f32) -> bool { return a == b && !tf_unordered(a, b); }
fn tf_ne(a: f32, b: f32) -> bool { return !(a == b) || tf_unordered(a, b); }
fn tf_lt(a: f32, b: f32) -> bool { return a < b && !tf_unordered(a, b); }
fn tf_le(a: f32, b: f32) -> bool { return a <= b && !tf_unordered(a, b); }
fn tf_gt(a: f32, b: f32) -> bool { return a > b && !tf_unordered(a, b); }
fn tf_ge(a: f32, b: f32) -> bool { return a >= b && !tf_unordered(a, b); }

fn tf_unordered4(a: vec4<f32>, b: vec4<f32>) -> vec4<bool> {
    return tf_isnan4(a) | tf_isnan4(b);
}

fn tf_eq4(a: vec4<f32>, b: vec4<f32>) -> vec4<bool> { return (a == b) & !tf_unordered4(a, b); }
fn tf_ne4(a: vec4<f32>, b: vec4<f32>) -> vec4<bool> { return !(a == b) | tf_unordered4(a, b); }
fn tf_lt4(a: vec4<f32>, b: vec4<f32>) -> vec4<bool> { return (a < b) & !tf_unordered4(a, b); }
fn tf_le4(a: vec4<f32>, b: vec4<f32>) -> vec4<bool> { return (a <= b) & !tf_unordered4(a, b); }
fn tf_gt4(a: vec4<f32>, b: vec4<f32>) -> vec4<bool> { return (a > b) & !tf_unordered4(a, b); }
fn tf_ge4(a: vec4<f32>, b: vec4<f32>) -> vec4<bool> { return (a >= b) & !tf_unordered4(a, b); }

// max / min where NaN wins, as in numpy (WGSL's may return either operand);
// of +0 and -0, max takes +0 and min -0 (IEEE 754-2019): equal operands
// combine their bits.
fn tf_max(a: f32, b: f32) -> f32 {
    let m = select(select(max(a, b), b, tf_isnan(b)), a, tf_isnan(a));
    return select(m, bitcast<f32>(bitcast<u32>(a) & bitcast<u32>(b)), a == b);
}

fn tf_min(a: f32, b: f32) -> f32 {
    let m = select(select(min(a, b), b, tf_isnan(b)), a, tf_isnan(a));
    return select(m, bitcast<f32>(bitcast<u32>(a) | bitcast<u32>(b)), a == b);
}

fn tf_max4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    let m = select(select(max(a, b), b, tf_isnan4(b)), a, tf_isnan4(a));
    return select(m, bitcast<vec4<f32>>(bitcast<vec4<u32>>(a) & bitcast<vec4<u32>>(b)), a == b);
}

fn tf_min4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    let m = select(select(min(a, b), b, tf_isnan4(b)), a, tf_isnan4(a));
    return select(m, bitcast<vec4<f32>>(bitcast<vec4<u32>>(a) | bitcast<vec4<u32>>(b)), a == b);
}

// C's pow (numpy's): WGSL's pow is undefined for x < 0 and for x = 0 with
// y <= 0, so the magnitude is computed on |x| and the sign and the special
// cases are applied here.
fn tf_pow(x: f32, y: f32) -> f32 {
    let inf = bitcast<f32>(0x7f800000u);
    let ax = abs(x);
    if (y == 0.0 || x == 1.0 || (ax == 1.0 && abs(y) == inf)) {
        return 1.0;
    }
    if (tf_isnan(x) || tf_isnan(y)) {
        return bitcast<f32>(0x7fc00000u);
    }
    var r: f32;
    if (ax == 0.0) {
        r = select(0.0, inf, y < 0.0);
    } else if (ax == inf) {
        r = select(0.0, inf, y > 0.0);
    } else if (abs(y) == inf) {
        r = select(0.0, inf, (ax > 1.0) == (y > 0.0));
    } else {
        r = pow(ax, y);
    }
    let integer = floor(y) == y;
    if (x < 0.0 && ax != inf && !integer) {
        return bitcast<f32>(0x7fc00000u);
    }
    // An odd integer exponent keeps the sign of x (also of -0).
    let odd = integer && abs(y) < 16777216.0 && floor(y * 0.5) != y * 0.5;
    if (odd && (bitcast<u32>(x) & 0x80000000u) != 0u) {
        return -r;
    }
    return r;
}

fn tf_pow4(x: vec4<f32>, y: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(tf_pow(x.x, y.x), tf_pow(x.y, y.y), tf_pow(x.z, y.z), tf_pow(x.w, y.w));
}

// Arithmetic with a literal zero whose sign bit is `z` (0u or 0x80000000u),
// computed on the bits: WGSL lets compilers fold x * 0, x / 0, 0 / x and
// 0 - x as if x were finite and zeros had no sign, which is wrong for NaN,
// infinities and -0. Here each gives the IEEE result.
const TF_SIGN: u32 = 0x80000000u;

fn tf_is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) < 0x7f800000u;
}

fn tf_is_zero(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0u;
}

// x * z (and z * x): NaN unless x is finite, else a zero of the product's sign.
fn tf_times_zero(x: f32, z: u32) -> f32 {
    let zero = bitcast<f32>((bitcast<u32>(x) & TF_SIGN) ^ z);
    return select(bitcast<f32>(0x7fc00000u), zero, tf_is_finite(x));
}

// x / z: NaN for NaN and zero x, else an infinity of the quotient's sign.
fn tf_over_zero(x: f32, z: u32) -> f32 {
    let inf = bitcast<f32>(((bitcast<u32>(x) & TF_SIGN) ^ z) | 0x7f800000u);
    return select(inf, bitcast<f32>(0x7fc00000u), tf_isnan(x) || tf_is_zero(x));
}

// z / x: NaN for NaN and zero x, else a zero of the quotient's sign.
fn tf_zero_over(z: u32, x: f32) -> f32 {
    let zero = bitcast<f32>((bitcast<u32>(x) & TF_SIGN) ^ z);
    return select(zero, bitcast<f32>(0x7fc00000u), tf_isnan(x) || tf_is_zero(x));
}

// x + z (and z + x): x, except -0 + +0, which is +0.
fn tf_plus_zero(x: f32, z: u32) -> f32 {
    return select(x, bitcast<f32>(0u), bitcast<u32>(x) == TF_SIGN && z == 0u);
}

// z - x: -x plus z.
fn tf_zero_minus(z: u32, x: f32) -> f32 {
    return tf_plus_zero(bitcast<f32>(bitcast<u32>(x) ^ TF_SIGN), z);
}

fn tf_times_zero4(x: vec4<f32>, z: u32) -> vec4<f32> {
    return vec4<f32>(tf_times_zero(x.x, z), tf_times_zero(x.y, z), tf_times_zero(x.z, z), tf_times_zero(x.w, z));
}

fn tf_over_zero4(x: vec4<f32>, z: u32) -> vec4<f32> {
    return vec4<f32>(tf_over_zero(x.x, z), tf_over_zero(x.y, z), tf_over_zero(x.z, z), tf_over_zero(x.w, z));
}

fn tf_zero_over4(z: u32, x: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(tf_zero_over(z, x.x), tf_zero_over(z, x.y), tf_zero_over(z, x.z), tf_zero_over(z, x.w));
}

fn tf_plus_zero4(x: vec4<f32>, z: u32) -> vec4<f32> {
    return vec4<f32>(tf_plus_zero(x.x, z), tf_plus_zero(x.y, z), tf_plus_zero(x.z, z), tf_plus_zero(x.w, z));
}

fn tf_zero_minus4(z: u32, x: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(tf_zero_minus(z, x.x), tf_zero_minus(z, x.y), tf_zero_minus(z, x.z), tf_zero_minus(z, x.w));
}

// Float to integer: toward zero, saturating, NaN to 0 (Rust's `as`).
fn tf_f32_to_i32(x: f32) -> i32 {
    if (tf_isnan(x)) {
        return 0;
    }
    if (x >= 2147483648.0) {
        return 2147483647;
    }
    if (x <= -2147483648.0) {
        return bitcast<i32>(0x80000000u);
    }
    return i32(x);
}

fn tf_f32_to_u32(x: f32) -> u32 {
    if (tf_isnan(x) || x <= 0.0) {
        return 0u;
    }
    if (x >= 4294967296.0) {
        return 0xffffffffu;
    }
    return u32(x);
}

// Half precision. Halves live in f32 while computed and in 16-bit halves of
// u32 words in storage (lane 0 the low half, as little-endian memory lays
// them out). f16 converts through the device's instructions
// (unpack2x16float / pack2x16float: to nearest even on every device
// measured), except where WGSL leaves pack2x16float undefined: infinities,
// NaN and values that round past 65504. bf16 is integer arithmetic, to
// nearest even. No branches: a matmul's unrolled tiles convert per
// element, and lavapipe took minutes to compile a branchy f16 rounding
// there (`half.rs` in tilefuse-runtime's tests, its matmul fixtures).

// x's bits rounded to nearest even after dropping the low `shift` bits.
fn tf_round_bits(x: u32, shift: u32) -> u32 {
    let half = 1u << (shift - 1u);
    let rest = x & ((1u << shift) - 1u);
    let r = x >> shift;
    return r + select(0u, 1u, rest > half || (rest == half && (r & 1u) == 1u));
}

fn tf_f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let a = b & 0x7fffffffu;
    // From 65520 up a value rounds to infinity, where pack2x16float is
    // undefined; so is it for NaN, made quiet here.
    let special = select(0x7c00u, 0x7e00u | ((a >> 13u) & 0x3ffu), a > 0x7f800000u);
    let packed = pack2x16float(vec2<f32>(bitcast<f32>(a), 0.0)) & 0x7fffu;
    return ((b >> 16u) & 0x8000u) | select(packed, special, a >= 0x477ff000u);
}

fn tf_bf16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    return select(tf_round_bits(b, 16u), (b >> 16u) | 0x40u, (b & 0x7fffffffu) > 0x7f800000u);
}

fn tf_f16_at(word: u32, lane: u32) -> f32 {
    return unpack2x16float(word)[lane];
}

fn tf_bf16_at(word: u32, lane: u32) -> f32 {
    return bitcast<f32>(((word >> (16u * lane)) & 0xffffu) << 16u);
}

fn tf_round_f16(x: f32) -> f32 {
    return unpack2x16float(tf_f16_bits(x)).x;
}

fn tf_round_bf16(x: f32) -> f32 {
    return bitcast<f32>(tf_bf16_bits(x) << 16u);
}

// Storing a half into lane `lane` of a shared word: atomicAnd with the
// mask keeps the other lane, atomicOr sets this one (the other lane may be
// another invocation's).
fn tf_half_keep(lane: u32) -> u32 {
    return 0xffff0000u >> (16u * lane);
}

fn tf_half_place(bits: u32, lane: u32) -> u32 {
    return bits << (16u * lane);
}
