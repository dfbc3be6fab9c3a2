// One-query additive attention (an RNN decoder step): forward and backward in one pass each.
//
// Built once per machine by attnkit/attention/native.py and called through ctypes by the
// wrappers of attnkit/attention/bindings.py; the math is that of attnkit/attention/step.py
// (_forward, _backward), which the tests compare it with.
//
// Shapes (BH = B * H rows; a row is one query of one head of one batch element):
//   q     (B, H, 1, A)   prepared query, contiguous
//   k     (B, H, Tk, A)  prepared keys, strides (k_sb, k_sh, k_sj), last dim contiguous
//   va    (H, A)         the score's v, contiguous
//   v     (B, H, Tk, D)  values, strides (v_sb, v_sh, v_sj), last dim contiguous
//   mask  (B or 1, Tk)   uint8, nonzero = may attend, strides (m_sb, m_sj); or null
//   extra (B, H, Tk, A)  location term f_j L added before tanh, contiguous; or null
//   out   (B, H, 1, D), p (B, H, 1, Tk): context and weights, contiguous (p also in backward)
// A row with no allowed key gets zero weights, zero context and zero gradients.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tanh.h"

namespace {

using attnkit::fast_tanh;

constexpr int64_t kBlock = 64;  // keys per parallel work item
constexpr int64_t kSerialWork = 1 << 15;  // (key, feature) pairs below which one thread runs

inline int64_t blocks(int64_t tk) { return (tk + kBlock - 1) / kBlock; }

// body(b, h, blk, j0, j1) for every row (b, h) and every block blk of keys j0..j1-1: the work
// items of the passes over keys, shared out over the threads when `parallel`.
template <typename Body>
inline void for_key_blocks(int64_t B, int64_t H, int64_t Tk, bool parallel, int threads,
                           Body body) {
  const int64_t nb = blocks(Tk);
#pragma omp parallel for collapse(2) num_threads(threads) schedule(static) if (parallel)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    for (int64_t blk = 0; blk < nb; ++blk) {
      body(bh / H, bh % H, blk, blk * kBlock, std::min(Tk, (blk + 1) * kBlock));
    }
  }
}

template <typename T>
void forward(int64_t B, int64_t H, int64_t Tk, int64_t A, int64_t D, const T* q, const T* k,
             int64_t k_sb, int64_t k_sh, int64_t k_sj, const T* va, const T* v, int64_t v_sb,
             int64_t v_sh, int64_t v_sj, const uint8_t* mask, int64_t m_sb, int64_t m_sj,
             const T* extra, T* out, T* p, int threads) {
  const T neg_inf = -INFINITY;
  const bool parallel = B * H * Tk * A >= kSerialWork;
  // Scores s_j = va . tanh(q + k_j [+ extra_j]) into p, a block of keys per work item.
  for_key_blocks(B, H, Tk, parallel, threads, [&](int64_t b, int64_t h, int64_t, int64_t j0,
                                                  int64_t j1) {
    const int64_t bh = b * H + h;
    const T* qr = q + bh * A;
    const T* var = va + h * A;
    T* pr = p + bh * Tk;
    for (int64_t j = j0; j < j1; ++j) {
      if (mask && !mask[b * m_sb + j * m_sj]) {
        pr[j] = neg_inf;
        continue;
      }
      const T* kr = k + b * k_sb + h * k_sh + j * k_sj;
      T s = 0;
      if (extra) {
        const T* er = extra + (bh * Tk + j) * A;
#pragma omp simd reduction(+ : s)
        for (int64_t a = 0; a < A; ++a) s += var[a] * fast_tanh(qr[a] + kr[a] + er[a]);
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t a = 0; a < A; ++a) s += var[a] * fast_tanh(qr[a] + kr[a]);
      }
      pr[j] = s;
    }
  });
  // Softmax over the keys and the weighted sum of the values, a row per work item.
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    T* pr = p + bh * Tk;
    T* o = out + bh * D;
    for (int64_t d = 0; d < D; ++d) o[d] = 0;
    T m = neg_inf;
    bool any = false;  // a key that may be attended to (a NaN score counts: NaN propagates)
    for (int64_t j = 0; j < Tk; ++j) {
      any = any || pr[j] != neg_inf;
      m = std::max(m, pr[j]);
    }
    if (!any) {  // no key to attend to
      for (int64_t j = 0; j < Tk; ++j) pr[j] = 0;
      continue;
    }
    T total = 0;
    for (int64_t j = 0; j < Tk; ++j) {
      pr[j] = std::exp(pr[j] - m);
      total += pr[j];
    }
    const T inv = T(1) / total;
    for (int64_t j = 0; j < Tk; ++j) {
      const T w = pr[j] * inv;
      pr[j] = w;
      if (w == 0) continue;
      const T* vr = v + b * v_sb + h * v_sh + j * v_sj;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) o[d] += w * vr[d];
    }
  }
}

