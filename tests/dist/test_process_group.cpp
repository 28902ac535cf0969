// tests/dist/test_process_group.cpp: the process groups (mixtrain/dist/process_group.h).
//
// ProcessGroupSingle and ProcessGroupEnv run in every test run. ProcessGroupMpi needs several
// processes: CTest runs this binary as `mpi:process_group` (mpirun -np 2, --gtest_filter=ProcessGroup*,
// tests/CMakeLists.txt); run alone, those tests skip. Rank r contributes (r+1) times a pattern, so
// every result is known in closed form for any number of ranks. The MPI tests use EXPECT, never
// ASSERT, between collectives: a rank that left a test early would pair its next collective with
// another rank's different one.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dist/process_group_internal.h"
#include "mixtrain/dist/process_group.h"
#include "mixtrain/factory.h"
#include "mixtrain/half.h"
#include "mixtrain/tensor.h"
#include "support/checked_device.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace dist = mixtrain::dist;
using dist::ReduceOp;

namespace {

using Ms = std::chrono::duration<double, std::milli>;
using Clock = std::chrono::steady_clock;

// The pattern every rank scales by (rank + 1): small multiples of 1/4 (exact in every float dtype,
// bf16 included, even times the sum of ranks), whole numbers for integer dtypes.
double pattern(int64_t i, bool floating) {
  const double whole = static_cast<double>(i % 97) - 48;
  return floating ? whole * 0.25 : whole;
}

// A tensor of `dtype` holding `values` (converted exactly: the tests pick representable values).
mt::Tensor tensor_of(const std::vector<double>& values, mt::DType dtype) {
  return mt::from_vector(values, mt::Shape{static_cast<int64_t>(values.size())}, {.dtype = dtype});
}

// Sets or unsets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(value);
  }
  ~ScopedEnv() { set(old_ ? old_->c_str() : nullptr); }
  void set(const char* value) {
    if (value)
      setenv(name_, value, 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// ---------------------------------------------------------------------------------------------
// The single-process group.

TEST(ProcessGroupSingle, IsRankZeroOfOne) {
  const auto pg = dist::make_single_process_group();
  EXPECT_EQ(pg->rank(), 0);
  EXPECT_EQ(pg->size(), 1);
  EXPECT_EQ(pg->backend_name(), "single");
  pg->barrier();
  EXPECT_EQ(pg->all_gather(int64_t{42}), std::vector<int64_t>{42});
  EXPECT_EQ(pg->all_gather(std::string("conv1.weight [8, 1, 3, 3]")),
            std::vector<std::string>{"conv1.weight [8, 1, 3, 3]"});
}

TEST(ProcessGroupSingle, CollectivesAreTheIdentity) {
  const auto pg = dist::make_single_process_group();
  std::vector<double> values;
  for (int64_t i = 0; i < 37; ++i) values.push_back(pattern(i, true));
  for (const mt::DType dtype : {mt::kFloat32, mt::kFloat64, mt::kBFloat16, mt::kFloat16, mt::kInt64, mt::kInt32}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      if (op == ReduceOp::kAvg && !mt::is_floating(dtype)) continue;
      SCOPED_TRACE(std::string(mt::to_string(dtype)) + " " + std::string(dist::to_string(op)));
      const mt::Tensor t = tensor_of(values, dtype);
      const std::vector<double> before = t.to_vector<double>();
      const std::shared_ptr<dist::Work> work = pg->all_reduce_async(t, op);
      EXPECT_TRUE(work->is_completed());
      work->wait();
      EXPECT_EQ(t.to_vector<double>(), before);
    }
    const mt::Tensor t = tensor_of(values, dtype);
    pg->broadcast(t, 0);
    EXPECT_EQ(t.to_vector<double>(), tensor_of(values, dtype).to_vector<double>());
  }
}

// The single group checks its arguments as the MPI group does, so code tested on one process is
// valid on several.
TEST(ProcessGroupSingle, RefusesWhatTheMpiGroupRefuses) {
  const auto pg = dist::make_single_process_group();
  const mt::Tensor m = mt::zeros({3, 4});
  EXPECT_MT_ERROR(pg->all_reduce(mt::Tensor{}), "dist: all_reduce of an undefined tensor");
  EXPECT_MT_ERROR(pg->all_reduce(m.t()), "all_reduce needs a contiguous tensor", "[4, 3]");
  EXPECT_MT_ERROR(pg->all_reduce(mt::zeros({4}, {.dtype = mt::kUInt8})), "does not reduce uint8",
                  "float32, float64, int64, int32, bfloat16 and float16");
  EXPECT_MT_ERROR(pg->all_reduce(mt::zeros({4}, {.dtype = mt::kBool})), "does not reduce bool");
  EXPECT_MT_ERROR(pg->all_reduce(mt::zeros({4}, {.dtype = mt::kInt64}), ReduceOp::kAvg),
                  "avg needs a floating tensor, got int64", "reduce with sum and divide");
  const mt::Tensor elsewhere = mt::zeros({4}, {.device = mt::testing::checked_device()});
  EXPECT_MT_ERROR(pg->all_reduce(elsewhere), "dist: all_reduce needs a cpu tensor (this float32 tensor",
                  "let DistributedDataParallel reduce a device model");
  EXPECT_MT_ERROR(pg->all_gather(elsewhere, mt::zeros({4})), "dist: all_gather input needs a cpu tensor");
  EXPECT_MT_ERROR(pg->all_gather(mt::zeros({4}), mt::zeros({5})), "all_gather of 4 elements per rank over 1 ranks",
                  "needs an output of 4 elements, got 5");
  EXPECT_MT_ERROR(pg->all_gather(mt::zeros({4}), mt::zeros({4}, {.dtype = mt::kBFloat16})),
                  "all_gather of a float32 input into a bfloat16 output");
  const mt::Tensor gathered = mt::zeros({3}, {.dtype = mt::kInt64});
  pg->all_gather(mt::from_vector(std::vector<int64_t>{7, -1, 5}, {3}), gathered);
  EXPECT_EQ(gathered.to_vector<int64_t>(), (std::vector<int64_t>{7, -1, 5}));
  EXPECT_MT_ERROR(pg->broadcast(elsewhere, 0), "dist: broadcast needs a cpu tensor");
  EXPECT_MT_ERROR(pg->broadcast(m.t(), 0), "broadcast needs a contiguous tensor");
  EXPECT_MT_ERROR(pg->broadcast(m, 1), "broadcast root 1 is not a rank of this group of 1");
  EXPECT_MT_ERROR(pg->broadcast(m, -1), "broadcast root -1");
  // broadcast moves bytes: every dtype, bool and uint8 included.
  pg->broadcast(mt::zeros({4}, {.dtype = mt::kBool}), 0);
  pg->broadcast(mt::zeros({4}, {.dtype = mt::kUInt8}), 0);
}

TEST(ProcessGroupSingle, AbortEndsTheProcessWithTheCodeAndTheReason) {
  if (dist::launched_by_mpi()) GTEST_SKIP() << "no fork-based death test inside an MPI job";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto pg = dist::make_single_process_group();
  EXPECT_EXIT(pg->abort(7, "rank 0 found NaN gradients"), ::testing::ExitedWithCode(7),
              "mixtrain: aborting: rank 0 found NaN gradients");
}

TEST(ProcessGroupSingle, ReduceOpNames) {
  EXPECT_EQ(dist::to_string(ReduceOp::kSum), "sum");
  EXPECT_EQ(dist::to_string(ReduceOp::kAvg), "avg");
  EXPECT_EQ(dist::to_string(ReduceOp::kMax), "max");
}

// ---------------------------------------------------------------------------------------------
// The launcher's environment, and world() outside a launcher.

TEST(ProcessGroupEnv, LaunchedByMpiReadsTheLauncherEnvironment) {
  if (dist::launched_by_mpi()) GTEST_SKIP() << "runs outside mpirun only (it rewrites the launcher's variables)";
  ScopedEnv ompi("OMPI_COMM_WORLD_SIZE", nullptr);
  ScopedEnv pmi("PMI_SIZE", nullptr);
  ScopedEnv pmix("PMIX_RANK", nullptr);
  EXPECT_FALSE(dist::launched_by_mpi());
  EXPECT_EQ(dist::detail::launcher_world_size(), 0);
  ompi.set("1");  // mpirun -np 1
  EXPECT_FALSE(dist::launched_by_mpi());
  ompi.set("4");
  EXPECT_TRUE(dist::launched_by_mpi());
  EXPECT_EQ(dist::detail::launcher_world_size(), 4);
  ompi.set("four");
  EXPECT_FALSE(dist::launched_by_mpi());
  ompi.set(nullptr);
  pmi.set("3");
  EXPECT_TRUE(dist::launched_by_mpi());
  EXPECT_EQ(dist::detail::launcher_world_size(), 3);
  pmi.set(nullptr);
  pmix.set("0");
  EXPECT_FALSE(dist::launched_by_mpi());
  pmix.set("2");
  EXPECT_TRUE(dist::launched_by_mpi());
}

// The local rank picks a process's GPU under mpirun: the launchers' variables in order, hostile
// values ignored.
TEST(ProcessGroupEnv, LocalRankReadsTheLauncherEnvironment) {
  if (dist::launched_by_mpi()) GTEST_SKIP() << "runs outside mpirun only (it rewrites the launcher's variables)";
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", nullptr);
  ScopedEnv mpich("MPI_LOCALRANKID", nullptr);
  ScopedEnv slurm("SLURM_LOCALID", nullptr);
  EXPECT_EQ(dist::launcher_local_rank(), 0);
  slurm.set("5");
  EXPECT_EQ(dist::launcher_local_rank(), 5);
  mpich.set("2");
  EXPECT_EQ(dist::launcher_local_rank(), 2);
  ompi.set("3");
  EXPECT_EQ(dist::launcher_local_rank(), 3);
  for (const char* bad : {"-1", "three", "3x", "", "99999999999999999999"}) {
    ompi.set(bad);
    EXPECT_EQ(dist::launcher_local_rank(), 2) << "OMPI_COMM_WORLD_LOCAL_RANK='" << bad << "' falls through to MPICH's";
  }
  ompi.set("2000000");
  EXPECT_EQ(dist::launcher_local_rank(), 0);  // absurd: rank 0's device rather than an overflow
}

TEST(ProcessGroupEnv, WorldIsOneProcessOutsideALauncher) {
  if (dist::launched_by_mpi()) GTEST_SKIP() << "started by an MPI launcher: world() is the MPI world";
  dist::ProcessGroup& pg = dist::world();
  EXPECT_EQ(pg.backend_name(), "single");
  EXPECT_EQ(pg.rank(), 0);
  EXPECT_EQ(pg.size(), 1);
  EXPECT_EQ(&pg, &dist::world());
}

// Without MPI, N processes started by mpirun must not each train as rank 0 of 1.
TEST(ProcessGroupEnv, ALaunchedRunWithoutMpiIsRefused) {
  if (dist::built_with_mpi()) GTEST_SKIP() << "this build has MPI (it would start MPI for a fake launcher)";
  ScopedEnv ompi("OMPI_COMM_WORLD_SIZE", "2");
  EXPECT_MT_ERROR(dist::detail::make_world_group(), "started by an MPI launcher", "one of 2 processes",
                  "has no MPI", "rank 0 of 1", "libopenmpi-dev");
}

// ---------------------------------------------------------------------------------------------
// The MPI group: run under mpirun with 2 (or more) processes.

class ProcessGroupMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::launched_by_mpi())
      GTEST_SKIP() << "needs several processes: CTest runs this suite as mpi:process_group (mpirun -np 2)";
    if (!dist::built_with_mpi()) GTEST_SKIP() << "this build has no MPI";
  }
  static dist::ProcessGroup& pg() { return dist::world(); }
  static int size() { return dist::world().size(); }
  static int rank() { return dist::world().rank(); }
  // 1 + 2 + ... + W: the sum of the (rank + 1) factors.
  static double factor_sum() { return size() * (size() + 1) / 2.0; }
};

