// Statistics in vectors of T for the normalisation kernels (BatchNormalization, LayerNormalizationGrad): sums kept in
// one 64-byte vector of lanes of T and flushed into double every kChunk elements, so each lane adds at most
// kChunk / lanes values in T while the work runs at the vector width of T instead of that of double.
#ifndef TRAIND_ENGINE_OPS_ROW_STATISTICS_H_
#define TRAIND_ENGINE_OPS_ROW_STATISTICS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace traind::engine {

// The lanes of a 64-byte vector of T added up: halved in T down to 16 bytes, then in double. The halves are taken by
// register shuffles, not by copying bytes out of the vector: a memcpy from its address made GCC keep the callers'
// running sums in memory, each loop iteration a store and a reload of the accumulator (about 3x slower).
template <typename T, typename Lanes>
double HorizontalSum(Lanes lanes) {
  static_assert(sizeof(Lanes) == 64 && (sizeof(T) == 4 || sizeof(T) == 8));
  typedef T Half __attribute__((vector_size(32)));
  typedef T Quarter __attribute__((vector_size(16)));
  Quarter quarter;
  if constexpr (sizeof(T) == 4) {
    const Half half = __builtin_shufflevector(lanes, lanes, 0, 1, 2, 3, 4, 5, 6, 7) +
                      __builtin_shufflevector(lanes, lanes, 8, 9, 10, 11, 12, 13, 14, 15);
    quarter = __builtin_shufflevector(half, half, 0, 1, 2, 3) + __builtin_shufflevector(half, half, 4, 5, 6, 7);
  } else {
    const Half half =
        __builtin_shufflevector(lanes, lanes, 0, 1, 2, 3) + __builtin_shufflevector(lanes, lanes, 4, 5, 6, 7);
    quarter = __builtin_shufflevector(half, half, 0, 1) + __builtin_shufflevector(half, half, 2, 3);
  }
  double total = 0;
  for (size_t j = 0; j < sizeof(Quarter) / sizeof(T); ++j) total += static_cast<double>(quarter[j]);
  return total;
}

// Sum and sum of squares of (p[i] - shift) in one pass, added to *sum and *squares. One pass matters where a group
// spans many rows that do not stay in cache (BatchNormalization's channels). Precision: the caller shifts by a value
// from the group (so E[d^2] - E[d]^2 does not cancel catastrophically when |mean| >> stddev), and the vector lanes
// are flushed into the double totals every kChunk elements (each lane adds at most kChunk / lanes values in T).
//
// Written with GCC vector extensions (one 64-byte vector of lanes, lowered to whatever the target has): as
// arrays of lanes, GCC vectorised the loop across iterations and shuffled every element into place.
template <typename T>
void AccumulateShiftedSumAndSquares(const T* __restrict p, int64_t n, T shift, double* sum, double* squares) {
  typedef T Lanes __attribute__((vector_size(64)));
  constexpr int64_t kLanes = 64 / sizeof(T);
  constexpr int64_t kChunk = 1024;
  for (int64_t chunk = 0; chunk < n; chunk += kChunk) {
    const int64_t end = std::min(n, chunk + kChunk);
    Lanes partial_sum = {}, partial_squares = {};
    int64_t i = chunk;
    for (; i + kLanes <= end; i += kLanes) {
      Lanes d;
      std::memcpy(&d, p + i, sizeof(d));  // an unaligned vector load
      d -= shift;
      partial_sum += d;
      partial_squares += d * d;
    }
    double chunk_sum = 0, chunk_squares = 0;
    for (; i < end; ++i) {
      const double d = static_cast<double>(p[i] - shift);
      chunk_sum += d;
      chunk_squares += d * d;
    }
    *sum += chunk_sum + HorizontalSum<T>(partial_sum);
    *squares += chunk_squares + HorizontalSum<T>(partial_squares);
  }
}

// Mean and variance of a row, over its values shifted by one of them (`*shift`, a value of the row on entry), which
// keeps the sums small and, for values near each other, makes p - shift exact. One pass (sums of p - shift and of
// its square) when that is precise enough: the variance is their difference, which cancels in proportion to
// (mean - shift)^2 / variance. A row whose shift lies more than twice the deviation from its mean (a few percent of
// rows of roughly normal values; always a row whose first value is far out) takes a second pass shifted by its
// mean instead, and `*shift` returns that shift: callers centre the row on the same value (p - shift) - mean.
template <typename T>
void ShiftedRowStatistics(const T* __restrict p, int64_t n, T* shift, double* shifted_mean, double* variance) {
  const double count = static_cast<double>(n);
  double sum = 0, squares = 0;
  AccumulateShiftedSumAndSquares(p, n, *shift, &sum, &squares);
  double mean = sum / count;
  double var = squares / count - mean * mean;
  if (!(var >= 0.25 * mean * mean) && std::isfinite(mean)) {  // also when var is NaN
    *shift = static_cast<T>(static_cast<double>(*shift) + mean);
    sum = 0;
    squares = 0;
    AccumulateShiftedSumAndSquares(p, n, *shift, &sum, &squares);
    mean = sum / count;
    var = squares / count - mean * mean;
  }
  *shifted_mean = mean;
  *variance = std::max(0.0, var);
}

