// ScaledDotProductAttention and its gradient against float64 computations of the unfused chain: S = scale * Q op(B),
// P = softmax(S) by rows, O = P V; dV = P^T dO, dP = dO V^T, dS = scale * P * (dP - rowsum(dP * P)), dQ = dS op(B)^T,
// d op(B) = Q^T dS (transposed back for a transposed B).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

struct Dims {
  Shape batch;
  int64_t lq, lk, d, dv;
  int64_t batches() const {
    int64_t count = 1;
    for (int64_t dim : batch) count *= dim;
    return count;
  }
  Shape Of(int64_t rows, int64_t cols) const {
    Shape shape(batch.size() + 2);
    std::copy(batch.begin(), batch.end(), shape.begin());
    shape[batch.size()] = rows;
    shape[batch.size() + 1] = cols;
    return shape;
  }
};

struct Reference {
  std::vector<double> o, p, dq, db, dv;
};

// float64 forward and backward of one problem; `keys` is B, [.., D, Lk] (or [.., Lk, D] when trans_b).
Reference ComputeReference(const Dims& s, const Tensor& q, const Tensor& keys, const Tensor& v, const Tensor& dout,
                           float scale, bool trans_b) {
  Reference r;
  const int64_t n = s.batches();
  r.o.assign(n * s.lq * s.dv, 0.0);
  r.p.assign(n * s.lq * s.lk, 0.0);
  r.dq.assign(n * s.lq * s.d, 0.0);
  r.db.assign(n * s.d * s.lk, 0.0);
  r.dv.assign(n * s.lk * s.dv, 0.0);
  const float* Q = q.data<float>();
  const float* B = keys.data<float>();
  const float* V = v.data<float>();
  const float* dO = dout.data<float>();
  auto b_at = [&](int64_t i, int64_t depth, int64_t key) {  // op(B)[depth, key]
    return double{trans_b ? B[(i * s.lk + key) * s.d + depth] : B[(i * s.d + depth) * s.lk + key]};
  };
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> ds(s.lq * s.lk);
    for (int64_t row = 0; row < s.lq; ++row) {
      std::vector<double> scores(s.lk);
      double max = -INFINITY;
      for (int64_t key = 0; key < s.lk; ++key) {
        double dot = 0.0;
        for (int64_t depth = 0; depth < s.d; ++depth) dot += Q[(i * s.lq + row) * s.d + depth] * b_at(i, depth, key);
        scores[key] = scale * dot;
        max = std::max(max, scores[key]);
      }
      double sum = 0.0;
      for (double& value : scores) sum += (value = std::exp(value - max));
      double* p = &r.p[(i * s.lq + row) * s.lk];
      for (int64_t key = 0; key < s.lk; ++key) p[key] = scores[key] / sum;
      for (int64_t col = 0; col < s.dv; ++col) {
        double out = 0.0;
        for (int64_t key = 0; key < s.lk; ++key) out += p[key] * V[(i * s.lk + key) * s.dv + col];
        r.o[(i * s.lq + row) * s.dv + col] = out;
      }
      // Backward of this row: dP, then dS.
      std::vector<double> dp(s.lk);
      double weighted = 0.0;
      for (int64_t key = 0; key < s.lk; ++key) {
        for (int64_t col = 0; col < s.dv; ++col) {
          dp[key] += double{dO[(i * s.lq + row) * s.dv + col]} * V[(i * s.lk + key) * s.dv + col];
        }
        weighted += dp[key] * p[key];
      }
      for (int64_t key = 0; key < s.lk; ++key) ds[row * s.lk + key] = scale * p[key] * (dp[key] - weighted);
    }
    for (int64_t key = 0; key < s.lk; ++key) {
      for (int64_t col = 0; col < s.dv; ++col) {
        double sum = 0.0;
        for (int64_t row = 0; row < s.lq; ++row) sum += r.p[(i * s.lq + row) * s.lk + key] * dO[(i * s.lq + row) * s.dv + col];
        r.dv[(i * s.lk + key) * s.dv + col] = sum;
      }
    }
    for (int64_t row = 0; row < s.lq; ++row) {
      for (int64_t depth = 0; depth < s.d; ++depth) {
        double sum = 0.0;
        for (int64_t key = 0; key < s.lk; ++key) sum += ds[row * s.lk + key] * b_at(i, depth, key);
        r.dq[(i * s.lq + row) * s.d + depth] = sum;
      }
    }
    for (int64_t depth = 0; depth < s.d; ++depth) {
      for (int64_t key = 0; key < s.lk; ++key) {
        double sum = 0.0;
        for (int64_t row = 0; row < s.lq; ++row) sum += Q[(i * s.lq + row) * s.d + depth] * ds[row * s.lk + key];
        const int64_t at = trans_b ? (i * s.lk + key) * s.d + depth : (i * s.d + depth) * s.lk + key;
        r.db[at] = sum;
      }
    }
  }
  return r;
}