TEST_F(ProcessGroupMpi, IsTheLaunchersWorld) {
  EXPECT_EQ(pg().backend_name(), "mpi");
  EXPECT_EQ(size(), dist::detail::launcher_world_size());
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) EXPECT_EQ(rank(), std::atoi(r));
  EXPECT_GE(size(), 2);
  EXPECT_EQ(&pg(), &dist::world());
}

// Sum, average and maximum of 1031 elements (not a multiple of any vector width) in each native
// dtype; int64 values above 2^53 show that integers are not reduced through doubles.
TEST_F(ProcessGroupMpi, ReducesEveryNativeDtype) {
  const int64_t n = 1031;
  const int w = size();
  for (const mt::DType dtype : {mt::kFloat32, mt::kFloat64, mt::kInt64, mt::kInt32}) {
    const bool floating = mt::is_floating(dtype);
    const double offset = dtype == mt::kInt64 ? std::ldexp(1.0, 60) / 64 : 0;  // 2^54: beyond a double's integers
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      if (op == ReduceOp::kAvg && !floating) continue;
      SCOPED_TRACE(std::string(mt::to_string(dtype)) + " " + std::string(dist::to_string(op)));
      mt::Tensor t = mt::empty({n}, {.dtype = dtype});
      std::vector<double> want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const double p = pattern(i, floating);
        const double mine = (rank() + 1) * p;
        if (dtype == mt::kInt64) {
          t.data_ptr<int64_t>()[i] = static_cast<int64_t>(offset) + (static_cast<int64_t>(i) << 1) + rank();
        } else if (dtype == mt::kInt32) {
          t.data_ptr<int32_t>()[i] = static_cast<int32_t>(mine);
        } else if (dtype == mt::kFloat32) {
          t.data_ptr<float>()[i] = static_cast<float>(mine);
        } else {
          t.data_ptr<double>()[i] = mine;
        }
        const double sum = factor_sum() * p;
        want[static_cast<size_t>(i)] = op == ReduceOp::kSum ? sum : op == ReduceOp::kAvg ? sum / w : (p >= 0 ? w * p : p);
      }
      const uint64_t version = t.version();
      pg().all_reduce(t, op);
      EXPECT_GT(t.version(), version);
      if (dtype == mt::kInt64) {
        // Rank r holds 2^54 + 2i + r: the sum is W 2^54 + 2Wi + W(W-1)/2, the maximum 2^54 + 2i + W-1.
        const int64_t base = static_cast<int64_t>(offset);
        int bad = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t expect = op == ReduceOp::kSum ? w * base + 2 * w * i + w * (w - 1) / 2 : base + 2 * i + w - 1;
          bad += t.data_ptr<int64_t>()[i] != expect;
        }
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(t.data_ptr<int64_t>()[1], op == ReduceOp::kSum ? w * base + 2 * w + w * (w - 1) / 2 : base + 2 + w - 1);
        continue;
      }
      const std::vector<double> got = t.to_vector<double>();
      int bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double expect = dtype == mt::kFloat32 ? static_cast<double>(static_cast<float>(want[static_cast<size_t>(i)]))
                                                    : want[static_cast<size_t>(i)];
        if (got[static_cast<size_t>(i)] != expect) {
          if (++bad <= 3) ADD_FAILURE() << "element " << i << ": " << got[static_cast<size_t>(i)] << ", expected " << expect;
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// bf16 and fp16: exact patterns, the final rounding (to nearest even, once), and the fp32 widening.
TEST_F(ProcessGroupMpi, ReducesSixteenBitTensorsInFp32) {
  const int w = size();
  const int64_t n = 515;
  for (const mt::DType dtype : {mt::kBFloat16, mt::kFloat16}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      SCOPED_TRACE(std::string(mt::to_string(dtype)) + " " + std::string(dist::to_string(op)));
      std::vector<double> mine(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) mine[static_cast<size_t>(i)] = (rank() + 1) * pattern(i, true);
      const mt::Tensor t = tensor_of(mine, dtype);
      pg().all_reduce(t, op);
      const std::vector<double> got = t.to_vector<double>();
      int bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double p = pattern(i, true);
        const double sum = factor_sum() * p;
        const double want = op == ReduceOp::kSum ? sum : op == ReduceOp::kAvg ? sum / w : (p >= 0 ? w * p : p);
        // The 16-bit rounding of the exact result (the sums are exact in fp32).
        const double rounded = tensor_of({want}, dtype).to_vector<double>()[0];
        bad += got[static_cast<size_t>(i)] != rounded;
      }
      EXPECT_EQ(bad, 0);
    }
  }

  // Rounding once, to nearest even. bf16 has 8 significant bits, so 1 + 2^-7 is the number after 1.
  // [0]: rank 0 has 1 + 2^-7, every other rank 2^-8: with 2 ranks the fp32 sum 1 + 2^-7 + 2^-8 lies
  //      halfway between 1 + 2^-7 and 1 + 2^-6 and rounds to the even one, 1 + 2^-6 (truncation would
  //      keep 1 + 2^-7).
  // [1]: rank 0 has 1, every other rank 2^-8: summed in bf16 steps, each 1 + 2^-8 is a tie that rounds
  //      back to 1, so the sum stays 1 whatever the number of ranks; summed in fp32 it is
  //      1 + (W-1) 2^-8, rounded once (1 with 2 ranks, 1 + 2^-7 with 3).
  {
    const double tiny = std::ldexp(1.0, -8);
    const mt::Tensor t =
        tensor_of(rank() == 0 ? std::vector<double>{1 + 2 * tiny, 1.0} : std::vector<double>{tiny, tiny}, mt::kBFloat16);
    pg().all_reduce(t, ReduceOp::kSum);
    const std::vector<double> got = t.to_vector<double>();
    const float once0 = static_cast<float>(1 + 2 * tiny + (w - 1) * tiny);
    const float once1 = static_cast<float>(1 + (w - 1) * tiny);
    EXPECT_EQ(got[0], static_cast<float>(mt::bfloat16(once0)));
    EXPECT_EQ(got[1], static_cast<float>(mt::bfloat16(once1)));
    if (w == 2) EXPECT_EQ(got[0], 1 + 4 * tiny);
    if (w >= 3) EXPECT_GT(got[1], 1.0) << "an fp32 sum keeps the small contributions that 16-bit steps lose";
  }
  // fp16 tops out at 65504: the fp32 sum of 40000 from every rank does not overflow, so the average
  // is 40000 (a 16-bit sum would be inf before the division); the sum itself rounds to inf.
  {
    const mt::Tensor avg = tensor_of({40000.0, -40000.0, 0.5}, mt::kFloat16);
    pg().all_reduce(avg, ReduceOp::kAvg);
    EXPECT_EQ(avg.to_vector<double>(), (std::vector<double>{40000.0, -40000.0, 0.5}));
    const mt::Tensor sum = tensor_of({40000.0, -40000.0}, mt::kFloat16);
    pg().all_reduce(sum, ReduceOp::kSum);
    EXPECT_EQ(sum.to_vector<double>(),
              (std::vector<double>{std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}));
  }
}