// Per channel, a shift for the one-pass statistics below: the mean of up to 64 of the channel's values, at positions
// picked across the tensor by a multiplicative hash. `positions` (> 0) values per channel: channels-last, value p of
// channel c is x[p * channels + c]; channels-first ([batch, channels, row], positions = batch * row), x[(p / row *
// channels + c) * row + p % row]. Close enough to the mean that the callers' check (shift more than 2 standard
// deviations out: sum again around the mean) rarely fires. A channel's first value, the shift before, is a corner
// pixel that padding makes atypical: it was that far out in some channel of most convolutions' outputs, and every
// BatchNormalization and its gradient summed their inputs twice (evenly spaced samples fail the same way when the
// spacing is a multiple of the image: the same pixel of every image).
template <typename T>
void SampledChannelShifts(const T* x, int64_t positions, int64_t channels, bool channels_last, int64_t row,
                          T* shifts) {
  const int64_t samples = std::min<int64_t>(positions, 64);
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0;
    for (int64_t s = 0; s < samples; ++s) {
      const int64_t p = static_cast<int64_t>((static_cast<uint64_t>(s) * 0x9E3779B97F4A7C15ull) %
                                             static_cast<uint64_t>(positions));
      sum += static_cast<double>(channels_last ? x[p * channels + c] : x[(p / row * channels + c) * row + p % row]);
    }
    shifts[c] = static_cast<T>(sum / static_cast<double>(samples));
  }
}

// Channels-last moments: rows [first, last) of a [rows, channels] matrix x (and dy, when given), per channel c with
// d = x - shift[c]: moments[c] += sum d, moments[channels + c] += sum d^2 and, with dy, moments[2 * channels + c] +=
// sum dy, moments[3 * channels + c] += sum dy * d. A channel's values lie `channels` apart, so the channels are the
// vector lanes: 64-byte vectors of channels summed down the rows in T, flushed into the double moments every
// kChannelsLastRowsPerFlush rows (each lane adds at most that many values in T).
inline constexpr int64_t kChannelsLastRowsPerFlush = 64;

// Rows per block for callers that split the rows into fixed blocks (independent of the thread count, so that adding
// the blocks' moments in order is deterministic): about 16K elements, whole flushes.
inline int64_t ChannelsLastRowsPerBlock(int64_t channels) {
  const int64_t rows = 16384 / std::max<int64_t>(1, channels);
  return std::max(kChannelsLastRowsPerFlush, rows / kChannelsLastRowsPerFlush * kChannelsLastRowsPerFlush);
}

template <typename T>
void AddChannelsLastMoments(const T* __restrict x, const T* __restrict dy, int64_t channels, int64_t first,
                            int64_t last, const T* __restrict shift, double* __restrict moments) {
  for (; last - first > kChannelsLastRowsPerFlush; first += kChannelsLastRowsPerFlush) {
    AddChannelsLastMoments(x, dy, channels, first, first + kChannelsLastRowsPerFlush, shift, moments);
  }
  typedef T Lanes __attribute__((vector_size(64)));
  constexpr int64_t kLanes = 64 / sizeof(T);
  const bool with_gradient = dy != nullptr;
  int64_t c = 0;
  for (; c + kLanes <= channels; c += kLanes) {
    Lanes center, sum = {}, squares = {}, dy_sum = {}, dy_x_sum = {};
    std::memcpy(&center, shift + c, sizeof(center));
    for (int64_t r = first; r < last; ++r) {
      Lanes value;
      std::memcpy(&value, x + r * channels + c, sizeof(value));
      const Lanes d = value - center;
      sum += d;
      squares += d * d;
      if (with_gradient) {
        Lanes g;
        std::memcpy(&g, dy + r * channels + c, sizeof(g));
        dy_sum += g;
        dy_x_sum += g * d;
      }
    }
    for (int64_t j = 0; j < kLanes; ++j) {
      moments[c + j] += static_cast<double>(sum[j]);
      moments[channels + c + j] += static_cast<double>(squares[j]);
      if (with_gradient) {
        moments[2 * channels + c + j] += static_cast<double>(dy_sum[j]);
        moments[3 * channels + c + j] += static_cast<double>(dy_x_sum[j]);
      }
    }
  }
  for (; c < channels; ++c) {  // The channels past the last whole vector.
    T sum = 0, squares = 0, dy_sum = 0, dy_x_sum = 0;
    for (int64_t r = first; r < last; ++r) {
      const T d = x[r * channels + c] - shift[c];
      sum += d;
      squares += d * d;
      if (with_gradient) {
        dy_sum += dy[r * channels + c];
        dy_x_sum += dy[r * channels + c] * d;
      }
    }
    moments[c] += static_cast<double>(sum);
    moments[channels + c] += static_cast<double>(squares);
    if (with_gradient) {
      moments[2 * channels + c] += static_cast<double>(dy_sum);
      moments[3 * channels + c] += static_cast<double>(dy_x_sum);
    }
  }
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_ROW_STATISTICS_H_
