// ScaledDotProductAttention and its gradient on the CPU (the contract is attention_ops.h): one batch item (a head of
// one sequence) at a time, its products by SmallGemm and its score matrix kept in the core's cache. Unfused, the
// transformer encoder's attention (16 sequences x 4 heads of 64 x 32) wrote and read back its [16, 4, 64, 64] scores
// four times forward and five backward through separate MatMul, Mul, Softmax, SoftmaxGrad and product nodes.
#include "engine/ops/attention_ops.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/ops/row_statistics.h"
#include "engine/ops/small_gemm.h"
#include "engine/ops/softmax_slab.h"

namespace traind::engine {

absl::StatusOr<AttentionAttributes> ParseAttentionAttributes(const KernelInit& init) {
  AttentionAttributes attributes;
  TRAIND_ASSIGN_OR_RETURN(attributes.scale, init.GetFloat("scale", 1.0f));
  if (!std::isfinite(attributes.scale)) return init.Error("attribute 'scale' must be finite");
  TRAIND_ASSIGN_OR_RETURN(const int64_t trans_b, init.GetInt("transB", 0));
  if (trans_b != 0 && trans_b != 1) return init.Error("attribute 'transB' must be 0 or 1");
  attributes.trans_b = trans_b == 1;
  return attributes;
}

namespace {

std::string Operands(const Tensor& q, const Tensor& b, const Tensor& v) {
  return absl::StrCat("Q ", q.DebugString(), ", B ", b.DebugString(), ", V ", v.DebugString());
}

}  // namespace

absl::StatusOr<AttentionShapes> CheckAttentionInputs(const Tensor& q, const Tensor& b, const Tensor& v,
                                                     const AttentionAttributes& attributes) {
  if (q.dtype() != b.dtype() || q.dtype() != v.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("ScaledDotProductAttention: dtypes differ: ", Operands(q, b, v)));
  }
  if (q.rank() < 2 || b.rank() != q.rank() || v.rank() != q.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScaledDotProductAttention: Q, B and V must have one rank >= 2: ", Operands(q, b, v)));
  }
  const size_t rank = static_cast<size_t>(q.rank());
  AttentionShapes shapes;
  shapes.batch.assign(q.shape().begin(), q.shape().end() - 2);
  for (size_t i = 0; i + 2 < rank; ++i) {
    if (b.dim(i) != q.dim(i) || v.dim(i) != q.dim(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ScaledDotProductAttention: batch dims differ: ", Operands(q, b, v)));
    }
    shapes.batches *= q.dim(i);
  }
  shapes.lq = q.dim(rank - 2);
  shapes.d = q.dim(rank - 1);
  shapes.lk = attributes.trans_b ? b.dim(rank - 2) : b.dim(rank - 1);
  shapes.dv = v.dim(rank - 1);
  const int64_t b_depth = attributes.trans_b ? b.dim(rank - 1) : b.dim(rank - 2);
  if (b_depth != shapes.d || v.dim(rank - 2) != shapes.lk) {
    return absl::InvalidArgumentError(absl::StrCat("ScaledDotProductAttention: inner dims differ: ", Operands(q, b, v),
                                                   attributes.trans_b ? " (B transposed)" : ""));
  }
  return shapes;
}

absl::StatusOr<AttentionShapes> CheckAttentionGradInputs(const Tensor& dout, const Tensor& q, const Tensor& b,
                                                         const Tensor& v, const Tensor& p,
                                                         const AttentionAttributes& attributes) {
  TRAIND_ASSIGN_OR_RETURN(AttentionShapes shapes, CheckAttentionInputs(q, b, v, attributes));
  Shape o_shape = shapes.batch, p_shape = shapes.batch;
  o_shape.insert(o_shape.end(), {shapes.lq, shapes.dv});
  p_shape.insert(p_shape.end(), {shapes.lq, shapes.lk});
  if (dout.dtype() != q.dtype() || dout.shape() != o_shape || p.dtype() != q.dtype() || p.shape() != p_shape) {
    return absl::InvalidArgumentError(absl::StrCat("ScaledDotProductAttentionGrad: dO ", dout.DebugString(), " and P ",
                                                   p.DebugString(), " must be [..., Lq, Dv] and [..., Lq, Lk] for ",
                                                   Operands(q, b, v)));
  }
  return shapes;
}

namespace {

Shape WithMatrix(const Shape& batch, int64_t rows, int64_t cols) {
  Shape shape = batch;
  shape.push_back(rows);
  shape.push_back(cols);
  return shape;
}

// Calls fn(item, scratch) for every batch item in [0, batches), in parallel chunks; each chunk has its own
// `scratch_floats` floats from the run's pool (within the session's memory budget). Chunks of at least ~2^18
// multiply-adds (`item_work` each), so that small problems stay on one thread.
template <typename Fn>
absl::Status ForEachBatchItem(KernelContext& context, int64_t batches, int64_t item_work, int64_t scratch_floats,
                              const Fn& fn) {
  std::mutex mutex;
  absl::Status status;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, item_work));
  context.threads().ParallelFor(batches, grain, [&](int64_t begin, int64_t end) {
    std::shared_ptr<Buffer> scratch;
    if (scratch_floats > 0) {
      absl::StatusOr<std::shared_ptr<Buffer>> acquired =
          context.buffers().Acquire(static_cast<size_t>(scratch_floats) * sizeof(float));
      if (!acquired.ok()) {
        std::lock_guard<std::mutex> lock(mutex);
        status.Update(acquired.status());
        return;
      }
      scratch = *std::move(acquired);
    }
    float* scratch_data = scratch != nullptr ? static_cast<float*>(scratch->data()) : nullptr;
    for (int64_t item = begin; item < end; ++item) fn(item, scratch_data);
  });
  return status;
}