std::vector<float> ToFloat(const std::vector<double>& values) { return std::vector<float>(values.begin(), values.end()); }

const std::vector<Dims>& Problems() {
  static const std::vector<Dims> problems = {
      {{16, 4}, 64, 64, 32, 32},  // the transformer workload's heads
      {{2, 3}, 5, 7, 3, 4},       // row and column tails of every tile
      {{3}, 33, 17, 20, 48},      // packing edges (16 x 16 blocks and their remainders)
      {{}, 9, 130, 16, 5},        // rank 2, a long key axis
  };
  return problems;
}

TEST(ScaledDotProductAttentionTest, MatchesFloat64WithKeysEitherWayRound) {
  uint32_t seed = 1;
  for (const Dims& s : Problems()) {
    for (int trans_b = 0; trans_b < 2; ++trans_b) {
      SCOPED_TRACE(::testing::Message() << "Lq " << s.lq << " Lk " << s.lk << " D " << s.d << " Dv " << s.dv
                                        << " transB " << trans_b);
      const float scale = 0.37f;
      const Tensor q = RandomTensor(s.Of(s.lq, s.d), -2, 2, seed++);
      const Tensor keys = RandomTensor(trans_b ? s.Of(s.lk, s.d) : s.Of(s.d, s.lk), -2, 2, seed++);
      const Tensor v = RandomTensor(s.Of(s.lk, s.dv), -1, 1, seed++);
      const Tensor dout = RandomTensor(s.Of(s.lq, s.dv), -1, 1, seed++);
      const Reference r = ComputeReference(s, q, keys, v, dout, scale, trans_b);
      OpTester forward("ScaledDotProductAttention", kTraindTrainingVersion, kTraindTrainingDomain);
      forward.AddInputTensor("q", q).AddInputTensor("b", keys).AddInputTensor("v", v);
      forward.AddAttribute("scale", scale).AddAttribute("transB", int64_t{trans_b});
      forward.AddOutput<float>("o", s.Of(s.lq, s.dv), ToFloat(r.o)).AddOutput<float>("p", s.Of(s.lq, s.lk), ToFloat(r.p));
      forward.SetTolerance(1e-5, 1e-6).Run();

      OpTester backward("ScaledDotProductAttentionGrad", kTraindTrainingVersion, kTraindTrainingDomain);
      backward.AddInputTensor("dout", dout).AddInputTensor("q", q).AddInputTensor("b", keys).AddInputTensor("v", v);
      backward.AddInput<float>("p", s.Of(s.lq, s.lk), ToFloat(r.p));
      backward.AddAttribute("scale", scale).AddAttribute("transB", int64_t{trans_b});
      backward.AddOutput<float>("dq", q.shape(), ToFloat(r.dq))
          .AddOutput<float>("db", keys.shape(), ToFloat(r.db))
          .AddOutput<float>("dv", v.shape(), ToFloat(r.dv));
      backward.SetTolerance(1e-5, 1e-5).Run();
    }
  }
}

