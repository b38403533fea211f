// Device-buffer conformance shared by the fake-device test and the GPU test:
// every collective x datatype x op on device buffers, with the inputs
// uploaded and the results downloaded on the same stream as the collective,
// so a result is right only if stream order held.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectives/reduce/reduce.h"
#include "tests/harness.h"

namespace loom::testing {

// How a test moves bytes to and from "device" memory; all calls go to one stream.
class DeviceHooks {
 public:
  virtual ~DeviceHooks() = default;
  virtual void* Alloc(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  // Stream-ordered copies from/to host memory that stays valid until Sync.
  virtual void Upload(void* dev, const void* host, size_t bytes) = 0;
  virtual void Download(void* host, const void* dev, size_t bytes) = 0;
  virtual void Sync() = 0;  // the host waits for the stream
  virtual GpuStream stream() = 0;
};

// What a PreMulSum all-reduce or reduce-scatter over n ranks gives at
// `offset`: rank q scales its kSum input by q + 1 (products and sums stay
// exact in every type).
inline void ExpectedPreMulSum(void* out, size_t count, DataType t, int n, size_t offset) {
  const size_t es = SizeOf(t);
  std::vector<char> tmp(count * es + 1), scalar(8);
  std::memset(out, 0, count * es);
  for (int q = 0; q < n; ++q) {
    FillInput(tmp.data(), count, t, q, offset, RedOp::kSum);
    SetElem(scalar.data(), 0, t, q + 1);
    PreMulInto(tmp.data(), tmp.data(), count, t, scalar.data());
    ReduceInto(out, out, tmp.data(), count, t, RedOp::kSum);
  }
}

inline std::string DeviceCase(const char* coll, DataType t, RedOp op, size_t count, bool in_place,
                              int rank) {
  return std::string(coll) + " type=" + std::string(Name(t)) + " op=" + std::string(Name(op)) +
         " count=" + std::to_string(count) + (in_place ? " in-place" : " out-of-place") +
         " rank=" + std::to_string(rank);
}

// Runs every collective on device buffers through `c`'s stream forms and
// checks each result against the CPU reference (exact, bitwise).
inline void CheckDeviceCollectives(Communicator& c, DeviceHooks& h,
                                   const std::vector<DataType>& types,
                                   const std::vector<size_t>& counts) {
  const int n = c.size(), r = c.rank();
  const RedOp ops[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};
  GpuStream s = h.stream();
  for (DataType t : types) {
    const size_t es = SizeOf(t);
    for (size_t count : counts) {
      const size_t all = count * n * es + 8;  // + a PreMulSum scalar
      char* dsend = static_cast<char*>(h.Alloc(all));
      char* drecv = static_cast<char*>(h.Alloc(all));
      std::vector<char> in(all), out(all), want(all);
      for (bool in_place : {false, true}) {
        for (RedOp op : ops) {
          // all-reduce
          FillInput(in.data(), count, t, r, 0, op);
          h.Upload(dsend, in.data(), count * es);
          char* dout = in_place ? dsend : drecv;
          ASSERT_TRUE(c.AllReduce(dsend, dout, count, t, op, s).ok());
          h.Download(out.data(), dout, count * es);
          h.Sync();
          ExpectedReduction(want.data(), count, t, op, n, 0);
          EXPECT_EQ(CountMismatches(out.data(), want.data(), count, t), 0u)
              << DeviceCase("AllReduce", t, op, count, in_place, r);
          // reduce to a root that moves with the count
          const int root = static_cast<int>(count % n);
          h.Upload(dsend, in.data(), count * es);
          dout = in_place ? dsend : drecv;
          ASSERT_TRUE(c.Reduce(dsend, dout, count, t, op, root, s).ok());
          h.Download(out.data(), dout, count * es);
          h.Sync();
          if (r == root) {
            EXPECT_EQ(CountMismatches(out.data(), want.data(), count, t), 0u)
                << DeviceCase("Reduce", t, op, count, in_place, r);
          }
          // reduce-scatter: rank r gets block r
          FillInput(in.data(), count * n, t, r, 0, op);
          h.Upload(dsend, in.data(), count * n * es);
          dout = in_place ? dsend + r * count * es : drecv;
          ASSERT_TRUE(c.ReduceScatter(dsend, dout, count, t, op, s).ok());
          h.Download(out.data(), dout, count * es);
          h.Sync();
          ExpectedReduction(want.data(), count, t, op, n, r * count);
          EXPECT_EQ(CountMismatches(out.data(), want.data(), count, t), 0u)
              << DeviceCase("ReduceScatter", t, op, count, in_place, r);
        }
        // PreMulSum all-reduce and reduce-scatter, the scalar (rank + 1)
        // in device memory written on the stream just before
        char* dscalar = drecv + count * n * es;  // past the blocks, within the allocation
        std::vector<char> scalar(8);             // valid until the Sync below
        SetElem(scalar.data(), 0, t, r + 1);
        h.Upload(dscalar, scalar.data(), es);
        const Reduction premul = Reduction::PreMulSumAt(dscalar, t);
        FillInput(in.data(), count * n, t, r, 0, RedOp::kSum);
        h.Upload(dsend, in.data(), count * n * es);
        char* pout = in_place ? dsend : drecv;
        {
          const Status st = c.AllReduce(dsend, pout, count, t, premul, s);
          ASSERT_TRUE(st.ok()) << st.ToString();
        }
        h.Download(out.data(), pout, count * es);
        h.Sync();
        ExpectedPreMulSum(want.data(), count, t, n, 0);
        EXPECT_EQ(CountMismatches(out.data(), want.data(), count, t), 0u)
            << DeviceCase("AllReduce PreMulSum", t, RedOp::kSum, count, in_place, r);
        h.Upload(dsend, in.data(), count * n * es);
        pout = in_place ? dsend + r * count * es : drecv;
        {
          const Status st = c.ReduceScatter(dsend, pout, count, t, premul, s);
          ASSERT_TRUE(st.ok()) << st.ToString();
        }
        h.Download(out.data(), pout, count * es);
        h.Sync();
        ExpectedPreMulSum(want.data(), count, t, n, r * count);
        EXPECT_EQ(CountMismatches(out.data(), want.data(), count, t), 0u)
            << DeviceCase("ReduceScatter PreMulSum", t, RedOp::kSum, count, in_place, r);
        // all-gather: block j from rank j
        char* mine = in_place ? drecv + r * count * es : dsend;
        FillInput(in.data(), count, t, r, 0, RedOp::kSum);
        h.Upload(mine, in.data(), count * es);
        ASSERT_TRUE(c.AllGather(mine, drecv, count, t, s).ok());
        h.Download(out.data(), drecv, count * n * es);
        h.Sync();
        for (int j = 0; j < n; ++j) FillInput(want.data() + j * count * es, count, t, j, 0, RedOp::kSum);
        EXPECT_EQ(CountMismatches(out.data(), want.data(), count * n, t), 0u)
            << DeviceCase("AllGather", t, RedOp::kSum, count, in_place, r);
        // broadcast
        const int root = static_cast<int>((count + 1) % n);
        h.Upload(dsend, in.data(), count * es);
        char* dout = in_place ? dsend : drecv;
        ASSERT_TRUE(c.Broadcast(dsend, dout, count, t, root, s).ok());
        h.Download(out.data(), dout, count * es);
        h.Sync();
        FillInput(want.data(), count, t, root, 0, RedOp::kSum);
        EXPECT_EQ(CountMismatches(out.data(), want.data(), count, t), 0u)
            << DeviceCase("Broadcast", t, RedOp::kSum, count, in_place, r);
        // all-to-all: block j of rank r goes to rank j
        char* a2a_in = in_place ? drecv : dsend;
        FillInput(in.data(), count * n, t, r, 0, RedOp::kSum);
        h.Upload(a2a_in, in.data(), count * n * es);
        ASSERT_TRUE(c.AllToAll(a2a_in, drecv, count, t, s).ok());
        h.Download(out.data(), drecv, count * n * es);
        h.Sync();
        for (int j = 0; j < n; ++j) FillInput(want.data() + j * count * es, count, t, j, r * count, RedOp::kSum);
        EXPECT_EQ(CountMismatches(out.data(), want.data(), count * n, t), 0u)
            << DeviceCase("AllToAll", t, RedOp::kSum, count, in_place, r);
      }
      // send/recv around the ring, one group: one release of the stream
      FillInput(in.data(), count, t, r, 0, RedOp::kSum);
      h.Upload(dsend, in.data(), count * es);
      ASSERT_TRUE(GroupStart().ok());
      EXPECT_TRUE(c.Send(dsend, count, t, (r + 1) % n, s).ok());
      EXPECT_TRUE(c.Recv(drecv, count, t, (r + n - 1) % n, s).ok());
      ASSERT_TRUE(GroupEnd().ok());
      h.Download(out.data(), drecv, count * es);
      h.Sync();
      FillInput(want.data(), count, t, (r + n - 1) % n, 0, RedOp::kSum);
      EXPECT_EQ(CountMismatches(out.data(), want.data(), count, t), 0u)
          << DeviceCase("SendRecv", t, RedOp::kSum, count, false, r);
      h.Free(dsend);
      h.Free(drecv);
    }
  }
}

}  // namespace loom::testing
