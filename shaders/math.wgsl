// Math helpers that generated kernels call (prefixed tf_ to stay out of
// WGSL's and the user's way). Validated by naga in tilefuse-sched's tests.

fn tf_sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// Some drivers return NaN from tanh of large arguments; |x| >= 10 is
// already +-1 in f32.
fn tf_tanh(x: f32) -> f32 {
    return tanh(clamp(x, -10.0, 10.0));
}

// GELU, tanh approximation (torch's approximate="tanh").
fn tf_gelu(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tf_tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

fn tf_relu_f32(x: f32) -> f32 {
    return max(x, 0.0);
}

fn tf_relu_i32(x: i32) -> i32 {
    return max(x, 0);
}

// vec4 forms, for vectorized loops.
fn tf_sigmoid4(x: vec4<f32>) -> vec4<f32> {
    return 1.0 / (1.0 + exp(-x));
}

fn tf_tanh4(x: vec4<f32>) -> vec4<f32> {
    return tanh(clamp(x, vec4<f32>(-10.0), vec4<f32>(10.0)));
}

fn tf_gelu4(x: vec4<f32>) -> vec4<f32> {
    return 0.5 * x * (1.0 + tf_tanh4(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

fn tf_relu4(x: vec4<f32>) -> vec4<f32> {
    return max(x, vec4<f32>(0.0));
}
