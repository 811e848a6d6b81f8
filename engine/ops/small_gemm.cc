#include "engine/ops/small_gemm.h"

#include <algorithm>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#else
#include "oneapi/dnnl/dnnl.h"
#endif

namespace traind::engine {

#if defined(__AVX512F__)
namespace {

constexpr int kLanes = 16;

// One tile of C: MR rows by NV vectors of 16 columns (the last vector's columns masked by `last`), all of it in
// registers for the whole k loop. Each step loads one row of op(B)'s tile and broadcasts MR elements of op(A), whose
// (r, kk) element is a[r * row_step + kk * k_step]: a transposed A costs nothing more than a plain one, since a
// broadcast reads one float wherever it lies. MR * NV accumulators of 16 to 24 keep both FMA pipes busy through
// their latency (4 cycles on Zen 4 / 5, 2 pipes: 8 chains needed).
template <int MR, int NV>
inline void Tile(const float* a, int64_t row_step, int64_t k_step, const float* b, int64_t ldb, int64_t k,
                 __m512 alpha, float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* b_row = b + kk * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(b_row + v * kLanes);
    bv[NV - 1] = _mm512_maskz_loadu_ps(last, b_row + (NV - 1) * kLanes);
    const float* a_k = a + kk * k_step;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a_k[r * row_step]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    float* c_row = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) _mm512_storeu_ps(c_row + v * kLanes, _mm512_mul_ps(acc[r][v], alpha));
    _mm512_mask_storeu_ps(c_row + (NV - 1) * kLanes, last, _mm512_mul_ps(acc[r][NV - 1], alpha));
  }
}

// Rows per tile for NV vectors of columns: 12 to 24 accumulators.
template <int NV>
constexpr int TileRows() {
  return NV == 1 ? 12 : NV == 2 ? 8 : NV == 3 ? 6 : 6;
}

// The last rows (fewer than TileRows) as one tile of exactly `rows` rows.
template <int NV, int R>
inline void TailTile(int rows, const float* a, int64_t row_step, int64_t k_step, const float* b, int64_t ldb,
                     int64_t k, __m512 alpha, float* c, int64_t ldc, __mmask16 last) {
  if constexpr (R > 0) {
    if (rows == R) {
      Tile<R, NV>(a, row_step, k_step, b, ldb, k, alpha, c, ldc, last);
    } else {
      TailTile<NV, R - 1>(rows, a, row_step, k_step, b, ldb, k, alpha, c, ldc, last);
    }
  }
}

// All m rows of one block of NV vector columns.
template <int NV>
void ColumnBlock(int64_t m, const float* a, int64_t row_step, int64_t k_step, const float* b, int64_t ldb, int64_t k,
                 __m512 alpha, float* c, int64_t ldc, __mmask16 last) {
  constexpr int kRows = TileRows<NV>();
  int64_t row = 0;
  for (; row + kRows <= m; row += kRows) {
    Tile<kRows, NV>(a + row * row_step, row_step, k_step, b, ldb, k, alpha, c + row * ldc, ldc, last);
  }
  if (row < m) {
    TailTile<NV, kRows - 1>(static_cast<int>(m - row), a + row * row_step, row_step, k_step, b, ldb, k, alpha,
                            c + row * ldc, ldc, last);
  }
}

