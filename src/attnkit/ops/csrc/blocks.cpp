// Additive scores for a block of queries and a block of keys (the chunked path's inner step):
// s_ij = sum_a va_a tanh(q_ia + k_ja), and its gradients in one pass over the pairs.
//
// Built with step.cpp by attnkit/attention/native.py and called through ctypes by the wrappers
// of attnkit/attention/bindings.py; the math is that of attnkit/attention/kernels.py's eager
// code, which the tests compare it with.
//
// Shapes (BH = B * H rows of queries or keys):
//   q    (B, H, Tq, A)  strides (q_sb, q_sh, q_si), last dim contiguous
//   k    (B, H, Tk, A)  strides (k_sb, k_sh, k_sj), last dim contiguous
//   va   (H, A)         the score's v, contiguous
//   s    (B, H, Tq, Tk) scores (forward's output), contiguous
//   grad (B, H, Tq, Tk) d loss / d s, contiguous
//   dq (B, H, Tq, A), dk (B, H, Tk, A), dva (H, A): backward's outputs, contiguous, written.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "tanh.h"

namespace {

using attnkit::fast_tanh;

constexpr int64_t kTile = 32;  // keys per work item: a tile of k and of dk stays in L1
constexpr int64_t kSerialWork = 1 << 15;  // (query, key, feature) triples: fewer run on one thread

inline int64_t tiles(int64_t tk) { return (tk + kTile - 1) / kTile; }

// out (n, A) = scale * the sum of `used` parts (used, n, A), in a fixed order, rows shared out
// over the threads of the enclosing parallel region (or all rows, outside one).
template <typename T>
void sum_parts(T* out, const T* parts, int64_t used, int64_t n, int64_t A, const T* scale) {
#pragma omp for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T* o = out + i * A;
    std::fill(o, o + A, T(0));
    for (int64_t t = 0; t < used; ++t) {
      const T* part = parts + (t * n + i) * A;
#pragma omp simd
      for (int64_t a = 0; a < A; ++a) o[a] += part[a];
    }
    if (scale) {
#pragma omp simd
      for (int64_t a = 0; a < A; ++a) o[a] *= scale[a];
    }
  }  // implicit barrier (inside a parallel region): the parts are read before they are reused
}

template <typename T>
void scores(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t A, const T* q, int64_t q_sb,
            int64_t q_sh, int64_t q_si, const T* k, int64_t k_sb, int64_t k_sh, int64_t k_sj,
            const T* va, T* s, int threads) {
  const int64_t nt = tiles(Tk);
  const bool parallel = B * H * Tq * Tk * A >= kSerialWork;
#pragma omp parallel for collapse(2) num_threads(threads) schedule(static) if (parallel)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    for (int64_t jt = 0; jt < nt; ++jt) {
      const int64_t b = bh / H, h = bh % H;
      const T* __restrict var = va + h * A;
      const int64_t j1 = std::min(Tk, (jt + 1) * kTile);
      for (int64_t i = 0; i < Tq; ++i) {
        const T* __restrict qr = q + b * q_sb + h * q_sh + i * q_si;
        T* sr = s + (bh * Tq + i) * Tk;
        for (int64_t j = jt * kTile; j < j1; ++j) {
          const T* __restrict kr = k + b * k_sb + h * k_sh + j * k_sj;
          T acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t a = 0; a < A; ++a) acc += var[a] * fast_tanh(qr[a] + kr[a]);
          sr[j] = acc;
        }
      }
    }
  }
}

// The frame both backward kernels share. With t_ija = tanh(q_ia + k_ja), a given d loss / d s_ij
// = ds_ij and w_ija = (1 - t_ija^2) ds_ij:
//   dq_ia = va_a sum_j w_ija,  dk_ja = va_a sum_i w_ija,  dva_a = sum_{b, i, j} t_ija ds_ij.
// A work item is a tile of keys of one row (b, h), so it owns its dk rows; each thread sums its
// dq and dva in its own buffers, added up in a fixed order at the end (the result does not
// depend on timing). `tile(b, h, j0, j1, dk_tile, my_dq, my_dva, scratch)` adds the sums over
// all queries for keys j0..j1-1, without the factor va: into the zeroed dk_tile (j1 - j0, A),
// my_dq (Tq, A) and my_dva (A); scratch is the thread's (kTile, A) buffer.
template <typename T, typename Tile>
void sum_gradients(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t A, const T* va, T* dq,
                   T* dk, T* dva, int threads, Tile tile) {
  const int64_t nt = tiles(Tk);
  const int used = B * H * Tq * Tk * A >= kSerialWork ? std::max(1, threads) : 1;
  std::vector<T> dq_part(used * Tq * A);
  std::vector<T> dva_part(used * H * A, T(0));
#pragma omp parallel num_threads(used)
  {
#ifdef _OPENMP
    const int64_t tid = omp_get_thread_num();
#else
    const int64_t tid = 0;
#endif
    T* __restrict my_dq = dq_part.data() + tid * Tq * A;
    std::vector<T> scratch(kTile * A);
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const T* __restrict var = va + h * A;
      std::fill(my_dq, my_dq + Tq * A, T(0));
#pragma omp for schedule(static)
      for (int64_t jt = 0; jt < nt; ++jt) {
        const int64_t j0 = jt * kTile, j1 = std::min(Tk, j0 + kTile);
        T* __restrict dk_tile = dk + (bh * Tk + j0) * A;
        std::fill(dk_tile, dk_tile + (j1 - j0) * A, T(0));
        tile(b, h, j0, j1, dk_tile, my_dq, dva_part.data() + (tid * H + h) * A, scratch.data());
        for (int64_t j = j0; j < j1; ++j) {
          T* dkr = dk_tile + (j - j0) * A;
#pragma omp simd
          for (int64_t a = 0; a < A; ++a) dkr[a] *= var[a];
        }
      }  // implicit barrier: every thread's dq part for this row is complete
      sum_parts(dq + bh * Tq * A, dq_part.data(), used, Tq, A, var);
    }
  }
  sum_parts<T>(dva, dva_part.data(), used, H, A, nullptr);
}