// More elements than one fp32 staging piece (4 Mi elements): the pieces line up.
TEST_F(ProcessGroupMpi, ReducesLargeSixteenBitTensorsInPieces) {
  const int64_t n = (int64_t{1} << 22) + 5;
  const mt::Tensor t = mt::full({n}, static_cast<double>(rank() + 1), {.dtype = mt::kBFloat16});
  t.data_ptr<mt::bfloat16>()[n - 1] = mt::bfloat16(static_cast<float>(-(rank() + 1)));
  pg().all_reduce(t, ReduceOp::kSum);
  const mt::bfloat16* d = t.data_ptr<mt::bfloat16>();
  int64_t bad = 0;
  for (int64_t i = 0; i < n - 1; ++i) bad += static_cast<float>(d[i]) != static_cast<float>(factor_sum());
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(static_cast<float>(d[n - 1]), -static_cast<float>(factor_sum()));
}

// Every dtype, bytes as they are; roots 0 and the last rank; an empty tensor.
TEST_F(ProcessGroupMpi, BroadcastsEveryDtype) {
  for (int i = 0; i < mt::kNumDTypes; ++i) {
    const auto dtype = static_cast<mt::DType>(i);
    for (const int root : {0, size() - 1}) {
      SCOPED_TRACE(std::string(mt::to_string(dtype)) + " from rank " + std::to_string(root));
      const auto fill = [&](int who, unsigned char* p, size_t nbytes) {
        for (size_t b = 0; b < nbytes; ++b) {
          // bool elements must stay 0 or 1.
          p[b] = dtype == mt::kBool ? static_cast<unsigned char>((b + who) % 2)
                                    : static_cast<unsigned char>(b * 7 + who * 31 + 1);
        }
      };
      const mt::Tensor t = mt::empty({3, 5}, {.dtype = dtype});
      fill(rank(), static_cast<unsigned char*>(t.raw_data()), t.nbytes());
      std::vector<unsigned char> want(t.nbytes());
      fill(root, want.data(), want.size());
      pg().broadcast(t, root);
      EXPECT_EQ(std::memcmp(t.raw_data(), want.data(), want.size()), 0);
    }
  }
  const mt::Tensor empty = mt::empty({0}, {.dtype = mt::kFloat16});
  pg().broadcast(empty, 0);
  pg().all_reduce(empty);
}

