// MatMul (numpy semantics: 1-D promotion, broadcast batch dims) and Gemm. The multiplication is
// oneDNN's sgemm for float and OpenBLAS dgemm for double; no hand-written GEMM loops.
#include "engine/ops/matmul.h"

#include <cblas.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/model/traind_schemas.h"
#include "engine/ops/broadcast.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"
#include "engine/ops/dnnl_util.h"
#include "oneapi/dnnl/dnnl.h"

namespace traind::engine {

absl::StatusOr<MatMulShapes> CheckMatMulInputs(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) return absl::InvalidArgumentError("MatMul: dtypes differ");
  if (a.rank() == 0 || b.rank() == 0) return absl::InvalidArgumentError("MatMul: inputs must have rank >= 1");
  // 1-D operands are promoted to matrices; the promoted dim is dropped from the output.
  Shape a_shape = a.shape();
  Shape b_shape = b.shape();
  if (a.rank() == 1) a_shape.insert(a_shape.begin(), 1);
  if (b.rank() == 1) b_shape.push_back(1);
  MatMulShapes shapes;
  shapes.m = a_shape[a_shape.size() - 2];
  shapes.k = a_shape.back();
  shapes.n = b_shape.back();
  if (b_shape[b_shape.size() - 2] != shapes.k) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatMul: ", a.DebugString(), " x ", b.DebugString(), " inner dims differ"));
  }
  shapes.a_batch.assign(a_shape.begin(), a_shape.end() - 2);
  shapes.b_batch.assign(b_shape.begin(), b_shape.end() - 2);
  const Shape* batch_shapes[] = {&shapes.a_batch, &shapes.b_batch};
  TRAIND_ASSIGN_OR_RETURN(shapes.batch, BroadcastShapes(batch_shapes));
  shapes.output = shapes.batch;
  if (a.rank() > 1) shapes.output.push_back(shapes.m);
  if (b.rank() > 1) shapes.output.push_back(shapes.n);
  return shapes;
}

absl::StatusOr<MatMulTransposes> ParseFusedMatMulAttributes(const KernelInit& init) {
  MatMulTransposes transposes;
  TRAIND_ASSIGN_OR_RETURN(const int64_t trans_a, init.GetInt("transA", 0));
  TRAIND_ASSIGN_OR_RETURN(const int64_t trans_b, init.GetInt("transB", 0));
  if ((trans_a != 0 && trans_a != 1) || (trans_b != 0 && trans_b != 1)) {
    return init.Error("attributes 'transA' and 'transB' must be 0 or 1");
  }
  transposes.a = trans_a == 1;
  transposes.b = trans_b == 1;
  return transposes;
}

absl::StatusOr<MatMulShapes> CheckFusedMatMulInputs(const Tensor& a, const Tensor& b, MatMulTransposes transposes) {
  if (a.dtype() != b.dtype()) return absl::InvalidArgumentError("FusedMatMul: dtypes differ");
  if (a.rank() < 2 || b.rank() < 2) return absl::InvalidArgumentError("FusedMatMul: inputs must have rank >= 2");
  const Shape& a_shape = a.shape();
  const Shape& b_shape = b.shape();
  const size_t a_rank = a_shape.size(), b_rank = b_shape.size();
  MatMulShapes shapes;
  shapes.m = transposes.a ? a_shape[a_rank - 1] : a_shape[a_rank - 2];
  shapes.k = transposes.a ? a_shape[a_rank - 2] : a_shape[a_rank - 1];
  shapes.n = transposes.b ? b_shape[b_rank - 2] : b_shape[b_rank - 1];
  if ((transposes.b ? b_shape[b_rank - 1] : b_shape[b_rank - 2]) != shapes.k) {
    return absl::InvalidArgumentError(absl::StrCat("FusedMatMul: ", a.DebugString(), (transposes.a ? "^T" : ""),
                                                   " x ", b.DebugString(), (transposes.b ? "^T" : ""),
                                                   " inner dims differ"));
  }
  shapes.a_batch.assign(a_shape.begin(), a_shape.end() - 2);
  shapes.b_batch.assign(b_shape.begin(), b_shape.end() - 2);
  const Shape* batch_shapes[] = {&shapes.a_batch, &shapes.b_batch};
  TRAIND_ASSIGN_OR_RETURN(shapes.batch, BroadcastShapes(batch_shapes));
  shapes.output = shapes.batch;
  shapes.output.push_back(shapes.m);
  shapes.output.push_back(shapes.n);
  return shapes;
}

absl::StatusOr<GemmAttributes> ParseGemmAttributes(const KernelInit& init) {
  GemmAttributes attributes;
  TRAIND_ASSIGN_OR_RETURN(const int64_t trans_a, init.GetInt("transA", 0));
  TRAIND_ASSIGN_OR_RETURN(const int64_t trans_b, init.GetInt("transB", 0));
  attributes.trans_a = trans_a != 0;
  attributes.trans_b = trans_b != 0;
  TRAIND_ASSIGN_OR_RETURN(attributes.alpha, init.GetFloat("alpha", 1.0f));
  TRAIND_ASSIGN_OR_RETURN(attributes.beta, init.GetFloat("beta", 1.0f));
  // Opset 6's `broadcast` attribute (removed in 7, where C always broadcasts unidirectionally).
  if (init.opset() < 7) {
    TRAIND_ASSIGN_OR_RETURN(const int64_t broadcast, init.GetInt("broadcast", 0));
    if (broadcast != 0 && broadcast != 1) return init.Error("attribute 'broadcast' must be 0 or 1");
    attributes.c_must_be_mn = broadcast == 0;
  }
  if (init.opset() < 11 && !init.has_input(2)) return init.Error("input C is required before opset 11");
  return attributes;
}