// Asks for `floats` floats from `data` on into L2 ahead of their use (the next batch item's operands, while this one
// computes): in a training step they come from memory, and each item's products are too short for the hardware
// prefetcher to get ahead of them.
void PrefetchToL2(const float* data, int64_t floats) {
  const char* bytes = reinterpret_cast<const char*>(data);
  const int64_t size = floats * static_cast<int64_t>(sizeof(float));
  for (int64_t offset = 0; offset < size; offset += 64) __builtin_prefetch(bytes + offset, 0, 2);
}

// dS = scale * P * (dP - sum(dP * P)) over each of `rows` rows of n, in place over dP: Softmax's gradient (SoftmaxGrad's
// order of operations) times the scale the scores were multiplied by before it.
#if defined(__AVX512F__)
// In 16-lane vectors with a masked tail, four rows at a time so that the core overlaps their chains of dependent adds
// (attention's rows of 64: one row at a time took 1.4 us per 64 x 64 head on Zen 5; the sum of a row is its lanes'
// sums added by HorizontalSum, row_statistics.h).
void ScaledSoftmaxGradRows(float* __restrict dp, const float* __restrict p, int64_t rows, int64_t n, float scale) {
  constexpr int kGroup = 4, kLanes = 16;
  const int64_t whole = n / kLanes * kLanes;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - whole)) - 1u);
  const __m512 scale_lanes = _mm512_set1_ps(scale);
  for (int64_t first = 0; first < rows; first += kGroup) {
    const int count = static_cast<int>(std::min<int64_t>(kGroup, rows - first));
    __m512 sums[kGroup];
    for (int r = 0; r < count; ++r) sums[r] = _mm512_setzero_ps();
    for (int64_t a = 0; a < whole; a += kLanes) {
      for (int r = 0; r < count; ++r) {
        const int64_t at = (first + r) * n + a;
        sums[r] = _mm512_fmadd_ps(_mm512_loadu_ps(dp + at), _mm512_loadu_ps(p + at), sums[r]);
      }
    }
    if (tail != 0) {
      for (int r = 0; r < count; ++r) {
        const int64_t at = (first + r) * n + whole;
        sums[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, dp + at), _mm512_maskz_loadu_ps(tail, p + at), sums[r]);
      }
    }
    for (int r = 0; r < count; ++r) {
      const __m512 sum = _mm512_set1_ps(static_cast<float>(HorizontalSum<float>(sums[r])));
      float* dp_row = dp + (first + r) * n;
      const float* p_row = p + (first + r) * n;
      for (int64_t a = 0; a < whole; a += kLanes) {
        const __m512 ds = _mm512_mul_ps(_mm512_loadu_ps(p_row + a), _mm512_sub_ps(_mm512_loadu_ps(dp_row + a), sum));
        _mm512_storeu_ps(dp_row + a, _mm512_mul_ps(scale_lanes, ds));
      }
      if (tail != 0) {
        const __m512 ds = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, p_row + whole),
                                        _mm512_sub_ps(_mm512_maskz_loadu_ps(tail, dp_row + whole), sum));
        _mm512_mask_storeu_ps(dp_row + whole, tail, _mm512_mul_ps(scale_lanes, ds));
      }
    }
  }
}
#else
// The sum in 16 lanes (vectorised), then added in order.
void ScaledSoftmaxGradRows(float* __restrict dp, const float* __restrict p, int64_t rows, int64_t n, float scale) {
  constexpr int kLanes = 16;
  for (int64_t row = 0; row < rows; ++row, dp += n, p += n) {
    float lanes[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += dp[j + l] * p[j + l];
    }
    float sum = 0.0f;
    for (; j < n; ++j) sum += dp[j] * p[j];
    for (int l = 0; l < kLanes; ++l) sum += lanes[l];
    for (j = 0; j < n; ++j) dp[j] = scale * (p[j] * (dp[j] - sum));
  }
}
#endif