// The gradients for a given grad (B, H, Tq, Tk) = d loss / d s, tanh recomputed; pairs with
// grad_ij == 0 (masked) are skipped.
template <typename T>
void backward(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t A, const T* q, int64_t q_sb,
              int64_t q_sh, int64_t q_si, const T* k, int64_t k_sb, int64_t k_sh, int64_t k_sj,
              const T* va, const T* grad, T* dq, T* dk, T* dva, int threads) {
  sum_gradients<T>(B, H, Tq, Tk, A, va, dq, dk, dva, threads,
                   [&](int64_t b, int64_t h, int64_t j0, int64_t j1, T* __restrict dk_tile,
                       T* my_dq, T* __restrict my_dva, T*) {
    const int64_t bh = b * H + h;
    for (int64_t i = 0; i < Tq; ++i) {
      const T* __restrict qr = q + b * q_sb + h * q_sh + i * q_si;
      const T* gr = grad + (bh * Tq + i) * Tk;
      T* __restrict dqr = my_dq + i * A;
      for (int64_t j = j0; j < j1; ++j) {
        const T g = gr[j];
        if (g == 0) continue;
        const T* __restrict kr = k + b * k_sb + h * k_sh + j * k_sj;
        T* __restrict dkr = dk_tile + (j - j0) * A;
#pragma omp simd
        for (int64_t a = 0; a < A; ++a) {
          const T t = fast_tanh(qr[a] + kr[a]);
          const T tg = t * g;
          const T w = g - tg * t;
          dqr[a] += w;
          dkr[a] += w;
          my_dva[a] += tg;
        }
      }
    }
  });
}

