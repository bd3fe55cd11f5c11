//===- ThreadCommunicatorTest.cpp - Collectives between rank threads ------===//
//
// Every rank runs on its own thread and repeats the collectives many times
// with rank-dependent data, so a barrier that lets a rank overtake another
// (reusing a buffer that is still being read) shows up as a wrong sum.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/ThreadCommunicator.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

namespace infer::cpu {
namespace {

/// Runs `body(communicator)` on one thread per rank of `group`.
void runRanks(ThreadGroup &group,
              const std::function<void(Communicator &)> &body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < group.size(); ++r)
    threads.emplace_back([&, r] { body(group.communicator(r)); });
  for (std::thread &t : threads)
    t.join();
}

class ThreadCommunicatorTest : public ::testing::TestWithParam<int> {};

TEST_P(ThreadCommunicatorTest, AllReduceSumsOverRanksRepeatedly) {
  const int size = GetParam();
  ThreadGroup group(size);
  constexpr int kRounds = 200;
  constexpr int64_t kCount = 37;
  std::vector<int> failures(size, 0);
  runRanks(group, [&](Communicator &comm) {
    EXPECT_EQ(comm.size(), size);
    for (int round = 0; round < kRounds; ++round) {
      std::vector<float> data(kCount);
      for (int64_t i = 0; i < kCount; ++i)
        data[i] = static_cast<float>(comm.rank() * 1000 + round + i);
      ASSERT_TRUE(comm.allReduceSum(data.data(), kCount).isOk());
      for (int64_t i = 0; i < kCount; ++i) {
        // sum over r of (1000 r + round + i)
        float expected = static_cast<float>(1000 * size * (size - 1) / 2 +
                                            size * (round + i));
        failures[comm.rank()] += data[i] != expected;
      }
    }
  });
  for (int r = 0; r < size; ++r)
    EXPECT_EQ(failures[r], 0) << "rank " << r;
}

TEST_P(ThreadCommunicatorTest, AllGatherConcatenatesInRankOrderRepeatedly) {
  const int size = GetParam();
  ThreadGroup group(size);
  constexpr int kRounds = 200;
  constexpr int64_t kCount = 5;
  std::vector<int> failures(size, 0);
  runRanks(group, [&](Communicator &comm) {
    for (int round = 0; round < kRounds; ++round) {
      std::vector<float> send(kCount);
      for (int64_t i = 0; i < kCount; ++i)
        send[i] = static_cast<float>(comm.rank() * 100 + round * 10 + i);
      std::vector<float> recv(kCount * size, -1.0f);
      ASSERT_TRUE(comm.allGather(send.data(), kCount, recv.data()).isOk());
      for (int r = 0; r < size; ++r)
        for (int64_t i = 0; i < kCount; ++i)
          failures[comm.rank()] += recv[r * kCount + i] !=
                                   static_cast<float>(r * 100 + round * 10 + i);
    }
  });
  for (int r = 0; r < size; ++r)
    EXPECT_EQ(failures[r], 0) << "rank " << r;
}

TEST_P(ThreadCommunicatorTest, MixedCollectivesGiveEveryRankTheSameBits) {
  const int size = GetParam();
  ThreadGroup group(size);
  std::vector<std::vector<float>> results(size);
  runRanks(group, [&](Communicator &comm) {
    std::vector<float> data = {0.1f * (comm.rank() + 1), 1e-7f, 3.3f};
    for (int round = 0; round < 50; ++round) {
      ASSERT_TRUE(comm.allReduceSum(data.data(), 3).isOk());
      std::vector<float> gathered(3 * size);
      ASSERT_TRUE(comm.allGather(data.data(), 3, gathered.data()).isOk());
      for (float &x : data)
        x = x / size + 0.01f;
    }
    results[comm.rank()] = data;
  });
  for (int r = 1; r < size; ++r)
    EXPECT_EQ(results[r], results[0]) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadCommunicatorTest,
                         ::testing::Values(2, 4));

TEST(ThreadCommunicator, AbortReleasesWaitingRanksAndResetRecovers) {
  ThreadGroup group(2);
  float value = 1.0f;
  std::thread waiter([&] {
    Status status = group.communicator(1).allReduceSum(&value, 1);
    EXPECT_FALSE(status.isOk());
  });
  group.abort();
  waiter.join();
  EXPECT_FALSE(group.communicator(0).allReduceSum(&value, 1).isOk());

  group.reset();
  std::vector<float> data = {1.0f, 2.0f};
  runRanks(group, [&](Communicator &comm) {
    float x = data[comm.rank()];
    ASSERT_TRUE(comm.allReduceSum(&x, 1).isOk());
    EXPECT_EQ(x, 3.0f);
  });
}

TEST(ThreadCommunicator, RanksWithDifferentCountsFailOnEveryRank) {
  // A malformed tp plan: rank 1 reduces 4 elements, rank 0 only 1 (issue
  // 18: rank 1 used to read past rank 0's buffer).
  ThreadGroup group(2);
  std::vector<Status> reduce(2), gather(2);
  runRanks(group, [&](Communicator &comm) {
    const int64_t count = comm.rank() == 0 ? 1 : 4;
    std::vector<float> data(count, 1.0f), recv(2 * count);
    reduce[comm.rank()] = comm.allReduceSum(data.data(), count);
    gather[comm.rank()] = comm.allGather(data.data(), count, recv.data());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(reduce[r].isOk()) << "rank " << r;
    EXPECT_NE(reduce[r].message().find("disagree on the element count"),
              std::string::npos)
        << reduce[r].message();
    EXPECT_FALSE(gather[r].isOk()) << "rank " << r;
  }
  // The group stays usable.
  runRanks(group, [&](Communicator &comm) {
    float x = 1.0f;
    ASSERT_TRUE(comm.allReduceSum(&x, 1).isOk());
    EXPECT_EQ(x, 2.0f);
  });
}

TEST(ThreadCommunicator, OneRankIsTheIdentity) {
  ThreadGroup group(1);
  std::vector<float> data = {1.5f, -2.0f};
  ASSERT_TRUE(group.communicator(0).allReduceSum(data.data(), 2).isOk());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  std::vector<float> recv(2);
  ASSERT_TRUE(
      group.communicator(0).allGather(data.data(), 2, recv.data()).isOk());
  EXPECT_EQ(recv, data);
}

} // namespace
} // namespace infer::cpu