absl::StatusOr<GemmShapes> CheckGemmInputs(const Tensor& a, const Tensor& b, const Tensor* c,
                                           const GemmAttributes& attributes) {
  if (a.rank() != 2 || b.rank() != 2 || a.dtype() != b.dtype() ||
      (c != nullptr && (c->dtype() != a.dtype() || c->rank() > 2))) {
    return absl::InvalidArgumentError("Gemm: A and B must be matrices, C rank <= 2, one dtype");
  }
  GemmShapes shapes;
  shapes.m = attributes.trans_a ? a.dim(1) : a.dim(0);
  shapes.k = attributes.trans_a ? a.dim(0) : a.dim(1);
  shapes.n = attributes.trans_b ? b.dim(0) : b.dim(1);
  if ((attributes.trans_b ? b.dim(1) : b.dim(0)) != shapes.k) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: ", a.DebugString(), " x ", b.DebugString(), " inner dims differ"));
  }
  // C broadcasts unidirectionally to [M, N].
  if (c != nullptr && c->rank() == 2) {
    shapes.c_rows = c->dim(0);
    shapes.c_cols = c->dim(1);
  } else if (c != nullptr && c->rank() == 1) {
    shapes.c_cols = c->dim(0);
  }
  if (attributes.c_must_be_mn && c != nullptr && c->shape() != Shape{shapes.m, shapes.n}) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: C ", c->DebugString(), " must be [", shapes.m, ",", shapes.n,
                                                   "] unless attribute 'broadcast' is 1 (opset 6)"));
  }
  if ((shapes.c_rows != 1 && shapes.c_rows != shapes.m) || (shapes.c_cols != 1 && shapes.c_cols != shapes.n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: C ", c->DebugString(), " does not broadcast to [", shapes.m, ",", shapes.n, "]"));
  }
  return shapes;
}

namespace {

// Row-major C[M,N] = alpha * op(A) * op(B) + beta * C with leading dimensions lda/ldb/ldc.
template <typename T>
absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const T* a, int64_t lda, const T* b, int64_t ldb, float beta, T* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {
    // Nothing to multiply; BLAS would still scale C, but callers only pass beta 0 or 1 here.
    if (beta == 0.0f) {
      for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, sizeof(T) * n);
    }
    return absl::OkStatus();
  }
  if constexpr (std::is_same_v<T, float>) {
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                                            alpha, a, lda, b, ldb, beta, c, ldc);
    if (status != dnnl_success) {
      return absl::InternalError(absl::StrCat("dnnl_sgemm failed with status ", status));
    }
  } else {
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
                static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                static_cast<blasint>(ldc));
  }
  return absl::OkStatus();
}

// BLAS takes 32-bit sizes (OpenBLAS blasint); refuse anything larger instead of truncating.
absl::Status CheckBlasDims(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kLimit = (int64_t{1} << 31) - 1;
  if (m > kLimit || n > kLimit || k > kLimit) {
    return absl::UnimplementedError("matrix dims above 2^31 are unsupported");
  }
  return absl::OkStatus();
}

// A weight matrix B that is a plan constant (an inference model's weights), prepared once for Y = A * B + bias:
// oneDNN's inner product with B reordered at compile time into the blocked layout it chose, and an optional bias
// row, so a run is one primitive on the activations. For the 64 x 784 x 512 layer of an MLP it took 330 us
// against sgemm's 387 us with B transposed (1 thread; 208 against 292 us on 2), and Gemm's bias pass goes. Only
// A's row count M varies between runs: one primitive per M, built on first use against the fixed weights layout.
class PreparedWeights {
 public:
  // B is [N, K] (`b_is_n_by_k`, Gemm's transB) or [K, N]; `bias` empty or N values. Null when oneDNN cannot.
  static std::unique_ptr<PreparedWeights> Make(const Tensor& b, bool b_is_n_by_k, std::vector<float> bias) {
    using dnnl::memory;
    if (b.dtype() != DataType::kFloat32 || b.rank() != 2) return nullptr;
    auto prepared = std::unique_ptr<PreparedWeights>(new PreparedWeights());
    prepared->source_ = b.raw_data();
    prepared->n_ = b_is_n_by_k ? b.dim(0) : b.dim(1);
    prepared->k_ = b_is_n_by_k ? b.dim(1) : b.dim(0);
    if (prepared->n_ == 0 || prepared->k_ == 0 || !CheckBlasDims(1, prepared->n_, prepared->k_).ok()) return nullptr;
    prepared->bias_ = std::move(bias);
    const memory::dims weight_dims = {prepared->n_, prepared->k_};
    // As oneDNN's [N, K] weights: B row-major (ab) or B transposed (ba).
    const memory::desc plain_weights(weight_dims, memory::data_type::f32,
                                     b_is_n_by_k ? memory::format_tag::ab : memory::format_tag::ba);
    const absl::Status made = CatchDnnlError("prepared weights", absl::StatusCode::kUnimplemented, [&] {
      // The weights layout does not depend on M; 64 rows stand for any.
      const memory::desc src({64, prepared->k_}, memory::data_type::f32, memory::format_tag::ab);
      const memory::desc any_weights(weight_dims, memory::data_type::f32, memory::format_tag::any);
      const memory::desc dst({64, prepared->n_}, memory::data_type::f32, memory::format_tag::ab);
      dnnl::inner_product_forward::desc desc(dnnl::prop_kind::forward_inference, src, any_weights, dst);
      dnnl::inner_product_forward::primitive_desc pd(desc, DnnlCpuEngine());
      prepared->weights_ = pd.weights_desc();
    });
    if (!made.ok()) return nullptr;
    absl::StatusOr<std::shared_ptr<Buffer>> packed = Buffer::Allocate(prepared->weights_.get_size());
    if (!packed.ok()) return nullptr;
    prepared->packed_ = *std::move(packed);
    const absl::Status reordered = CatchDnnlError("prepared weights", absl::StatusCode::kInternal, [&] {
      dnnl::memory from = WrapMemory(plain_weights, b.raw_data());
      dnnl::memory to = WrapMemory(prepared->weights_, prepared->packed_->data());
      dnnl::stream& stream = DnnlThreadStream();
      dnnl::reorder(from, to).execute(stream, from, to);
      stream.wait();
    });
    if (!reordered.ok()) return nullptr;
    return prepared;
  }