class ScaledDotProductAttentionKernel final : public Kernel {
 public:
  explicit ScaledDotProductAttentionKernel(AttentionAttributes attributes) : attributes_(attributes) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* q, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* v, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(const AttentionShapes s, CheckAttentionInputs(*q, *b, *v, attributes_));
    if (q->dtype() != DataType::kFloat32) return UnsupportedDtype("ScaledDotProductAttention", q->dtype());
    TRAIND_ASSIGN_OR_RETURN(Tensor * o, context.AllocateOutput(0, DataType::kFloat32, WithMatrix(s.batch, s.lq, s.dv)));
    // P is written only where something reads it (the gradient); otherwise each item's scores stay in scratch.
    const bool keep_p = context.wants_output(1);
    float* p_data = nullptr;
    if (keep_p) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * p, context.AllocateOutput(1, DataType::kFloat32, WithMatrix(s.batch, s.lq, s.lk)));
      p_data = p->mutable_data<float>();
    }
    const int64_t score_floats = keep_p ? 0 : s.lq * s.lk;
    const MatrixOperand b_layout{nullptr, attributes_.trans_b ? s.d : s.lk, attributes_.trans_b};
    const int64_t pack_floats = SmallGemmScratchFloats(b_layout, s.d, s.lk);
    const float* q_data = q->data<float>();
    const float* b_data = b->data<float>();
    const float* v_data = v->data<float>();
    float* o_data = o->mutable_data<float>();
    return ForEachBatchItem(
        context, s.batches, s.lq * s.lk * (s.d + s.dv), score_floats + pack_floats, [&](int64_t i, float* scratch) {
          float* scores = keep_p ? p_data + i * s.lq * s.lk : scratch;
          float* pack = scratch + score_floats;
          SmallGemm(s.lq, s.lk, s.d, attributes_.scale, {q_data + i * s.lq * s.d, s.d, false},
                    {b_data + i * s.d * s.lk, b_layout.ld, b_layout.transposed}, scores, s.lk, pack);
          if (s.lk > 0) SoftmaxRows(scores, scores, s.lq, s.lk, /*log=*/false);
          SmallGemm(s.lq, s.dv, s.lk, 1.0f, {scores, s.lk, false}, {v_data + i * s.lk * s.dv, s.dv, false},
                    o_data + i * s.lq * s.dv, s.dv, nullptr);
        });
  }

 private:
  AttentionAttributes attributes_;
};