// The forward's P output and the gradient's outputs are optional: each wanted subset computes the same values.
TEST(ScaledDotProductAttentionTest, OptionalOutputsLeaveTheOthersUnchanged) {
  const Dims s{{2}, 6, 10, 4, 3};
  const Tensor q = RandomTensor(s.Of(s.lq, s.d), -1, 1, 50), keys = RandomTensor(s.Of(s.lk, s.d), -1, 1, 51);
  const Tensor v = RandomTensor(s.Of(s.lk, s.dv), -1, 1, 52), dout = RandomTensor(s.Of(s.lq, s.dv), -1, 1, 53);
  const Reference r = ComputeReference(s, q, keys, v, dout, 1.0f, /*trans_b=*/true);
  OpTester forward("ScaledDotProductAttention", kTraindTrainingVersion, kTraindTrainingDomain);
  forward.AddInputTensor("q", q).AddInputTensor("b", keys).AddInputTensor("v", v).AddAttribute("transB", int64_t{1});
  forward.AddOutput<float>("o", s.Of(s.lq, s.dv), ToFloat(r.o)).Run();
  for (int wanted = 1; wanted < 8; ++wanted) {
    SCOPED_TRACE(wanted);
    OpTester backward("ScaledDotProductAttentionGrad", kTraindTrainingVersion, kTraindTrainingDomain);
    backward.AddInputTensor("dout", dout).AddInputTensor("q", q).AddInputTensor("b", keys).AddInputTensor("v", v);
    backward.AddInput<float>("p", s.Of(s.lq, s.lk), ToFloat(r.p)).AddAttribute("transB", int64_t{1});
    const std::pair<const char*, const std::vector<double>*> outputs[] = {{"dq", &r.dq}, {"db", &r.db}, {"dv", &r.dv}};
    const Shape shapes[] = {q.shape(), keys.shape(), v.shape()};
    // Unwanted outputs come before wanted ones as empty names.
    int last = 0;
    for (int i = 0; i < 3; ++i) {
      if (wanted & (1 << i)) last = i;
    }
    for (int i = 0; i <= last; ++i) {
      if (wanted & (1 << i)) {
        backward.AddOutput<float>(outputs[i].first, shapes[i], ToFloat(*outputs[i].second));
      } else {
        backward.AddMissingOutput();
      }
    }
    backward.SetTolerance(1e-5, 1e-5).Run();
  }
}

// Slot `slot` of an interleaved [N, L, S, H, D] tensor as the operand [N, H, L, D] it stands for, and back.
Tensor SlotAsHeads(const Tensor& packed, int64_t slot) {
  const int64_t n = packed.dim(0), l = packed.dim(1), slots = packed.dim(2), h = packed.dim(3), d = packed.dim(4);
  Tensor heads = *Tensor::Allocate(DataType::kFloat32, {n, h, l, d});
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t b = 0; b < h; ++b) {
      for (int64_t c = 0; c < l; ++c) {
        for (int64_t e = 0; e < d; ++e) {
          heads.mutable_data<float>()[((a * h + b) * l + c) * d + e] =
              packed.data<float>()[(((a * l + c) * slots + slot) * h + b) * d + e];
        }
      }
    }
  }
  return heads;
}

// values [N, H, L, D] (float64) written into slot `slot` of `packed` [N, L, S, H, D].
void PutSlot(const std::vector<double>& values, const Shape& packed_shape, int64_t slot, std::vector<double>* packed) {
  const int64_t n = packed_shape[0], l = packed_shape[1], slots = packed_shape[2], h = packed_shape[3],
                d = packed_shape[4];
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t b = 0; b < h; ++b) {
      for (int64_t c = 0; c < l; ++c) {
        for (int64_t e = 0; e < d; ++e) {
          (*packed)[(((a * l + c) * slots + slot) * h + b) * d + e] = values[((a * h + b) * l + c) * d + e];
        }
      }
    }
  }
}