  // Whether `b` is the very constant prepared (same buffer).
  bool IsFor(const Tensor& b) const { return b.raw_data() == source_; }
  int64_t bytes() const { return static_cast<int64_t>(weights_.get_size() + bias_.size() * sizeof(float)); }

  // y[m, N] = a[m, K] * B + bias, both row-major float32; false (nothing written) where oneDNN has no
  // implementation for this M.
  absl::StatusOr<bool> Run(const float* a, int64_t m, float* y, KernelContext& context) const {
    using dnnl::memory;
    TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<const Primitive> plan, primitives_.GetOrCreate({m}, [&] {
      auto plan = std::make_shared<Primitive>();
      plan->src = memory::desc({m, k_}, memory::data_type::f32, memory::format_tag::ab);
      plan->dst = memory::desc({m, n_}, memory::data_type::f32, memory::format_tag::ab);
      if (!bias_.empty()) plan->bias = memory::desc({n_}, memory::data_type::f32, memory::format_tag::a);
      CatchDnnlError("prepared weights", absl::StatusCode::kUnimplemented, [&] {
        dnnl::inner_product_forward::desc desc(dnnl::prop_kind::forward_inference, plan->src, weights_, plan->bias,
                                               plan->dst);
        dnnl::inner_product_forward::primitive_desc pd(desc, UserScratchpadAttr(), DnnlCpuEngine());
        plan->primitive = dnnl::inner_product_forward(pd);
        plan->scratchpad = pd.scratchpad_desc();
      }).IgnoreError();  // no implementation: the entry says so, and the caller's general path runs
      return absl::StatusOr<std::shared_ptr<const Primitive>>(std::move(plan));
    }));
    if (!plan->primitive) return false;
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, WrapMemory(plan->src, a)},
                                            {DNNL_ARG_WEIGHTS, WrapMemory(weights_, packed_->data())},
                                            {DNNL_ARG_DST, WrapMemory(plan->dst, y)}};
    if (!bias_.empty()) args.emplace(DNNL_ARG_BIAS, WrapMemory(plan->bias, bias_.data()));
    TRAIND_RETURN_IF_ERROR(ExecuteDnnl(*plan->primitive, plan->scratchpad, std::move(args), context));
    return true;
  }

  int64_t k() const { return k_; }

 private:
  struct Primitive {
    std::optional<dnnl::inner_product_forward> primitive;  // unset: no implementation for this M
    dnnl::memory::desc src, bias, dst, scratchpad;
  };
  PreparedWeights() = default;

  const void* source_ = nullptr;
  int64_t n_ = 0, k_ = 0;
  dnnl::memory::desc weights_;      // [N, K] in the layout the inner product chose
  std::shared_ptr<Buffer> packed_;  // B in that layout
  std::vector<float> bias_;         // a row of N, or empty
  DnnlPrimitiveCache<Primitive> primitives_;
};

// Y[rows, N] = A[rows, K] * B^T (+ a bias row of N) for a B stored [N, K], a Linear layer's weight in training
// (Gemm transB, FusedMatMul with B transposed), where B changes every step and cannot be prepared: oneDNN's matmul
// primitive, with its scratchpad from the run's buffer pool. sgemm instead packs B^T into a buffer it mallocs on
// every call (180 KB for 64 x 784 x 512, 530 KB for 1024 x 512 x 128); past the process's fixed 128 KiB mmap
// threshold (ConfigureProcessAllocator) that is a fresh mapping each call, 45-133 page faults of ~1.5 us on a VM.
// One thread, Zen 5: 64 x 784 x 512 with bias 225 us against sgemm's 305 us; 1024 x 512 x 128 527 us against 775.
//
// Only for products of 2^21 multiply-adds and up: the primitive opens an OpenMP region for any size, where sgemm
// keeps a small product on the calling thread, and small products (linreg's 256 x 10 x 1, a classifier's last layer)
// then woke and spun the team's other thread on every call — 2 and 4 daemon sessions of linreg stepping at once fell
// to 0.75x and 0.51x the steps/s of one. sgemm's packing buffer is small for them anyway.
class TransposedWeightProduct {
 public:
  static constexpr int64_t kMinMultiplyAdds = int64_t{1} << 21;