TEST_F(ProcessGroupMpi, AllGathersValuesAndStringsInRankOrder) {
  const int64_t big = int64_t{1} << 50;
  const std::vector<int64_t> values = pg().all_gather(big + 7 * rank());
  std::vector<int64_t> want_values;
  for (int r = 0; r < size(); ++r) want_values.push_back(big + 7 * r);
  EXPECT_EQ(values, want_values);

  // Different lengths, one of them empty.
  const auto text = [](int r) { return r == 1 ? std::string() : "rank " + std::to_string(r) + std::string(r, '#'); };
  std::vector<std::string> want_text;
  for (int r = 0; r < size(); ++r) want_text.push_back(text(r));
  EXPECT_EQ(pg().all_gather(text(rank())), want_text);

  // Tensors: bytes in rank order, for any dtype (bf16 here, 3 elements per rank).
  const mt::Tensor mine =
      mt::from_vector(std::vector<float>{1.0f * rank(), 0.5f, -2.0f - rank()}, {3}).to(mt::kBFloat16);
  const mt::Tensor all = mt::zeros({3 * size()}, {.dtype = mt::kBFloat16});
  pg().all_gather(mine, all);
  std::vector<float> want_tensor;
  for (int r = 0; r < size(); ++r) want_tensor.insert(want_tensor.end(), {1.0f * r, 0.5f, -2.0f - r});
  EXPECT_EQ(all.to(mt::kFloat32).to_vector<float>(), want_tensor);
}

