// The tanh of the C++ kernels: tanh is where additive attention spends its time.
//
// float: tanh(x) = x P(x^2) / Q(x^2) for |x| <= 9, sign(x) tanh(9) beyond, with P of degree 6
// and Q of degree 3 fitted for the least largest *relative* error by Loeb's iteration
// (tools/fit_tanh.py at the repository root: 5.9e-8; with float32 rounding the error is below
// 3.7e-7, absolute and relative, measured with FMA contraction and without; the tests hold it
// to the 1.3e-6 its arithmetic allows: tests/float32_bounds.py). Relative accuracy
// near 0 matters: errors on tiny values add up in the gradient sums. The result may exceed 1 in magnitude by rounding (by
// < 3.7e-7). 17 vector operations and no branch, so the loops that call it vectorise: about
// 1.6x the throughput of an exp-based tanh on an AVX2 CPU (docs/benchmarks.md). NaN propagates.
//
// double is for gradcheck: the exact tanh, speed does not matter.

#pragma once

#include <cmath>

namespace attnkit {

inline float fast_tanh(float x) {
  float a = __builtin_fabsf(x);
  a = 9.0f < a ? 9.0f : a;  // this form keeps a NaN
  const float s = a * a;
  float p = -6.561804638e-14f;
  p = p * s + 4.461590505e-11f;
  p = p * s - 1.839770272e-08f;
  p = p * s + 1.067787253e-05f;
  p = p * s + 3.057028189e-03f;
  p = p * s + 1.304166201e-01f;
  p = p * s + 1.0f;
  float q = 2.478592634e-04f;
  q = q * s + 2.430718811e-02f;
  q = q * s + 4.637498279e-01f;
  q = q * s + 1.0f;
  return __builtin_copysignf(a * p / q, x);
}

inline double fast_tanh(double x) { return std::tanh(x); }

}  // namespace attnkit