  // False (nothing written) for a product below kMinMultiplyAdds, or where oneDNN has no implementation for these
  // shapes: the caller's sgemm runs. `bias` null or N values.
  absl::StatusOr<bool> Run(const float* a, int64_t rows, const float* b, int64_t n, int64_t k, const float* bias,
                           float* y, KernelContext& context) const {
    using dnnl::memory;
    // In double: three dims below 2^31 each (CheckBlasDims) can overflow an int64 product.
    if (static_cast<double>(rows) * static_cast<double>(n) * static_cast<double>(k) < kMinMultiplyAdds) return false;
    TRAIND_ASSIGN_OR_RETURN(
        std::shared_ptr<const Primitive> plan,
        primitives_.GetOrCreate({rows, n, k, bias != nullptr}, [&] {
          auto plan = std::make_shared<Primitive>();
          plan->src = memory::desc({rows, k}, memory::data_type::f32, memory::format_tag::ab);
          plan->weights = memory::desc({k, n}, memory::data_type::f32, memory::format_tag::ba);  // B^T in place
          plan->dst = memory::desc({rows, n}, memory::data_type::f32, memory::format_tag::ab);
          if (bias != nullptr) plan->bias = memory::desc({1, n}, memory::data_type::f32, memory::format_tag::ab);
          CatchDnnlError("matmul", absl::StatusCode::kUnimplemented, [&] {
            const dnnl::matmul::desc desc = bias != nullptr
                                                ? dnnl::matmul::desc(plan->src, plan->weights, plan->bias, plan->dst)
                                                : dnnl::matmul::desc(plan->src, plan->weights, plan->dst);
            dnnl::matmul::primitive_desc pd(desc, UserScratchpadAttr(), DnnlCpuEngine());
            plan->primitive = dnnl::matmul(pd);
            plan->scratchpad = pd.scratchpad_desc();
          }).IgnoreError();  // no implementation: the entry says so, and the caller's sgemm runs
          return absl::StatusOr<std::shared_ptr<const Primitive>>(std::move(plan));
        }));
    if (!plan->primitive) return false;
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, WrapMemory(plan->src, a)},
                                            {DNNL_ARG_WEIGHTS, WrapMemory(plan->weights, b)},
                                            {DNNL_ARG_DST, WrapMemory(plan->dst, y)}};
    if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, WrapMemory(plan->bias, bias));
    TRAIND_RETURN_IF_ERROR(ExecuteDnnl(*plan->primitive, plan->scratchpad, std::move(args), context));
    return true;
  }

 private:
  struct Primitive {
    std::optional<dnnl::matmul> primitive;  // unset: no implementation for these shapes
    dnnl::memory::desc src, weights, bias, dst, scratchpad;
  };
  DnnlPrimitiveCache<Primitive> primitives_;
};

// Y[b] = A[b] * op(B[b]) for `batches` products of the same shapes, A [batches, M, K] and B [batches, K, N] (or
// [batches, N, K] read transposed in place): attention's products of queries and keys, of scores and values, and
// their gradients, one oneDNN matmul primitive call for all of them in place of one sgemm call each. sgemm runs the
// 64 x 64 x 32 products of 16 sequences x 4 heads at 130-140 GFLOP/s where B is read transposed (it packs B^T on every
// call) and ~205 otherwise; the primitive at 220-240 (one Zen 5 core; 2 threads 410-475 against 260-410). With A
// read transposed the primitive gains nothing (196-204 either way), so those stay with sgemm.
class BatchedProduct {
 public:
  // False (nothing written) below TransposedWeightProduct::kMinMultiplyAdds in all (the primitive opens an OpenMP
  // region for any size), or where oneDNN has no implementation: the caller's sgemm loop runs.
  absl::StatusOr<bool> Run(const float* a, const float* b, bool b_transposed, int64_t batches, int64_t m, int64_t n,
                           int64_t k, float* y, KernelContext& context) const {
    using dnnl::memory;
    if (static_cast<double>(batches) * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <
        TransposedWeightProduct::kMinMultiplyAdds) {
      return false;
    }
    TRAIND_ASSIGN_OR_RETURN(
        std::shared_ptr<const Primitive> plan,
        primitives_.GetOrCreate({batches, m, n, k, b_transposed}, [&] {
          auto plan = std::make_shared<Primitive>();
          plan->src = memory::desc({batches, m, k}, memory::data_type::f32, memory::format_tag::abc);
          plan->weights = memory::desc({batches, k, n}, memory::data_type::f32,
                                       b_transposed ? memory::format_tag::acb : memory::format_tag::abc);
          plan->dst = memory::desc({batches, m, n}, memory::data_type::f32, memory::format_tag::abc);
          CatchDnnlError("matmul", absl::StatusCode::kUnimplemented, [&] {
            dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan->src, plan->weights, plan->dst),
                                            UserScratchpadAttr(), DnnlCpuEngine());
            plan->primitive = dnnl::matmul(pd);
            plan->scratchpad = pd.scratchpad_desc();
          }).IgnoreError();  // no implementation: the entry says so, and the caller's sgemm runs
          return absl::StatusOr<std::shared_ptr<const Primitive>>(std::move(plan));
        }));
    if (!plan->primitive) return false;
    TRAIND_RETURN_IF_ERROR(ExecuteDnnl(*plan->primitive, plan->scratchpad,
                                       {{DNNL_ARG_SRC, WrapMemory(plan->src, a)},
                                        {DNNL_ARG_WEIGHTS, WrapMemory(plan->weights, b)},
                                        {DNNL_ARG_DST, WrapMemory(plan->dst, y)}},
                                       context));
    return true;
  }

 private:
  struct Primitive {
    std::optional<dnnl::matmul> primitive;  // unset: no implementation for these shapes
    dnnl::memory::desc src, weights, dst, scratchpad;
  };
  DnnlPrimitiveCache<Primitive> primitives_;
};