// Queries, keys and values as slots of one [N, L, S, H, D] tensor (S = 3, and S = 4 with a slot no operand reads),
// O written and dO read as [N, L, H, D], the gradient the whole packed tensor: the plain operands' results.
TEST(ScaledDotProductAttentionTest, InterleavedOperandsGiveThePlainResults) {
  const int64_t n = 2, l = 5, h = 2, d = 4;
  const int64_t q_slot = 2, k_slot = 0, v_slot = 1;  // not in order: each slot must go to its own operand
  for (const int64_t slots : {3, 4}) {
    SCOPED_TRACE(slots);
    const Shape packed_shape = {n, l, slots, h, d};
    const Tensor packed = RandomTensor(packed_shape, -2, 2, 60 + static_cast<uint32_t>(slots));
    const Tensor q = SlotAsHeads(packed, q_slot), keys = SlotAsHeads(packed, k_slot), v = SlotAsHeads(packed, v_slot);
    // dO as [N, L, H, D]: slot 0 of a one-slot tensor.
    const Tensor dout_interleaved = RandomTensor({n, l, 1, h, d}, -1, 1, 70);
    const Tensor dout = SlotAsHeads(dout_interleaved, 0);
    const Dims s{{n, h}, l, l, d, d};
    const float scale = 0.6f;
    const Reference r = ComputeReference(s, q, keys, v, dout, scale, /*trans_b=*/true);
    // O [N, H, L, D] as [N, L, H, D]: slot 0 of a one-slot tensor.
    std::vector<double> o_interleaved(n * l * h * d);
    PutSlot(r.o, {n, l, 1, h, d}, 0, &o_interleaved);

    OpTester forward("ScaledDotProductAttention", kTraindTrainingVersion, kTraindTrainingDomain);
    forward.AddInputTensor("r", packed).AddRepeatedInput("r").AddRepeatedInput("r");
    forward.AddAttribute("scale", scale).AddAttribute("transB", int64_t{1}).AddAttribute("q_slot", q_slot);
    forward.AddAttribute("b_slot", k_slot).AddAttribute("v_slot", v_slot).AddAttribute("o_interleaved", int64_t{1});
    forward.AddOutput<float>("o", {n, l, h, d}, ToFloat(o_interleaved)).AddOutput<float>("p", {n, h, l, l}, ToFloat(r.p));
    forward.SetTolerance(1e-5, 1e-6).Run();

    std::vector<double> packed_gradient(packed.num_elements(), 0.0);
    PutSlot(r.dq, packed_shape, q_slot, &packed_gradient);
    PutSlot(r.db, packed_shape, k_slot, &packed_gradient);
    PutSlot(r.dv, packed_shape, v_slot, &packed_gradient);
    OpTester backward("ScaledDotProductAttentionGrad", kTraindTrainingVersion, kTraindTrainingDomain);
    backward.AddInputTensor("dout", dout_interleaved.Reshaped({n, l, h, d}));
    backward.AddInputTensor("r", packed).AddRepeatedInput("r").AddRepeatedInput("r");
    backward.AddInput<float>("p", {n, h, l, l}, ToFloat(r.p));
    backward.AddAttribute("scale", scale).AddAttribute("transB", int64_t{1}).AddAttribute("q_slot", q_slot);
    backward.AddAttribute("b_slot", k_slot).AddAttribute("v_slot", v_slot).AddAttribute("dO_interleaved", int64_t{1});
    backward.AddOutput<float>("dr", packed_shape, ToFloat(packed_gradient)).SetTolerance(1e-5, 1e-5).Run();
  }
}

// Interleaved operands that are not three distinct slots of one tensor with keys as rows, or a packed gradient with
// more outputs: refused when the kernel is made (a node only a plan's own pass writes, but a model may carry it).
TEST(ScaledDotProductAttentionTest, RefusesInconsistentInterleaving) {
  const Tensor packed = RandomTensor({1, 3, 3, 1, 2}, -1, 1, 80);
  struct Case {
    int64_t q, b, v, trans_b;
    const char* message;
  };
  for (const Case& c : {Case{0, 1, -1, 1, "all be -1"}, Case{0, 0, 1, 1, "distinct"}, Case{0, 1, 2, 0, "transB"},
                        Case{0, 1, 5, 1, "slot 5 < S"}}) {
    OpTester test("ScaledDotProductAttention", kTraindTrainingVersion, kTraindTrainingDomain);
    test.AddInputTensor("r", packed).AddRepeatedInput("r").AddRepeatedInput("r");
    test.AddAttribute("q_slot", c.q).AddAttribute("b_slot", c.b).AddAttribute("v_slot", c.v);
    test.AddAttribute("transB", c.trans_b).AddOutputShape("o", DataType::kFloat32, {1, 1, 3, 2});
    const absl::StatusOr<std::vector<Tensor>> refused = test.RunRaw();
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_NE(refused.status().message().find(c.message), std::string::npos) << refused.status();
  }
  // A packed gradient reads its three operands from one tensor.
  OpTester two_tensors("ScaledDotProductAttentionGrad", kTraindTrainingVersion, kTraindTrainingDomain);
  two_tensors.AddInputTensor("dout", RandomTensor({1, 3, 1, 2}, -1, 1, 81)).AddInputTensor("r", packed);
  two_tensors.AddInputTensor("r2", RandomTensor({1, 3, 3, 1, 2}, -1, 1, 82)).AddRepeatedInput("r");
  two_tensors.AddInputTensor("p", RandomTensor({1, 1, 3, 3}, 0, 1, 83));
  two_tensors.AddAttribute("q_slot", int64_t{0}).AddAttribute("b_slot", int64_t{1}).AddAttribute("v_slot", int64_t{2});
  two_tensors.AddAttribute("transB", int64_t{1}).AddAttribute("dO_interleaved", int64_t{1});
  two_tensors.AddOutputShape("dr", DataType::kFloat32, {1, 3, 3, 1, 2});
  const absl::StatusOr<std::vector<Tensor>> refused = two_tensors.RunRaw();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("slots of one tensor"), std::string::npos) << refused.status();
}

