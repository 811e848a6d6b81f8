// ScaledDotProductAttention and its gradient on the CPU (the contract is attention_ops.h): one batch item (a head of
// one sequence) at a time, its products by SmallGemm and its score matrix kept in the core's cache. Unfused, the
// transformer encoder's attention (16 sequences x 4 heads of 64 x 32) wrote and read back its [16, 4, 64, 64] scores
// four times forward and five backward through separate MatMul, Mul, Softmax, SoftmaxGrad and product nodes.
#include "engine/ops/attention_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/core/shape.h"
#include "engine/core/status_macros.h"
#include "engine/ops/row_statistics.h"
#include "engine/ops/small_gemm.h"
#include "engine/ops/softmax_slab.h"

namespace traind::engine {

absl::StatusOr<AttentionAttributes> ParseAttentionAttributes(const KernelInit& init) {
  AttentionAttributes attributes;
  TRAIND_ASSIGN_OR_RETURN(attributes.scale, init.GetFloat("scale", 1.0f));
  if (!std::isfinite(attributes.scale)) return init.Error("attribute 'scale' must be finite");
  auto flag = [&init](const char* name, bool* value) -> absl::Status {
    TRAIND_ASSIGN_OR_RETURN(const int64_t given, init.GetInt(name, 0));
    if (given != 0 && given != 1) return init.Error(absl::StrCat("attribute '", name, "' must be 0 or 1"));
    *value = given == 1;
    return absl::OkStatus();
  };
  TRAIND_RETURN_IF_ERROR(flag("transB", &attributes.trans_b));
  TRAIND_RETURN_IF_ERROR(flag("o_interleaved", &attributes.o_interleaved));
  TRAIND_RETURN_IF_ERROR(flag("dO_interleaved", &attributes.dout_interleaved));
  TRAIND_ASSIGN_OR_RETURN(attributes.q_slot, init.GetInt("q_slot", -1));
  TRAIND_ASSIGN_OR_RETURN(attributes.b_slot, init.GetInt("b_slot", -1));
  TRAIND_ASSIGN_OR_RETURN(attributes.v_slot, init.GetInt("v_slot", -1));
  const int64_t q = attributes.q_slot, b = attributes.b_slot, v = attributes.v_slot;
  if (q < -1 || b < -1 || v < -1 || (q < 0) != (b < 0) || (q < 0) != (v < 0)) {
    return init.Error("attributes 'q_slot', 'b_slot' and 'v_slot' must all be -1 or all slots (>= 0)");
  }
  if (q >= 0 && (q == b || q == v || b == v)) return init.Error("interleaved Q, B and V must be distinct slots");
  if (q >= 0 && !attributes.trans_b) return init.Error("an interleaved B holds keys as rows: 'transB' must be 1");
  if (q >= 0 && init.num_outputs() > 1 && init.op_type() == "ScaledDotProductAttentionGrad") {
    for (int output = 1; output < init.num_outputs(); ++output) {
      if (!init.node().output(output).empty()) {
        return init.Error("with interleaved inputs the gradient is output 0 alone (outputs 1 and 2 must be absent)");
      }
    }
  }
  return attributes;
}

namespace {

std::string Operands(const Tensor& q, const Tensor& b, const Tensor& v) {
  return absl::StrCat("Q ", q.DebugString(), ", B ", b.DebugString(), ", V ", v.DebugString());
}

// An operand's [batch..., rows, cols] view of its tensor.
struct LogicalOperand {
  Shape batch;
  int64_t rows = 0, cols = 0;
  OperandLayout layout;
};

// Plain (slot -1): the tensor itself, rank >= 2. Interleaved: slot `slot` of a [N, L, S, H, D] tensor; slot 0 of a
// rank-4 [N, L, H, D] one when `rank4`.
absl::StatusOr<LogicalOperand> Resolve(const Tensor& tensor, int64_t slot, bool rank4, const char* name) {
  LogicalOperand operand;
  if (slot < 0 && !rank4) {
    if (tensor.rank() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(name, " ", tensor.DebugString(), " must have rank >= 2"));
    }
    operand.batch.assign(tensor.shape().begin(), tensor.shape().end() - 2);
    operand.rows = tensor.dim(tensor.rank() - 2);
    operand.cols = tensor.dim(tensor.rank() - 1);
    operand.layout = OperandLayout::Plain(operand.rows, operand.cols);
    return operand;
  }
  const int64_t expected_rank = rank4 ? 4 : 5;
  if (tensor.rank() != expected_rank || (!rank4 && slot >= tensor.dim(2))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interleaved ", name, " ", tensor.DebugString(), " must be ", rank4 ? "[N, L, H, D]" : "[N, L, S, H, D]",
        rank4 ? "" : absl::StrCat(" with slot ", slot, " < S")));
  }
  const int64_t slots = rank4 ? 1 : tensor.dim(2), heads = tensor.dim(expected_rank - 2);
  operand.batch = {tensor.dim(0), heads};
  operand.rows = tensor.dim(1);
  operand.cols = tensor.dim(expected_rank - 1);
  operand.layout = OperandLayout::Interleaved(operand.rows, slots, heads, operand.cols, rank4 ? 0 : slot);
  return operand;
}

}  // namespace