// MatMul, and FusedMatMul when `fused` (operands read transposed in place: lda / ldb are the stored row lengths).
class MatMulKernel final : public Kernel {
 public:
  MatMulKernel() = default;
  MatMulKernel(MatMulTransposes transposes, bool has_bias_input)
      : fused_(true), transposes_(transposes), has_bias_input_(has_bias_input) {}

  // B a constant matrix (an inference model's Linear weight) and the bias, if the node has one, a constant too:
  // prepared weights with that bias, run on A's batches and rows as one [rows, K] matrix.
  int64_t PrepareConstants(const std::vector<const Tensor*>& constants) override {
    const Tensor* b = constants.size() > 1 ? constants[1] : nullptr;
    const Tensor* bias = constants.size() > 2 ? constants[2] : nullptr;
    if (b == nullptr || b->rank() != 2 || transposes_.a || (has_bias_input_ && bias == nullptr)) return 0;
    const int64_t n = transposes_.b ? b->dim(0) : b->dim(1);
    std::vector<float> bias_row;
    if (has_bias_input_) {
      if (bias->dtype() != DataType::kFloat32 || bias->rank() != 1 ||
          (bias->num_elements() != n && bias->num_elements() != 1)) {
        return 0;  // Compute refuses it
      }
      for (int64_t j = 0; j < n; ++j) bias_row.push_back(bias->data<float>()[bias->num_elements() == 1 ? 0 : j]);
    }
    prepared_ = PreparedWeights::Make(*b, transposes_.b, std::move(bias_row));
    return prepared_ == nullptr ? 0 : prepared_->bytes();
  }

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* a, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const MatMulShapes shapes,
                            fused_ ? CheckFusedMatMulInputs(*a, *b, transposes_) : CheckMatMulInputs(*a, *b));
    const int64_t m = shapes.m, n = shapes.n, k = shapes.k;
    const bool ta = transposes_.a, tb = transposes_.b;
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    const Shape& a_batch = shapes.a_batch;
    const Shape& b_batch = shapes.b_batch;
    const Shape& out_shape = shapes.output;
    TRAIND_RETURN_IF_ERROR(CheckBlasDims(m, n, k));
    // FusedMatMul's optional bias (engine/runtime/bias_folding.h): n values, or one, added to every row.
    const Tensor* bias = fused_ ? context.input(2) : nullptr;
    if (bias != nullptr && (bias->dtype() != a->dtype() || bias->rank() != 1 ||
                            (bias->num_elements() != n && bias->num_elements() != 1))) {
      return absl::InvalidArgumentError(absl::StrCat("FusedMatMul: bias ", bias->DebugString(), " must be a vector of ",
                                                     n, " (or 1) ", DataTypeName(a->dtype()), " values"));
    }
    const Shape* batch_shapes[] = {&a_batch, &b_batch};
    TRAIND_ASSIGN_OR_RETURN(BroadcastPlan batches, BroadcastPlan::Make(batch_shapes));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, a->dtype(), out_shape));
    if (y->num_elements() == 0) return absl::OkStatus();

    const int64_t a_batches = ElementCountOrZero(a_batch);
    // B without batch dims: A's batches and rows are one tall matrix, so one large GEMM replaces many
    // small ones (the common [batch, seq, d] x [d, e] of transformers).
    const bool fold_batches_into_rows = b_batch.empty() && !ta;
    if (prepared_ != nullptr && prepared_->IsFor(*b) && fold_batches_into_rows && a->dtype() == DataType::kFloat32 &&
        k == prepared_->k()) {
      TRAIND_ASSIGN_OR_RETURN(bool ran,
                              prepared_->Run(a->data<float>(), a_batches * m, y->mutable_data<float>(), context));
      if (ran) return absl::OkStatus();
    }
    // A Linear layer in training: B^T of a B that changes every step, one tall A.
    if (fold_batches_into_rows && tb && k > 0 && a->dtype() == DataType::kFloat32 &&
        (bias == nullptr || bias->num_elements() == n)) {
      TRAIND_ASSIGN_OR_RETURN(bool ran, transposed_weights_.Run(a->data<float>(), a_batches * m, b->data<float>(), n,
                                                                k, bias == nullptr ? nullptr : bias->data<float>(),
                                                                y->mutable_data<float>(), context));
      if (ran) return absl::OkStatus();
    }
    // Products of equal batches (attention), A read as stored.
    if (!fold_batches_into_rows && !ta && bias == nullptr && a_batch == b_batch && a->dtype() == DataType::kFloat32 &&
        k > 0) {
      TRAIND_ASSIGN_OR_RETURN(bool ran, batched_products_.Run(a->data<float>(), b->data<float>(), tb, a_batches, m, n,
                                                              k, y->mutable_data<float>(), context));
      if (ran) return absl::OkStatus();
    }
    std::vector<BatchPair> pairs;
    if (!fold_batches_into_rows) {
      ThreadPool serial(1);
      batches.ForEachRow(serial, [&](int64_t out_batch, const int64_t* offsets, int64_t count) {
        for (int64_t i = 0; i < count; ++i) {
          pairs.push_back({out_batch + i, offsets[0] + i * batches.inner_stride(0),
                           offsets[1] + i * batches.inner_stride(1)});
        }
      });
    }

    return DispatchAmong<TRAIND_FLOAT_TYPES>(a->dtype(), "MatMul", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      const T* a_data = a->data<T>();
      const T* b_data = b->data<T>();
      T* y_data = y->mutable_data<T>();
      // With a bias every row of Y starts as the bias and the products add to it (beta = 1): one write of Y
      // instead of a second pass that reads it back (what a separate Add costs). PyTorch's Linear does the same.
      float beta = 0.0f;
      if (bias != nullptr) {
        FillRows(context.threads(), bias->data<T>(), bias->num_elements(), y->num_elements() / n, n, y_data);
        beta = 1.0f;
      }
      if (fold_batches_into_rows) {
        return Gemm<T>(false, tb, a_batches * m, n, k, 1.0f, a_data, lda, b_data, ldb, beta, y_data, n);
      }
      if (pairs.size() == 1) {
        const BatchPair& pair = pairs.front();
        return Gemm<T>(ta, tb, m, n, k, 1.0f, a_data + pair.a * m * k, lda, b_data + pair.b * k * n, ldb,
                       beta, y_data + pair.out * m * n, n);
      }
      // Many small GEMMs (attention heads): one thread per group of batches, each GEMM single-threaded
      // (oneDNN's OpenMP region nests inside ours and runs inline).
      std::vector<absl::Status> statuses(pairs.size());
      context.threads().ParallelFor(static_cast<int64_t>(pairs.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const BatchPair& pair = pairs[i];
          statuses[i] = Gemm<T>(ta, tb, m, n, k, 1.0f, a_data + pair.a * m * k, lda, b_data + pair.b * k * n,
                                ldb, beta, y_data + pair.out * m * n, n);
        }
      });
      for (const absl::Status& status : statuses) TRAIND_RETURN_IF_ERROR(status);
      return absl::OkStatus();
    });
  }

 private:
  // One GEMM of a batched MatMul: output batch index and the A / B batch indices it reads.
  struct BatchPair {
    int64_t out;
    int64_t a;
    int64_t b;
  };

  bool fused_ = false;
  MatMulTransposes transposes_;
  bool has_bias_input_ = false;
  std::unique_ptr<const PreparedWeights> prepared_;  // set by PrepareConstants, then read-only
  TransposedWeightProduct transposed_weights_;
  BatchedProduct batched_products_;

  // rows x n values: each row is `values` (n of them, or one repeated).
  template <typename T>
  static void FillRows(const ThreadPool& threads, const T* values, int64_t count, int64_t rows, int64_t n, T* out) {
    threads.ParallelFor(rows, std::max<int64_t>(1, kParallelElementThreshold / n), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        T* out_row = out + row * n;
        if (count == 1) {
          std::fill(out_row, out_row + n, values[0]);
        } else {
          std::copy(values, values + n, out_row);
        }
      }
    });
  }

  static int64_t ElementCountOrZero(const Shape& shape) {
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    return count;
  }
};