// Collectives issued back to back run in issue order: once the last is complete, all are.
TEST_F(ProcessGroupMpi, AsyncAllReducesCompleteInIssueOrder) {
  struct Case {
    mt::DType dtype;
    int64_t n;
    ReduceOp op;
  };
  const std::vector<Case> cases = {{mt::kFloat32, 3 << 20, ReduceOp::kSum}, {mt::kBFloat16, 1000, ReduceOp::kAvg},
                                   {mt::kFloat64, 7, ReduceOp::kMax},        {mt::kFloat16, 1 << 16, ReduceOp::kSum},
                                   {mt::kInt64, 1, ReduceOp::kSum},          {mt::kFloat32, 5, ReduceOp::kAvg}};
  std::vector<mt::Tensor> tensors;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (size_t k = 0; k < cases.size(); ++k) {
    tensors.push_back(mt::full({cases[k].n}, static_cast<double>((rank() + 1) * (k + 1)), {.dtype = cases[k].dtype}));
    works.push_back(pg().all_reduce_async(tensors.back(), cases[k].op));
  }
  works.back()->wait();
  for (size_t k = 0; k < works.size(); ++k) EXPECT_TRUE(works[k]->is_completed()) << "collective " << k;
  for (size_t k = works.size(); k-- > 0;) works[k]->wait();  // waiting again, in any order, is fine
  const int w = size();
  for (size_t k = 0; k < cases.size(); ++k) {
    const double f = static_cast<double>(k + 1);
    const double want = cases[k].op == ReduceOp::kSum ? factor_sum() * f
                        : cases[k].op == ReduceOp::kAvg ? factor_sum() * f / w
                                                        : w * f;
    const std::vector<double> got = tensors[k].to_vector<double>();
    const double rounded = tensor_of({want}, cases[k].dtype).to_vector<double>()[0];
    int64_t bad = 0;
    for (const double g : got) bad += g != rounded;
    EXPECT_EQ(bad, 0) << "collective " << k << " (" << cases[k].dtype << "): want " << rounded << ", got " << got[0];
  }
}