absl::StatusOr<AttentionShapes> CheckAttentionInputs(const Tensor& q, const Tensor& b, const Tensor& v,
                                                     const AttentionAttributes& attributes) {
  if (q.dtype() != b.dtype() || q.dtype() != v.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("ScaledDotProductAttention: dtypes differ: ", Operands(q, b, v)));
  }
  auto resolve = [](const Tensor& tensor, int64_t slot, const char* name) -> absl::StatusOr<LogicalOperand> {
    absl::StatusOr<LogicalOperand> operand = Resolve(tensor, slot, /*rank4=*/false, name);
    if (!operand.ok()) return absl::InvalidArgumentError(absl::StrCat("ScaledDotProductAttention: ", operand.status().message()));
    return operand;
  };
  TRAIND_ASSIGN_OR_RETURN(const LogicalOperand lq, resolve(q, attributes.q_slot, "Q"));
  TRAIND_ASSIGN_OR_RETURN(const LogicalOperand lb, resolve(b, attributes.b_slot, "B"));
  TRAIND_ASSIGN_OR_RETURN(const LogicalOperand lv, resolve(v, attributes.v_slot, "V"));
  if (lb.batch.size() != lq.batch.size() || lv.batch.size() != lq.batch.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScaledDotProductAttention: Q, B and V must have one rank: ", Operands(q, b, v)));
  }
  if (lb.batch != lq.batch || lv.batch != lq.batch) {
    return absl::InvalidArgumentError(absl::StrCat("ScaledDotProductAttention: batch dims differ: ", Operands(q, b, v)));
  }
  AttentionShapes shapes;
  shapes.batch = lq.batch;
  for (int64_t dim : shapes.batch) shapes.batches *= dim;
  shapes.lq = lq.rows;
  shapes.d = lq.cols;
  shapes.lk = attributes.trans_b ? lb.rows : lb.cols;
  shapes.dv = lv.cols;
  const int64_t b_depth = attributes.trans_b ? lb.cols : lb.rows;
  if (b_depth != shapes.d || lv.rows != shapes.lk) {
    return absl::InvalidArgumentError(absl::StrCat("ScaledDotProductAttention: inner dims differ: ", Operands(q, b, v),
                                                   attributes.trans_b ? " (B transposed)" : ""));
  }
  shapes.q = lq.layout;
  shapes.b = lb.layout;
  shapes.v = lv.layout;
  return shapes;
}