class GemmKernel final : public Kernel {
 public:
  // `has_c_input`: the node names a C.
  GemmKernel(GemmAttributes attributes, bool has_c_input) : attributes_(attributes), has_c_input_(has_c_input) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* a, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    const Tensor* c = context.input(2);
    TRAIND_ASSIGN_OR_RETURN(const GemmShapes shapes, CheckGemmInputs(*a, *b, c, attributes_));
    const int64_t m = shapes.m, n = shapes.n, k = shapes.k, c_rows = shapes.c_rows, c_cols = shapes.c_cols;
    TRAIND_RETURN_IF_ERROR(CheckBlasDims(m, n, k));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, a->dtype(), {m, n}));
    if (prepared_ != nullptr && prepared_->IsFor(*b) && m > 0 && a->dtype() == DataType::kFloat32 &&
        a->dim(1) == prepared_->k()) {
      TRAIND_ASSIGN_OR_RETURN(bool ran, prepared_->Run(a->data<float>(), m, y->mutable_data<float>(), context));
      if (ran) return absl::OkStatus();
    }
    // A Linear layer in training (Y = A * B^T + C, C a row of N or absent).
    const bool c_is_bias_row = c != nullptr && attributes_.beta == 1.0f && c_rows == 1 && c_cols == n;
    if (!attributes_.trans_a && attributes_.trans_b && attributes_.alpha == 1.0f && a->dtype() == DataType::kFloat32 &&
        (c == nullptr || attributes_.beta == 0.0f || c_is_bias_row) && m > 0 && n > 0 && k > 0) {
      TRAIND_ASSIGN_OR_RETURN(bool ran, transposed_weights_.Run(a->data<float>(), m, b->data<float>(), n, k,
                                                                c_is_bias_row ? c->data<float>() : nullptr,
                                                                y->mutable_data<float>(), context));
      if (ran) return absl::OkStatus();
    }
    return DispatchAmong<TRAIND_FLOAT_TYPES>(a->dtype(), "Gemm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* y_data = y->mutable_data<T>();
      const bool use_c = c != nullptr && attributes_.beta != 0.0f && c->num_elements() > 0;
      if (use_c) {
        // Y = beta * broadcast(C) first; the GEMM then accumulates into it (beta = 1).
        const T* c_data = c->data<T>();
        const T beta = static_cast<T>(attributes_.beta);
        for (int64_t i = 0; i < m; ++i) {
          const T* c_row = c_data + (c_rows == 1 ? 0 : i * c_cols);
          T* y_row = y_data + i * n;
          if (c_cols == 1) {
            for (int64_t j = 0; j < n; ++j) y_row[j] = beta * c_row[0];
          } else {
            for (int64_t j = 0; j < n; ++j) y_row[j] = beta * c_row[j];
          }
        }
      }
      return Gemm<T>(attributes_.trans_a, attributes_.trans_b, m, n, k, attributes_.alpha, a->data<T>(), a->dim(1),
                     b->data<T>(), b->dim(1), use_c ? 1.0f : 0.0f, y_data, n);
    });
  }

  // B a constant (and C, if given, too): prepared weights with beta * C as their bias (alpha 1, A not transposed).
  int64_t PrepareConstants(const std::vector<const Tensor*>& constants) override {
    const Tensor* b = constants.size() > 1 ? constants[1] : nullptr;
    const Tensor* c = constants.size() > 2 ? constants[2] : nullptr;
    const bool has_c = has_c_input_ && attributes_.beta != 0.0f;
    if (b == nullptr || b->rank() != 2 || attributes_.trans_a || attributes_.alpha != 1.0f ||
        attributes_.c_must_be_mn || (has_c && c == nullptr)) {
      return 0;
    }
    const int64_t n = attributes_.trans_b ? b->dim(0) : b->dim(1);
    std::vector<float> bias;
    if (has_c) {
      // C broadcast from a row: one value or N of them.
      if (c->dtype() != DataType::kFloat32 || c->rank() > 2 || (c->rank() == 2 && c->dim(0) != 1)) return 0;
      const int64_t columns = c->rank() == 0 ? 1 : c->shape().back();
      if (columns != 1 && columns != n) return 0;
      bias.resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) bias[j] = attributes_.beta * c->data<float>()[columns == 1 ? 0 : j];
    }
    prepared_ = PreparedWeights::Make(*b, attributes_.trans_b, std::move(bias));
    return prepared_ == nullptr ? 0 : prepared_->bytes();
  }

 private:
  GemmAttributes attributes_;
  bool has_c_input_;
  std::unique_ptr<const PreparedWeights> prepared_;  // set by PrepareConstants, then read-only
  TransposedWeightProduct transposed_weights_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateMatMulKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new MatMulKernel());
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateFusedMatMulKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(const MatMulTransposes transposes, ParseFusedMatMulAttributes(init));
  return std::unique_ptr<Kernel>(new MatMulKernel(transposes, init.has_input(2)));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGemmKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(GemmAttributes attributes, ParseGemmAttributes(init));
  return std::unique_ptr<Kernel>(new GemmKernel(attributes, init.has_input(2)));
}