// all_reduce_async returns at once and the reduction goes on without the caller: rank 0 issues,
// keeps computing, and finds it done only after the other ranks, which start late, have joined.
TEST_F(ProcessGroupMpi, AllReduceAsyncOverlapsTheCallersWork) {
  const mt::Tensor t = mt::full({1024}, 1.0);
  if (rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = Clock::now();
  const std::shared_ptr<dist::Work> work = pg().all_reduce_async(t);
  const double issue_ms = Ms(Clock::now() - t0).count();
  if (rank() == 0) {
    EXPECT_LT(issue_ms, 150) << "all_reduce_async must not wait for the other ranks";
    EXPECT_FALSE(work->is_completed()) << "the other ranks have not issued theirs yet";
    // The caller's own work meanwhile.
    double acc = 0;
    for (int i = 0; i < 1000000; ++i) acc += std::sqrt(static_cast<double>(i));
    EXPECT_GT(acc, 0);
  }
  work->wait();
  if (rank() == 0) EXPECT_GT(Ms(Clock::now() - t0).count(), 300);
  EXPECT_EQ(t.to_vector<float>()[1023], static_cast<float>(size()));
}

TEST_F(ProcessGroupMpi, BarrierWaitsForTheLastRank) {
  pg().barrier();
  const bool last = rank() == size() - 1;
  if (last) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const auto t0 = Clock::now();
  pg().barrier();
  if (!last) EXPECT_GT(Ms(Clock::now() - t0).count(), 250);
  pg().barrier();
}

// Refused arguments throw on every rank before anything is issued, so the ranks stay in step.
TEST_F(ProcessGroupMpi, RefusedArgumentsIssueNothing) {
  EXPECT_MT_ERROR(pg().all_reduce(mt::zeros({3, 4}).t()), "all_reduce needs a contiguous tensor");
  EXPECT_MT_ERROR(pg().all_reduce(mt::zeros({4}, {.dtype = mt::kUInt8})), "does not reduce uint8");
  EXPECT_MT_ERROR(pg().all_reduce(mt::zeros({4}, {.dtype = mt::kInt32}), ReduceOp::kAvg), "avg needs a floating");
  EXPECT_MT_ERROR(pg().all_reduce(mt::zeros({4}, {.device = mt::testing::checked_device()})),
                  "needs a cpu tensor (this float32 tensor");
  EXPECT_MT_ERROR(pg().all_gather(mt::zeros({4}), mt::zeros({4 * size() + 1})), "needs an output of");
  EXPECT_MT_ERROR(pg().broadcast(mt::zeros({4}), size()), "broadcast root ", "is not a rank of this group of");
  const mt::Tensor t = mt::full({4}, 1.0);
  pg().all_reduce(t);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(4, static_cast<float>(size())));
}

}  // namespace
