#include "serve/work_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gyre::serve {
namespace {

// The queue bound holds while the workers are busy, and Stop hands every still-queued task
// cancelled = true (so each accepted task runs exactly once).
TEST(WorkPool, BoundsTheQueueAndCancelsWhatIsLeftAtStop) {
  WorkPool pool(1, 2);
  std::atomic<bool> release{false}, started{false};
  std::atomic<int> ran{0}, cancelled{0};
  ASSERT_TRUE(pool.TrySubmit([&](bool c) {
    started = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    c ? ++cancelled : ++ran;
  }));
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto count = [&](bool c) { c ? ++cancelled : ++ran; };
  EXPECT_TRUE(pool.TrySubmit(count));
  EXPECT_TRUE(pool.TrySubmit(count));
  EXPECT_FALSE(pool.TrySubmit(count));  // two wait already
  EXPECT_EQ(pool.num_queued(), 2);
  std::thread stopper([&] { pool.Stop(); });
  while (pool.num_queued() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // Stop took them
  release = true;
  stopper.join();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(cancelled.load(), 2);
  EXPECT_FALSE(pool.TrySubmit(count));  // stopped
  pool.Stop();                           // idempotent
}

}  // namespace
}  // namespace gyre::serve