// The whole backward of a block of attention, from d loss / d context to the score inputs,
// computing each t_ija once (backward() above needs a forward pass first, to recompute the
// scores for ds). Per query row i and key j:
//   s_ij = sum_a va_a t_ija;  p_ij = exp(s_ij - lse_i), 0 where mask_ij == 0;
//   ds_ij = p_ij (dpd_ij), with dpd_ij = dp_ij - delta_i given (dp = d loss / d p);
// then the gradients of backward() with grad = ds. p is written out (the caller needs it for
// the values' gradient, p^T dout: a matrix product, faster outside).
//   lse (B, H, Tq) contiguous (+inf for a row with no key); dpd (B, H, Tq, Tk) contiguous;
//   mask uint8 (B or 1, Tq or 1, Tk) with strides (m_sb, m_si, m_sj), or null; p (B, H, Tq, Tk).
template <typename T>
void attention_backward(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t A, const T* q,
                        int64_t q_sb, int64_t q_sh, int64_t q_si, const T* k, int64_t k_sb,
                        int64_t k_sh, int64_t k_sj, const T* va, const T* lse, const T* dpd,
                        const uint8_t* mask, int64_t m_sb, int64_t m_si, int64_t m_sj, T* p,
                        T* dq, T* dk, T* dva, int threads) {
  sum_gradients<T>(B, H, Tq, Tk, A, va, dq, dk, dva, threads,
                   [&](int64_t b, int64_t h, int64_t j0, int64_t j1, T* __restrict dk_tile,
                       T* my_dq, T* __restrict my_dva, T* t_tile) {
    const int64_t bh = b * H + h;
    const T* __restrict var = va + h * A;
    T ds[kTile];
    for (int64_t i = 0; i < Tq; ++i) {
      const T* __restrict qr = q + b * q_sb + h * q_sh + i * q_si;
      const T lse_i = lse[bh * Tq + i];
      const T* dpd_r = dpd + (bh * Tq + i) * Tk;
      T* pr = p + (bh * Tq + i) * Tk;
      T* __restrict dqr = my_dq + i * A;
      if (lse_i == INFINITY) {  // no key for this query
        std::fill(pr + j0, pr + j1, T(0));
        continue;
      }
      bool any = false;  // t_ija of the tile's keys into t_tile, then ds
      for (int64_t j = j0; j < j1; ++j) {
        T* __restrict tr = t_tile + (j - j0) * A;
        ds[j - j0] = 0;
        if (mask && !mask[b * m_sb + i * m_si + j * m_sj]) {
          pr[j] = 0;
          std::fill(tr, tr + A, T(0));  // read below (times ds = 0): no stale NaN
          continue;
        }
        const T* __restrict kr = k + b * k_sb + h * k_sh + j * k_sj;
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t a = 0; a < A; ++a) {
          const T t = fast_tanh(qr[a] + kr[a]);
          tr[a] = t;
          s += var[a] * t;
        }
        const T pj = std::exp(s - lse_i);
        pr[j] = pj;
        ds[j - j0] = pj * dpd_r[j];
        any = any || ds[j - j0] != 0;
      }
      if (!any) continue;
      // Four keys at a time: their dq and dva terms are summed before touching memory.
      int64_t j = j0;
      for (; j + 4 <= j1; j += 4) {
        const T* g = ds + (j - j0);
        if (g[0] == 0 && g[1] == 0 && g[2] == 0 && g[3] == 0) continue;
        const T g0 = g[0], g1 = g[1], g2 = g[2], g3 = g[3];
        const T* __restrict t0 = t_tile + (j - j0) * A;
        const T* __restrict t1 = t0 + A;
        const T* __restrict t2 = t1 + A;
        const T* __restrict t3 = t2 + A;
        T* __restrict k0 = dk_tile + (j - j0) * A;
        T* __restrict k1 = k0 + A;
        T* __restrict k2 = k1 + A;
        T* __restrict k3 = k2 + A;
#pragma omp simd
        for (int64_t a = 0; a < A; ++a) {
          const T tg0 = t0[a] * g0, tg1 = t1[a] * g1, tg2 = t2[a] * g2, tg3 = t3[a] * g3;
          const T w0 = g0 - tg0 * t0[a], w1 = g1 - tg1 * t1[a];
          const T w2 = g2 - tg2 * t2[a], w3 = g3 - tg3 * t3[a];
          k0[a] += w0;
          k1[a] += w1;
          k2[a] += w2;
          k3[a] += w3;
          dqr[a] += (w0 + w1) + (w2 + w3);
          my_dva[a] += (tg0 + tg1) + (tg2 + tg3);
        }
      }
      for (; j < j1; ++j) {
        const T g = ds[j - j0];
        if (g == 0) continue;
        const T* __restrict tr = t_tile + (j - j0) * A;
        T* __restrict dkr = dk_tile + (j - j0) * A;
#pragma omp simd
        for (int64_t a = 0; a < A; ++a) {
          const T tg = tr[a] * g;
          const T w = g - tg * tr[a];
          dqr[a] += w;
          dkr[a] += w;
          my_dva[a] += tg;
        }
      }
    }
  });
}

}  // namespace

#define ATTNKIT_BLOCKS(T, SUFFIX)                                                               \
  extern "C" void attnkit_additive_scores_##SUFFIX(                                             \
      int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t A, const T* q, int64_t q_sb,        \
      int64_t q_sh, int64_t q_si, const T* k, int64_t k_sb, int64_t k_sh, int64_t k_sj,         \
      const T* va, T* s, int threads) {                                                         \
    scores<T>(B, H, Tq, Tk, A, q, q_sb, q_sh, q_si, k, k_sb, k_sh, k_sj, va, s, threads);       \
  }                                                                                             \
  extern "C" void attnkit_additive_backward_##SUFFIX(                                           \
      int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t A, const T* q, int64_t q_sb,        \
      int64_t q_sh, int64_t q_si, const T* k, int64_t k_sb, int64_t k_sh, int64_t k_sj,         \
      const T* va, const T* grad, T* dq, T* dk, T* dva, int threads) {                          \
    backward<T>(B, H, Tq, Tk, A, q, q_sb, q_sh, q_si, k, k_sb, k_sh, k_sj, va, grad, dq, dk,    \
                dva, threads);                                                                  \
  }                                                                                             \
  extern "C" void attnkit_additive_attention_backward_##SUFFIX(                                 \
      int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t A, const T* q, int64_t q_sb,        \
      int64_t q_sh, int64_t q_si, const T* k, int64_t k_sb, int64_t k_sh, int64_t k_sj,         \
      const T* va, const T* lse, const T* dpd, const uint8_t* mask, int64_t m_sb, int64_t m_si, \
      int64_t m_sj, T* p, T* dq, T* dk, T* dva, int threads) {                                  \
    attention_backward<T>(B, H, Tq, Tk, A, q, q_sb, q_sh, q_si, k, k_sb, k_sh, k_sj, va, lse,   \
                          dpd, mask, m_sb, m_si, m_sj, p, dq, dk, dva, threads);                \
  }

ATTNKIT_BLOCKS(float, f32)
ATTNKIT_BLOCKS(double, f64)