absl::StatusOr<AttentionShapes> CheckAttentionGradInputs(const Tensor& dout, const Tensor& q, const Tensor& b,
                                                         const Tensor& v, const Tensor& p,
                                                         const AttentionAttributes& attributes,
                                                         OperandLayout* dout_layout) {
  TRAIND_ASSIGN_OR_RETURN(AttentionShapes shapes, CheckAttentionInputs(q, b, v, attributes));
  if (attributes.packed_gradient() && (b.raw_data() != q.raw_data() || v.raw_data() != q.raw_data() ||
                                       b.shape() != q.shape() || v.shape() != q.shape())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ScaledDotProductAttentionGrad: interleaved Q, B and V must be slots of one tensor: ", Operands(q, b, v)));
  }
  absl::StatusOr<LogicalOperand> dout_operand = Resolve(dout, -1, attributes.dout_interleaved, "dO");
  Shape p_shape = shapes.batch;
  p_shape.insert(p_shape.end(), {shapes.lq, shapes.lk});
  if (!dout_operand.ok() || dout.dtype() != q.dtype() || dout_operand->batch != shapes.batch ||
      dout_operand->rows != shapes.lq || dout_operand->cols != shapes.dv || p.dtype() != q.dtype() ||
      p.shape() != p_shape) {
    return absl::InvalidArgumentError(absl::StrCat("ScaledDotProductAttentionGrad: dO ", dout.DebugString(), " and P ",
                                                   p.DebugString(), " must be [..., Lq, Dv]",
                                                   attributes.dout_interleaved ? " (interleaved: [N, Lq, H, Dv])" : "",
                                                   " and [..., Lq, Lk] for ", Operands(q, b, v)));
  }
  *dout_layout = dout_operand->layout;
  return shapes;
}

namespace {

Shape WithMatrix(const Shape& batch, int64_t rows, int64_t cols) {
  Shape shape = batch;
  shape.push_back(rows);
  shape.push_back(cols);
  return shape;
}

// The floats of an item's rows x cols scratch matrix: ResourceExhausted past kMaxTensorElements, where a hostile
// model's empty operands ([1, 2^31, 0]) would otherwise ask for an overflowing size.
absl::StatusOr<int64_t> ScratchFloats(int64_t rows, int64_t cols) { return ElementCount({rows, cols}); }

// Calls fn(item, scratch) for every batch item in [0, batches), in parallel chunks; each chunk has its own
// `scratch_floats` floats from the run's pool (within the session's memory budget). Chunks of at least ~2^18
// multiply-adds (`item_work` each, in double: a product of four dims), so that small problems stay on one thread.
template <typename Fn>
absl::Status ForEachBatchItem(KernelContext& context, int64_t batches, double item_work, int64_t scratch_floats,
                              const Fn& fn) {
  std::mutex mutex;
  absl::Status status;
  const int64_t grain =
      static_cast<int64_t>(std::clamp(static_cast<double>(int64_t{1} << 18) / std::max(1.0, item_work), 1.0, 1e9));
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

// Asks for one item's rows x cols matrix at `data` (rows `ld` apart) into L2, as PrefetchToL2 does.
void PrefetchMatrixToL2(const float* data, int64_t rows, int64_t cols, int64_t ld) {
  if (ld == cols) {
    PrefetchToL2(data, rows * cols);
    return;
  }
  for (int64_t row = 0; row < rows; ++row) PrefetchToL2(data + row * ld, cols);
}

class ScaledDotProductAttentionKernel final : public Kernel {
 public:
  explicit ScaledDotProductAttentionKernel(AttentionAttributes attributes) : attributes_(attributes) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* q, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* v, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(const AttentionShapes s, CheckAttentionInputs(*q, *b, *v, attributes_));
    if (q->dtype() != DataType::kFloat32) return UnsupportedDtype("ScaledDotProductAttention", q->dtype());
    Shape o_shape = WithMatrix(s.batch, s.lq, s.dv);
    OperandLayout o_layout = OperandLayout::Plain(s.lq, s.dv);
    if (attributes_.o_interleaved) {
      if (s.batch.size() != 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ScaledDotProductAttention: an interleaved O needs [N, H] batch dims, not ", ShapeToString(s.batch)));
      }
      o_shape = {s.batch[0], s.lq, s.batch[1], s.dv};
      o_layout = OperandLayout::Interleaved(s.lq, 1, s.batch[1], s.dv, 0);
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * o, context.AllocateOutput(0, DataType::kFloat32, o_shape));
    // P is written only where something reads it (the gradient); otherwise each item's scores stay in scratch.
    const bool keep_p = context.wants_output(1);
    float* p_data = nullptr;
    if (keep_p) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * p, context.AllocateOutput(1, DataType::kFloat32, WithMatrix(s.batch, s.lq, s.lk)));
      p_data = p->mutable_data<float>();
    }
    TRAIND_ASSIGN_OR_RETURN(const int64_t item_scores, ScratchFloats(s.lq, s.lk));
    TRAIND_ASSIGN_OR_RETURN(const int64_t item_keys, ScratchFloats(s.d, s.lk));
    const int64_t score_floats = keep_p ? 0 : item_scores;
    const int64_t pack_floats = attributes_.trans_b ? item_keys : 0;  // SmallGemm packs op(B) = K^T
    const float* q_data = q->data<float>();
    const float* b_data = b->data<float>();
    const float* v_data = v->data<float>();
    float* o_data = o->mutable_data<float>();
    const double item_work = static_cast<double>(s.lq) * static_cast<double>(s.lk) * static_cast<double>(s.d + s.dv);
    return ForEachBatchItem(
        context, s.batches, item_work, score_floats + pack_floats, [&](int64_t i, float* scratch) {
          float* scores = keep_p ? p_data + i * s.lq * s.lk : scratch;
          float* pack = scratch + score_floats;
          SmallGemm(s.lq, s.lk, s.d, attributes_.scale, {q_data + s.q.Base(i), s.q.ld, false},
                    {b_data + s.b.Base(i), s.b.ld, attributes_.trans_b}, scores, s.lk, pack);
          if (s.lk > 0) SoftmaxRows(scores, scores, s.lq, s.lk, /*log=*/false);
          SmallGemm(s.lq, s.dv, s.lk, 1.0f, {scores, s.lk, false}, {v_data + s.v.Base(i), s.v.ld, false},
                    o_data + o_layout.Base(i), o_layout.ld, nullptr);
        });
  }

 private:
  AttentionAttributes attributes_;
};