// One key's d k_j = (1 - t^2) ds_j va (t = tanh(q + k_j [+ extra_j]), recomputed), written
// or added to dkr, and its terms of dq and dva added to gq and gva. The branches are taken
// outside the loop over features, which then vectorises (a branch inside it did not).
template <typename T, bool kExtra>
inline void key_grads(int64_t A, const T* __restrict qr, const T* __restrict kr,
                      const T* __restrict er, const T* __restrict var, T sj, int accumulate,
                      T* __restrict dkr, T* __restrict gq, T* __restrict gva) {
  if (accumulate) {
#pragma omp simd
    for (int64_t a = 0; a < A; ++a) {
      const T t = fast_tanh(qr[a] + kr[a] + (kExtra ? er[a] : T(0)));
      const T g = (1 - t * t) * sj * var[a];
      dkr[a] += g;
      gq[a] += g;
      gva[a] += t * sj;
    }
  } else {
#pragma omp simd
    for (int64_t a = 0; a < A; ++a) {
      const T t = fast_tanh(qr[a] + kr[a] + (kExtra ? er[a] : T(0)));
      const T g = (1 - t * t) * sj * var[a];
      dkr[a] = g;
      gq[a] += g;
      gva[a] += t * sj;
    }
  }
}

// Gradients of a loss with d out (B, H, 1, D) and d p (B, H, 1, Tk) (dw, or null):
//   dq (B, H, 1, A); dva (B, H, A) per row (the caller sums over B);
//   dk (B, H, Tk, A), contiguous: written, or added to when `accumulate` (the sum over a
//   prepared memory's decoder steps); dv (B, H, Tk, D), contiguous, written, or null (the
//   caller sums the values' outer products over the steps itself).
// tanh(q + k_j) is recomputed, never stored; keys with zero weight cost nothing.
template <typename T>
void backward(int64_t B, int64_t H, int64_t Tk, int64_t A, int64_t D, const T* q, const T* k,
              int64_t k_sb, int64_t k_sh, int64_t k_sj, const T* va, const T* v, int64_t v_sb,
              int64_t v_sh, int64_t v_sj, const T* extra, const T* p, const T* dout,
              const T* dw, T* dq, T* dk, T* dva, T* dv, int accumulate, int threads) {
  const int64_t nb = blocks(Tk);
  const bool parallel = B * H * Tk * A >= kSerialWork;
  std::vector<T> ds(B * H * Tk);               // d score_j
  std::vector<T> partial(B * H * nb * 2 * A);  // per work item: its sums for dq and dva
  // d s_j = p_j (g_j - sum_i p_i g_i), g_j = dout . v_j (+ dw_j). The sum is taken over these
  // g_j (not as dout . out, equal in exact arithmetic): then a row with one key gets exactly 0.
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    const T* pr = p + bh * Tk;
    const T* gout = dout + bh * D;
    T* dsr = ds.data() + bh * Tk;
    for (int64_t j = 0; j < Tk; ++j) {
      if (pr[j] == 0) {
        dsr[j] = 0;
        continue;
      }
      const T* vr = v + b * v_sb + h * v_sh + j * v_sj;
      T g = 0;
#pragma omp simd reduction(+ : g)
      for (int64_t d = 0; d < D; ++d) g += vr[d] * gout[d];
      dsr[j] = dw ? g + dw[bh * Tk + j] : g;
    }
    T c = 0;
    for (int64_t j = 0; j < Tk; ++j) c += pr[j] * dsr[j];
    for (int64_t j = 0; j < Tk; ++j) dsr[j] = pr[j] * (dsr[j] - c);
  }
  // Per key: d k_j = (1 - t_j^2) ds_j va, d v_j = p_j dout; dq sums d k_j, dva sums t_j ds_j.
  for_key_blocks(B, H, Tk, parallel, threads, [&](int64_t b, int64_t h, int64_t blk,
                                                  int64_t j0, int64_t j1) {
    const int64_t bh = b * H + h;
    const T* qr = q + bh * A;
    const T* var = va + h * A;
    const T* pr = p + bh * Tk;
    const T* gout = dout + bh * D;
    const T* dsr = ds.data() + bh * Tk;
    T* gq = partial.data() + (bh * nb + blk) * 2 * A;
    T* gva = gq + A;
    for (int64_t a = 0; a < A; ++a) gq[a] = gva[a] = 0;
    for (int64_t j = j0; j < j1; ++j) {
      const T pj = pr[j], sj = dsr[j];
      if (dv) {
        T* dvr = dv + (bh * Tk + j) * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) dvr[d] = pj * gout[d];
      }
      T* dkr = dk + (bh * Tk + j) * A;
      if (sj == 0) {
        if (!accumulate) std::fill(dkr, dkr + A, T(0));
        continue;
      }
      const T* kr = k + b * k_sb + h * k_sh + j * k_sj;
      if (extra) {
        key_grads<T, true>(A, qr, kr, extra + (bh * Tk + j) * A, var, sj, accumulate, dkr, gq,
                           gva);
      } else {
        key_grads<T, false>(A, qr, kr, nullptr, var, sj, accumulate, dkr, gq, gva);
      }
    }
  });
  for (int64_t bh = 0; bh < B * H; ++bh) {
    T* dqr = dq + bh * A;
    T* dvar = dva + bh * A;
    std::fill(dqr, dqr + A, T(0));
    std::fill(dvar, dvar + A, T(0));
    for (int64_t blk = 0; blk < nb; ++blk) {
      const T* gq = partial.data() + (bh * nb + blk) * 2 * A;
      for (int64_t a = 0; a < A; ++a) {
        dqr[a] += gq[a];
        dvar[a] += gq[A + a];
      }
    }
  }
}

}  // namespace