// dst[j * dst_ld + i] = src[i * src_ld + j] for a 16 x 16 block: unpacks, then in-lane and cross-lane shuffles
// (64 shuffles for 256 floats, against 256 scalar stores to 16 cache lines). The zero-masking forms with every lane
// kept: GCC 12's plain forms start from _mm512_undefined_ps, which -Wuninitialized flags once inlined.
inline void Transpose16x16(const float* src, int64_t src_ld, float* dst, int64_t dst_ld) {
  constexpr __mmask16 kAll = 0xFFFF;
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_ld);
  // t[2p], t[2p + 1]: rows 2p and 2p + 1 interleaved; per 128-bit lane L: columns 4L, 4L + 1 and 4L + 2, 4L + 3.
  for (int p = 0; p < 8; ++p) {
    t[2 * p] = _mm512_maskz_unpacklo_ps(kAll, r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm512_maskz_unpackhi_ps(kAll, r[2 * p], r[2 * p + 1]);
  }
  // r[4g + c], lane L: column 4L + c of rows 4g .. 4g + 3.
  for (int g = 0; g < 4; ++g) {
    r[4 * g] = _mm512_maskz_shuffle_ps(kAll, t[4 * g], t[4 * g + 2], 0x44);
    r[4 * g + 1] = _mm512_maskz_shuffle_ps(kAll, t[4 * g], t[4 * g + 2], 0xEE);
    r[4 * g + 2] = _mm512_maskz_shuffle_ps(kAll, t[4 * g + 1], t[4 * g + 3], 0x44);
    r[4 * g + 3] = _mm512_maskz_shuffle_ps(kAll, t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  // Lanes gathered across registers: column 4L + c of all rows is lane L of r[c], r[4 + c], r[8 + c], r[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512 even_low = _mm512_maskz_shuffle_f32x4(kAll, r[c], r[4 + c], 0x88);   // lanes 0, 2 of each
    const __m512 odd_low = _mm512_maskz_shuffle_f32x4(kAll, r[c], r[4 + c], 0xDD);    // lanes 1, 3
    const __m512 even_high = _mm512_maskz_shuffle_f32x4(kAll, r[8 + c], r[12 + c], 0x88);
    const __m512 odd_high = _mm512_maskz_shuffle_f32x4(kAll, r[8 + c], r[12 + c], 0xDD);
    _mm512_storeu_ps(dst + c * dst_ld, _mm512_maskz_shuffle_f32x4(kAll, even_low, even_high, 0x88));
    _mm512_storeu_ps(dst + (8 + c) * dst_ld, _mm512_maskz_shuffle_f32x4(kAll, even_low, even_high, 0xDD));
    _mm512_storeu_ps(dst + (4 + c) * dst_ld, _mm512_maskz_shuffle_f32x4(kAll, odd_low, odd_high, 0x88));
    _mm512_storeu_ps(dst + (12 + c) * dst_ld, _mm512_maskz_shuffle_f32x4(kAll, odd_low, odd_high, 0xDD));
  }
}

// packed[kk * n + j] = b[j * ld + kk]: op(B) of a transposed B laid out row-major.
void PackTransposed(const float* b, int64_t ld, int64_t k, int64_t n, float* packed) {
  const int64_t n_whole = n / kLanes * kLanes, k_whole = k / kLanes * kLanes;
  for (int64_t j = 0; j < n_whole; j += kLanes) {
    for (int64_t kk = 0; kk < k_whole; kk += kLanes) Transpose16x16(b + j * ld + kk, ld, packed + kk * n + j, n);
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t first_kk = j < n_whole ? k_whole : 0;  // the blocks covered rows below k_whole of these columns
    for (int64_t kk = first_kk; kk < k; ++kk) packed[kk * n + j] = b[j * ld + kk];
  }
}

}  // namespace

void SmallGemm(int64_t m, int64_t n, int64_t k, float alpha, const MatrixOperand& a, const MatrixOperand& b, float* c,
               int64_t ldc, float* scratch) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, sizeof(float) * n);
    return;
  }
  const float* b_rows = b.data;
  int64_t ldb = b.ld;
  if (b.transposed) {
    PackTransposed(b.data, b.ld, k, n, scratch);
    b_rows = scratch;
    ldb = n;
  }
  const int64_t row_step = a.transposed ? 1 : a.ld;
  const int64_t k_step = a.transposed ? a.ld : 1;
  const __m512 alpha_lanes = _mm512_set1_ps(alpha);
  for (int64_t column = 0; column < n; column += 4 * kLanes) {
    const int64_t width = std::min<int64_t>(4 * kLanes, n - column);
    const int vectors = static_cast<int>((width + kLanes - 1) / kLanes);
    const int last_width = static_cast<int>(width - (vectors - 1) * kLanes);
    const __mmask16 last = static_cast<__mmask16>((1u << last_width) - 1u);
    const float* b_block = b_rows + column;
    float* c_block = c + column;
    switch (vectors) {
      case 1: ColumnBlock<1>(m, a.data, row_step, k_step, b_block, ldb, k, alpha_lanes, c_block, ldc, last); break;
      case 2: ColumnBlock<2>(m, a.data, row_step, k_step, b_block, ldb, k, alpha_lanes, c_block, ldc, last); break;
      case 3: ColumnBlock<3>(m, a.data, row_step, k_step, b_block, ldb, k, alpha_lanes, c_block, ldc, last); break;
      default: ColumnBlock<4>(m, a.data, row_step, k_step, b_block, ldb, k, alpha_lanes, c_block, ldc, last); break;
    }
  }
}

#else  // !__AVX512F__

void SmallGemm(int64_t m, int64_t n, int64_t k, float alpha, const MatrixOperand& a, const MatrixOperand& b, float* c,
               int64_t ldc, float* /*scratch*/) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, sizeof(float) * n);
    return;
  }
  // Row-major sgemm; the callers' sizes are far below its 32-bit limits (attention's sequence and head sizes).
  dnnl_sgemm(a.transposed ? 'T' : 'N', b.transposed ? 'T' : 'N', m, n, k, alpha, a.data, a.ld, b.data, b.ld, 0.0f, c,
             ldc);
}

#endif

}  // namespace traind::engine
