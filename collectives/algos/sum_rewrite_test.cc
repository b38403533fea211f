// SumRewrite: the one place kAvg and PreMulSum become a plain sum.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "collectives/algos/algorithms.h"

namespace loom {
namespace {

CollArgs Args(OpKind kind, const void* send, void* recv, size_t count, RedOp op, int root = 0) {
  CollArgs a;
  a.kind = kind;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.type = DataType::kFloat32;
  a.op = op;
  a.root = root;
  return a;
}

TEST(SumRewrite, AvgSumsThenDividesThisRanksResultOnce) {
  Scratch scratch;
  std::vector<float> in{2, 4, 6}, out{0, 0, 0};
  const SumRewrite all_reduce(Args(OpKind::kAllReduce, in.data(), out.data(), 3, RedOp::kAvg), 1,
                              2, scratch);
  EXPECT_EQ(all_reduce.args().op, RedOp::kSum);
  EXPECT_EQ(all_reduce.args().send, in.data());
  out = {10, 20, 30};  // what the sum left
  all_reduce.Finish();
  EXPECT_EQ(out, (std::vector<float>{5, 10, 15}));
  // A Reduce divides only on its root, which alone has a result.
  out = {10, 20, 30};
  SumRewrite(Args(OpKind::kReduce, in.data(), out.data(), 3, RedOp::kAvg, /*root=*/0), 1, 2,
             scratch)
      .Finish();
  EXPECT_EQ(out, (std::vector<float>{10, 20, 30}));
  SumRewrite(Args(OpKind::kReduce, in.data(), out.data(), 3, RedOp::kAvg, /*root=*/1), 1, 2,
             scratch)
      .Finish();
  EXPECT_EQ(out, (std::vector<float>{5, 10, 15}));
  // Ops other than kAvg pass through.
  const SumRewrite max(Args(OpKind::kAllReduce, in.data(), out.data(), 3, RedOp::kMax), 0, 2,
                       scratch);
  EXPECT_EQ(max.args().op, RedOp::kMax);
  out = {1, 2, 3};
  max.Finish();
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3}));
}

TEST(SumRewrite, PreMulSumScalesIntoTheOutputOrIntoScratch) {
  Scratch scratch;
  std::vector<float> in{1, 2, 3, 4}, out(4, 0);
  CollArgs a = Args(OpKind::kAllReduce, in.data(), out.data(), 4, RedOp::kSum);
  a.premul = true;
  a.scalar.where = PreMulScalar::Where::kValue;
  const float three = 3;
  std::memcpy(a.scalar.value, &three, sizeof three);
  a.scalar.type = DataType::kFloat32;
  const SumRewrite whole(a, 0, 2, scratch);
  EXPECT_FALSE(whole.args().premul);
  EXPECT_EQ(whole.args().send, out.data());  // summed in place from the scaled output
  EXPECT_EQ(out, (std::vector<float>{3, 6, 9, 12}));
  EXPECT_EQ(in, (std::vector<float>{1, 2, 3, 4}));  // the input is never written
  // ReduceScatter: this rank's output is one block; the whole input is scaled aside.
  std::vector<float> block(2, 0);
  CollArgs rs = a;
  rs.kind = OpKind::kReduceScatter;
  rs.recv = block.data();
  rs.count = 2;
  const SumRewrite aside(rs, 0, 2, scratch);
  ASSERT_NE(aside.args().send, in.data());
  ASSERT_NE(aside.args().send, block.data());
  const auto* scaled = static_cast<const float*>(aside.args().send);
  EXPECT_EQ(std::vector<float>(scaled, scaled + 4), (std::vector<float>{3, 6, 9, 12}));
}

}  // namespace
}  // namespace loom