#define ATTNKIT_STEP(T, SUFFIX)                                                                 \
  extern "C" void attnkit_step_forward_##SUFFIX(                                                \
      int64_t B, int64_t H, int64_t Tk, int64_t A, int64_t D, const T* q, const T* k,           \
      int64_t k_sb, int64_t k_sh, int64_t k_sj, const T* va, const T* v, int64_t v_sb,          \
      int64_t v_sh, int64_t v_sj, const uint8_t* mask, int64_t m_sb, int64_t m_sj,              \
      const T* extra, T* out, T* p, int threads) {                                              \
    forward<T>(B, H, Tk, A, D, q, k, k_sb, k_sh, k_sj, va, v, v_sb, v_sh, v_sj, mask, m_sb,     \
               m_sj, extra, out, p, threads);                                                   \
  }                                                                                             \
  extern "C" void attnkit_step_backward_##SUFFIX(                                               \
      int64_t B, int64_t H, int64_t Tk, int64_t A, int64_t D, const T* q, const T* k,           \
      int64_t k_sb, int64_t k_sh, int64_t k_sj, const T* va, const T* v, int64_t v_sb,          \
      int64_t v_sh, int64_t v_sj, const T* extra, const T* p, const T* dout, const T* dw,       \
      T* dq, T* dk, T* dva, T* dv, int accumulate, int threads) {                               \
    backward<T>(B, H, Tk, A, D, q, k, k_sb, k_sh, k_sj, va, v, v_sb, v_sh, v_sj, extra, p,      \
                dout, dw, dq, dk, dva, dv, accumulate, threads);                                \
  }

ATTNKIT_STEP(float, f32)
ATTNKIT_STEP(double, f64)

// The float tanh of the kernels, for its accuracy test.
extern "C" void attnkit_tanh_f32(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = fast_tanh(x[i]);
}
