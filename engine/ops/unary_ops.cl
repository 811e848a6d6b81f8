// Unary elementwise ops on float32 (unary_ops.cc has the CPU kernels and the gradient rules). The formulas are the
// CPU kernels', including their NaN behaviour (Relu maps NaN to 0, as x > 0 is false).
#define TRAIND_UNARY(name, expression)                                                            \
  __kernel void name(__global const float* input, __global float* output, long n, float alpha,  \
                     float gamma) {                                                             \
    const long i = get_global_id(0);                                                            \
    if (i < n) {                                                                                \
      const float x = input[i];                                                                 \
      output[i] = (expression);                                                                 \
    }                                                                                           \
  }

TRAIND_UNARY(relu_f32, x > 0.0f ? x : 0.0f)
TRAIND_UNARY(neg_f32, -x)
TRAIND_UNARY(abs_f32, x < 0.0f ? -x : x)
TRAIND_UNARY(exp_f32, exp(x))
TRAIND_UNARY(log_f32, log(x))
TRAIND_UNARY(sqrt_f32, sqrt(x))
TRAIND_UNARY(erf_f32, erf(x))
// pocl's tanh(inf) is 0.99999994: saturate where float tanh rounds to +-1 anyway.
TRAIND_UNARY(tanh_f32, fabs(x) >= 10.0f ? copysign(1.0f, x) : tanh(x))
TRAIND_UNARY(reciprocal_f32, 1.0f / x)
TRAIND_UNARY(sigmoid_f32, x >= 0.0f ? 1.0f / (1.0f + exp(-x)) : exp(x) / (1.0f + exp(x)))
TRAIND_UNARY(softplus_f32, (x > 0.0f ? x : 0.0f) + log1p(exp(-fabs(x))))
TRAIND_UNARY(leaky_relu_f32, x >= 0.0f ? x : alpha * x)
TRAIND_UNARY(elu_f32, x >= 0.0f ? x : alpha * expm1(x))
TRAIND_UNARY(selu_f32, gamma * (x > 0.0f ? x : alpha * expm1(x)))