class ScaledDotProductAttentionGradKernel final : public Kernel {
 public:
  explicit ScaledDotProductAttentionGradKernel(AttentionAttributes attributes) : attributes_(attributes) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dout, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* q, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* v, context.RequiredInput(3));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* p, context.RequiredInput(4));
    TRAIND_ASSIGN_OR_RETURN(const AttentionShapes s,
                            CheckAttentionGradInputs(*dout, *q, *b, *v, *p, attributes_));
    if (q->dtype() != DataType::kFloat32) return UnsupportedDtype("ScaledDotProductAttentionGrad", q->dtype());
    const bool want_dq = context.wants_output(0), want_db = context.wants_output(1), want_dv = context.wants_output(2);
    float* dq_data = nullptr;
    float* db_data = nullptr;
    float* dv_data = nullptr;
    if (want_dq) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * dq, context.AllocateOutput(0, DataType::kFloat32, q->shape()));
      dq_data = dq->mutable_data<float>();
    }
    if (want_db) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * db, context.AllocateOutput(1, DataType::kFloat32, b->shape()));
      db_data = db->mutable_data<float>();
    }
    if (want_dv) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * dv, context.AllocateOutput(2, DataType::kFloat32, v->shape()));
      dv_data = dv->mutable_data<float>();
    }
    const bool trans_b = attributes_.trans_b;
    const bool want_scores = want_dq || want_db;
    // Scratch: the item's dP, turned into dS in place; and B^T packed for the products reading a transposed B
    // (dP = dO V^T always, dQ = dS B^T when B holds the keys transposed).
    const int64_t score_floats = want_scores ? s.lq * s.lk : 0;
    const int64_t pack_floats = want_scores ? std::max(s.dv * s.lk, trans_b ? int64_t{0} : s.lk * s.d) : 0;
    const float* dout_data = dout->data<float>();
    const float* q_data = q->data<float>();
    const float* b_data = b->data<float>();
    const float* v_data = v->data<float>();
    const float* p_data = p->data<float>();
    return ForEachBatchItem(
        context, s.batches, s.lq * s.lk * (2 * s.d + 2 * s.dv), score_floats + pack_floats,
        [&](int64_t i, float* scratch) {
          const float* dout_i = dout_data + i * s.lq * s.dv;
          const float* q_i = q_data + i * s.lq * s.d;
          const float* b_i = b_data + i * s.d * s.lk;
          const float* v_i = v_data + i * s.lk * s.dv;
          const float* p_i = p_data + i * s.lq * s.lk;
          // The next item's operands, a part before each product of this one.
          const bool next = i + 1 < s.batches;
          if (next) {
            PrefetchToL2(p_i + s.lq * s.lk, s.lq * s.lk);
            PrefetchToL2(dout_i + s.lq * s.dv, s.lq * s.dv);
          }
          if (want_dv) {  // dV = P^T dO
            SmallGemm(s.lk, s.dv, s.lq, 1.0f, {p_i, s.lk, true}, {dout_i, s.dv, false}, dv_data + i * s.lk * s.dv,
                      s.dv, nullptr);
          }
          if (!want_scores) return;
          float* ds = scratch;
          float* pack = scratch + score_floats;
          if (next) PrefetchToL2(v_i + s.lk * s.dv, s.lk * s.dv);
          // dP = dO V^T, then dS in place.
          SmallGemm(s.lq, s.lk, s.dv, 1.0f, {dout_i, s.dv, false}, {v_i, s.dv, true}, ds, s.lk, pack);
          ScaledSoftmaxGradRows(ds, p_i, s.lq, s.lk, attributes_.scale);
          if (next) PrefetchToL2(b_i + s.d * s.lk, s.d * s.lk);
          if (want_dq) {  // dQ = dS op(B)^T: the keys as stored, [Lk, D]
            const MatrixOperand keys = trans_b ? MatrixOperand{b_i, s.d, false} : MatrixOperand{b_i, s.lk, true};
            SmallGemm(s.lq, s.d, s.lk, 1.0f, {ds, s.lk, false}, keys, dq_data + i * s.lq * s.d, s.d, pack);
          }
          if (next) PrefetchToL2(q_i + s.lq * s.d, s.lq * s.d);
          if (want_db) {
            if (trans_b) {  // dK = dS^T Q
              SmallGemm(s.lk, s.d, s.lq, 1.0f, {ds, s.lk, true}, {q_i, s.d, false}, db_data + i * s.lk * s.d, s.d,
                        nullptr);
            } else {  // d(K^T) = Q^T dS
              SmallGemm(s.d, s.lk, s.lq, 1.0f, {q_i, s.d, true}, {ds, s.lk, false}, db_data + i * s.d * s.lk, s.lk,
                        nullptr);
            }
          }
        });
  }

 private:
  AttentionAttributes attributes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateScaledDotProductAttentionKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(const AttentionAttributes attributes, ParseAttentionAttributes(init));
  return std::unique_ptr<Kernel>(new ScaledDotProductAttentionKernel(attributes));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateScaledDotProductAttentionGradKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(const AttentionAttributes attributes, ParseAttentionAttributes(init));
  return std::unique_ptr<Kernel>(new ScaledDotProductAttentionGradKernel(attributes));
}

}  // namespace traind::engine