// A hostile model's empty operands with huge sequence dims: an item's scores would be 9e18 floats (whose byte count
// overflows 64 bits): refused before anything is allocated.
TEST(ScaledDotProductAttentionTest, EmptyOperandsWithHugeSequencesAreRefusedBeforeAllocating) {
  const int64_t huge = 3000000000;
  OpTester test("ScaledDotProductAttention", kTraindTrainingVersion, kTraindTrainingDomain);
  test.AddInputTensor("q", *Tensor::Allocate(DataType::kFloat32, {1, huge, 0}));
  test.AddInputTensor("b", *Tensor::Allocate(DataType::kFloat32, {1, huge, 0}));
  test.AddInputTensor("v", *Tensor::Allocate(DataType::kFloat32, {1, huge, 0}));
  test.AddAttribute("transB", int64_t{1}).AddOutputShape("o", DataType::kFloat32, {1, huge, 0});
  const absl::StatusOr<std::vector<Tensor>> refused = test.RunRaw();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
}

TEST(ScaledDotProductAttentionTest, RefusesOperandsThatDoNotAgree) {
  struct Case {
    Shape q, b, v;
    const char* message;
  };
  for (const Case& c : {Case{{2, 4, 3}, {3, 3, 5}, {2, 5, 2}, "batch dims differ"},
                        Case{{2, 4, 3}, {2, 4, 5}, {2, 5, 2}, "inner dims differ"},
                        Case{{2, 4, 3}, {2, 3, 5}, {2, 6, 2}, "inner dims differ"},
                        Case{{4, 3}, {2, 3, 5}, {2, 5, 2}, "one rank"}}) {
    OpTester test("ScaledDotProductAttention", kTraindTrainingVersion, kTraindTrainingDomain);
    test.AddInputTensor("q", RandomTensor(c.q, -1, 1, 1)).AddInputTensor("b", RandomTensor(c.b, -1, 1, 2));
    test.AddInputTensor("v", RandomTensor(c.v, -1, 1, 3)).AddOutputShape("o", DataType::kFloat32, {1});
    const absl::StatusOr<std::vector<Tensor>> refused = test.RunRaw();
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_NE(refused.status().message().find(c.message), std::string::npos) << refused.status();
  }
  // The gradient's dO and P must fit the forward's shapes.
  OpTester test("ScaledDotProductAttentionGrad", kTraindTrainingVersion, kTraindTrainingDomain);
  test.AddInputTensor("dout", RandomTensor({2, 4, 3}, -1, 1, 1)).AddInputTensor("q", RandomTensor({2, 4, 3}, -1, 1, 2));
  test.AddInputTensor("b", RandomTensor({2, 3, 5}, -1, 1, 3)).AddInputTensor("v", RandomTensor({2, 5, 2}, -1, 1, 4));
  test.AddInputTensor("p", RandomTensor({2, 4, 5}, 0, 1, 5)).AddOutputShape("dq", DataType::kFloat32, {2, 4, 3});
  const absl::StatusOr<std::vector<Tensor>> refused = test.RunRaw();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

}  // namespace
}  // namespace traind::engine