// Gradients.

namespace {

onnx::NodeProto* EmitGemm(GradientRuleContext& g, const std::string& a, const std::string& b, bool trans_a,
                          bool trans_b, float alpha, const std::string& out) {
  onnx::NodeProto* node = g.Emit("Gemm", {a, b}, {out});
  auto add_int = [node](const char* name, int64_t value) {
    auto* attribute = node->add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::INT);
    attribute->set_i(value);
  };
  add_int("transA", trans_a);
  add_int("transB", trans_b);
  auto* alpha_attribute = node->add_attribute();
  alpha_attribute->set_name("alpha");
  alpha_attribute->set_type(onnx::AttributeProto::FLOAT);
  alpha_attribute->set_f(alpha);
  return node;
}

}  // namespace

// Y = alpha * op(A) op(B) + beta * C, op = optional transpose:
//   dA = alpha * dY op(B)^T (transposed back when transA), dB = alpha * op(A)^T dY (likewise), dC = beta * dY
//   summed to C's shape.
absl::Status GemmGradient(GradientRuleContext& g) {
  const bool trans_a = g.IntAttr("transA", 0) != 0;
  const bool trans_b = g.IntAttr("transB", 0) != 0;
  const float alpha = g.FloatAttr("alpha", 1.0f);
  const float beta = g.FloatAttr("beta", 1.0f);
  if (g.NeedsGI(0)) {
    if (trans_a) {
      EmitGemm(g, g.I(1), g.GO(0), trans_b, true, alpha, g.GI(0));
    } else {
      EmitGemm(g, g.GO(0), g.I(1), false, !trans_b, alpha, g.GI(0));
    }
  }
  if (g.NeedsGI(1)) {
    if (trans_b) {
      EmitGemm(g, g.GO(0), g.I(0), true, trans_a, alpha, g.GI(1));
    } else {
      EmitGemm(g, g.I(0), g.GO(0), !trans_a, false, alpha, g.GI(1));
    }
  }
  if (g.num_inputs() > 2 && g.NeedsGI(2)) {
    std::string scaled = g.GO(0);
    if (beta != 1.0f) {
      TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(2)));
      scaled = g.Temp("beta_dy");
      g.Emit("Mul", {g.GO(0), g.ScalarConstant(beta, type)}, {scaled});
    }
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(scaled, g.O(0), g.I(2), g.GI(2)));
  }
  return absl::OkStatus();
}