class ScaledDotProductAttentionGradKernel final : public Kernel {
 public:
  explicit ScaledDotProductAttentionGradKernel(AttentionAttributes attributes) : attributes_(attributes) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const AttentionGradOperands operands, AttentionGradInputs(context, attributes_));
    const Tensor *dout = operands.dout, *q = operands.q, *b = operands.b, *v = operands.v, *p = operands.p;
    const AttentionShapes& s = operands.shapes;
    const OperandLayout& dout_layout = operands.dout_layout;
    if (q->dtype() != DataType::kFloat32) return UnsupportedDtype("ScaledDotProductAttentionGrad", q->dtype());
    // Each gradient is laid out as its operand: plain outputs of their inputs' shapes, or (interleaved) the three
    // slots of output 0, the gradient of the one tensor Q, B and V are slots of.
    const bool packed = attributes_.packed_gradient();
    const bool want_dq = context.wants_output(0), want_db = packed ? want_dq : context.wants_output(1);
    const bool want_dv = packed ? want_dq : context.wants_output(2);
    float* dq_data = nullptr;
    float* db_data = nullptr;
    float* dv_data = nullptr;
    if (want_dq) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * dq, context.AllocateOutput(0, DataType::kFloat32, q->shape()));
      dq_data = dq->mutable_data<float>();
      if (packed) {
        db_data = dv_data = dq_data;
        // Slots beyond the three are no operand's: their gradient is zero.
        if (q->dim(2) > 3) std::memset(dq_data, 0, dq->byte_size());
      }
    }
    if (want_db && !packed) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * db, context.AllocateOutput(1, DataType::kFloat32, b->shape()));
      db_data = db->mutable_data<float>();
    }
    if (want_dv && !packed) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * dv, context.AllocateOutput(2, DataType::kFloat32, v->shape()));
      dv_data = dv->mutable_data<float>();
    }
    const bool trans_b = attributes_.trans_b;
    const bool want_scores = want_dq || want_db;
    // Scratch: the item's dP, turned into dS in place; and B^T packed for the products reading a transposed B
    // (dP = dO V^T always, dQ = dS B^T when B holds the keys transposed).
    TRAIND_ASSIGN_OR_RETURN(const int64_t item_scores, ScratchFloats(s.lq, s.lk));
    TRAIND_ASSIGN_OR_RETURN(const int64_t item_values, ScratchFloats(s.dv, s.lk));
    TRAIND_ASSIGN_OR_RETURN(const int64_t item_keys, ScratchFloats(s.d, s.lk));
    const int64_t score_floats = want_scores ? item_scores : 0;
    const int64_t pack_floats = want_scores ? std::max(item_values, trans_b ? int64_t{0} : item_keys) : 0;
    const float* dout_data = dout->data<float>();
    const float* q_data = q->data<float>();
    const float* b_data = b->data<float>();
    const float* v_data = v->data<float>();
    const float* p_data = p->data<float>();
    const int64_t b_rows = trans_b ? s.lk : s.d, b_cols = trans_b ? s.d : s.lk;
    const double item_work =
        static_cast<double>(s.lq) * static_cast<double>(s.lk) * 2.0 * static_cast<double>(s.d + s.dv);
    return ForEachBatchItem(
        context, s.batches, item_work, score_floats + pack_floats,
        [&](int64_t i, float* scratch) {
          const float* dout_i = dout_data + dout_layout.Base(i);
          const float* q_i = q_data + s.q.Base(i);
          const float* b_i = b_data + s.b.Base(i);
          const float* v_i = v_data + s.v.Base(i);
          const float* p_i = p_data + i * s.lq * s.lk;
          // The next item's operands, a part before each product of this one.
          const bool next = i + 1 < s.batches;
          if (next) {
            PrefetchToL2(p_i + s.lq * s.lk, s.lq * s.lk);
            PrefetchMatrixToL2(dout_data + dout_layout.Base(i + 1), s.lq, s.dv, dout_layout.ld);
          }
          if (want_dv) {  // dV = P^T dO
            SmallGemm(s.lk, s.dv, s.lq, 1.0f, {p_i, s.lk, true}, {dout_i, dout_layout.ld, false},
                      dv_data + s.v.Base(i), s.v.ld, nullptr);
          }
          if (!want_scores) return;
          float* ds = scratch;
          float* pack = scratch + score_floats;
          if (next) PrefetchMatrixToL2(v_data + s.v.Base(i + 1), s.lk, s.dv, s.v.ld);
          // dP = dO V^T, then dS in place.
          SmallGemm(s.lq, s.lk, s.dv, 1.0f, {dout_i, dout_layout.ld, false}, {v_i, s.v.ld, true}, ds, s.lk, pack);
          ScaledSoftmaxGradRows(ds, p_i, s.lq, s.lk, attributes_.scale);
          if (next) PrefetchMatrixToL2(b_data + s.b.Base(i + 1), b_rows, b_cols, s.b.ld);
          if (want_dq) {  // dQ = dS op(B)^T: the keys as stored, [Lk, D]
            const MatrixOperand keys = trans_b ? MatrixOperand{b_i, s.b.ld, false} : MatrixOperand{b_i, s.b.ld, true};
            SmallGemm(s.lq, s.d, s.lk, 1.0f, {ds, s.lk, false}, keys, dq_data + s.q.Base(i), s.q.ld, pack);
          }
          if (next) PrefetchMatrixToL2(q_data + s.q.Base(i + 1), s.lq, s.d, s.q.ld);
          if (want_db) {
            if (trans_b) {  // dK = dS^T Q
              SmallGemm(s.lk, s.d, s.lq, 1.0f, {ds, s.lk, true}, {q_i, s.q.ld, false}, db_data + s.b.Base(i), s.b.ld,
                        nullptr);
            } else {  // d(K^T) = Q^T dS
              SmallGemm(s.d, s.lk, s.lq, 1.0f, {q_i, s.q.ld, true}, {ds, s.lk, false}, db_data + s.b.Base(i), s.b.ld,
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