namespace {

onnx::NodeProto* EmitFusedMatMul(GradientRuleContext& g, const std::string& a, const std::string& b, bool trans_a,
                                 bool trans_b, const std::string& out) {
  onnx::NodeProto* node = g.Emit("FusedMatMul", {a, b}, {out});
  node->set_domain(kTraindTrainingDomain);
  GradientRuleContext::SetIntAttr(node, "transA", trans_a ? 1 : 0);
  GradientRuleContext::SetIntAttr(node, "transB", trans_b ? 1 : 0);
  return node;
}

// Y = op_a(A) op_b(B), batched (op swaps the last two axes where transposed). Each product is one FusedMatMul
// reading its operands in place, none a materialised Transpose:
//   dA = dY op_b(B)^T  = FusedMatMul(dY, B, transB = !trans_b)             when A is not transposed,
//   dA = op_b(B) dY^T  = FusedMatMul(B, dY, transA = trans_b, transB = 1)  when it is;
//   dB = op_a(A)^T dY  = FusedMatMul(A, dY, transA = !trans_a)             when B is not transposed,
//   dB = dY^T op_a(A)  = FusedMatMul(dY, A, transA = 1, transB = trans_a)  when it is;
// each then summed over the batch dims its operand was broadcast along.
absl::Status BatchedMatMulGradient(GradientRuleContext& g, MatMulTransposes transposes) {
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> a_shape, g.StaticShape(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> b_shape, g.StaticShape(g.I(1)));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> y_shape, g.StaticShape(g.O(0)));
  if (a_shape.size() < 2 || b_shape.size() < 2) {
    return absl::UnimplementedError("MatMul gradients with a 1-D operand are not supported yet");
  }
  const std::vector<int64_t> batch(y_shape.begin(), y_shape.end() - 2);
  if (g.NeedsGI(0)) {
    const std::string full = g.Temp("dA_full");
    if (!transposes.a) {
      EmitFusedMatMul(g, g.GO(0), g.I(1), false, !transposes.b, full);
    } else {
      EmitFusedMatMul(g, g.I(1), g.GO(0), transposes.b, true, full);
    }
    std::vector<int64_t> full_shape = batch;
    full_shape.insert(full_shape.end(), a_shape.end() - 2, a_shape.end());
    TRAIND_RETURN_IF_ERROR(g.ReduceToShape(full, full_shape, g.I(0), g.GI(0)));
  }
  if (g.NeedsGI(1)) {
    const std::string full = g.Temp("dB_full");
    if (!transposes.b) {
      EmitFusedMatMul(g, g.I(0), g.GO(0), !transposes.a, false, full);
    } else {
      EmitFusedMatMul(g, g.GO(0), g.I(0), true, transposes.a, full);
    }
    std::vector<int64_t> full_shape = batch;
    full_shape.insert(full_shape.end(), b_shape.end() - 2, b_shape.end());
    TRAIND_RETURN_IF_ERROR(g.ReduceToShape(full, full_shape, g.I(1), g.GI(1)));
  }
  // FusedMatMul's bias, added to every row: its gradient is dY summed down to the bias's shape.
  if (g.num_inputs() > 2 && !g.I(2).empty() && g.NeedsGI(2)) {
    TRAIND_RETURN_IF_ERROR(g.ReduceToShape(g.GO(0), y_shape, g.I(2), g.GI(2)));
  }
  return absl::OkStatus();
}

}  // namespace

// Y = A B, batched with numpy broadcasting of the leading dims: dA = dY B^T and dB = A^T dY (transposing
// the last two dims, read in place by FusedMatMul), each summed over the batch dims its input was broadcast along.
// 1-D operands: not yet.
absl::Status MatMulGradient(GradientRuleContext& g) {
  // Ranks first: the 2-D cases need no static shape (a symbolic batch dimension is fine).
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> a_partial, g.PartialShape(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> b_partial, g.PartialShape(g.I(1)));
  if (a_partial.size() < 2 || b_partial.size() < 2) {
    return absl::UnimplementedError("MatMul gradients with a 1-D operand are not supported yet");
  }
  if (a_partial.size() == 2 && b_partial.size() == 2) {
    if (g.NeedsGI(0)) EmitGemm(g, g.GO(0), g.I(1), false, true, 1.0f, g.GI(0));
    if (g.NeedsGI(1)) EmitGemm(g, g.I(0), g.GO(0), true, false, 1.0f, g.GI(1));
    return absl::OkStatus();
  }
  if (b_partial.size() == 2) {
    // A [..., M, K] times a matrix B [K, N] (a Linear layer on a sequence) is one [rows, K] x [K, N] product:
    // two Gemms with transpose flags (folded into sgemm), no batched Transposes and no [batch, K, N] partials.
    // Only B's shape must be static; the rows follow A's run-time shape.
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> b_shape, g.StaticShape(g.I(1)));
    const std::string dy_rows = g.Temp("dY_rows");
    g.Emit("Reshape", {g.GO(0), g.Int64Constant({-1, b_shape[1]})}, {dy_rows});
    if (g.NeedsGI(0)) {
      const std::string da_rows = g.Temp("dA_rows"), a_shape = g.Temp("A_shape");
      EmitGemm(g, dy_rows, g.I(1), false, true, 1.0f, da_rows);
      g.Emit("Shape", {g.I(0)}, {a_shape});
      g.Emit("Reshape", {da_rows, a_shape}, {g.GI(0)});
    }
    if (g.NeedsGI(1)) {
      const std::string a_rows = g.Temp("A_rows");
      g.Emit("Reshape", {g.I(0), g.Int64Constant({-1, b_shape[0]})}, {a_rows});
      EmitGemm(g, a_rows, dy_rows, true, false, 1.0f, g.GI(1));
    }
    return absl::OkStatus();
  }
  return BatchedMatMulGradient(g, MatMulTransposes{});
}

absl::Status FusedMatMulGradient(GradientRuleContext& g) {
  return BatchedMatMulGradient(g, MatMulTransposes{g.IntAttr("transA", 0) != 0, g.IntAttr("transB", 0) != 0});
}

}  // namespace traind::engine
