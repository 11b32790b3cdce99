// CollectiveQueue (client/collective_queue.h): runs tasks one at a time in
// the order they were added, on its own thread, and refuses what it has not
// run once it is shut or closed.
#include "client/collective_queue.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace fedgather {
namespace {

// What the tasks did, in order: "run N" or "refused N: <message>".
class Journal {
 public:
  CollectiveQueue::Task Task(int n, absl::Notification* ran = nullptr) {
    return [this, n, ran](const absl::Status& refused) {
      {
        absl::MutexLock lock(&mu_);
        lines_.push_back(refused.ok() ? "run " + std::to_string(n)
                                      : "refused " + std::to_string(n) + ": " +
                                            std::string(refused.message()));
        threads_.push_back(std::this_thread::get_id());
      }
      if (ran != nullptr) ran->Notify();
    };
  }
  std::vector<std::string> lines() {
    absl::MutexLock lock(&mu_);
    return lines_;
  }
  std::vector<std::thread::id> threads() {
    absl::MutexLock lock(&mu_);
    return threads_;
  }
  // AwaitLines blocks until at least `n` lines were recorded.
  void AwaitLines(size_t n) {
    absl::MutexLock lock(&mu_);
    const auto recorded = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return lines_.size() >= n;
    };
    mu_.Await(absl::Condition(&recorded));
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
};

TEST(CollectiveQueueTest, RunsTasksInTheOrderAddedOnOneOtherThread) {
  Journal journal;
  CollectiveQueue queue;
  absl::Notification last;
  for (int n = 0; n < 50; ++n) queue.Add(journal.Task(n));
  queue.Add(journal.Task(50, &last));
  last.WaitForNotification();
  std::vector<std::string> expected;
  for (int n = 0; n <= 50; ++n) expected.push_back("run " + std::to_string(n));
  EXPECT_EQ(journal.lines(), expected);
  const std::vector<std::thread::id> threads = journal.threads();
  for (const std::thread::id& id : threads) {
    EXPECT_EQ(id, threads.front());
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(CollectiveQueueTest, ShutRefusesWhatWaitsAndLetsTheRunningTaskFinish) {
  Journal journal;
  CollectiveQueue queue;
  absl::Notification running, release;
  queue.Add([&](const absl::Status& refused) {
    EXPECT_TRUE(refused.ok()) << refused;
    running.Notify();
    release.WaitForNotification();
  });
  queue.Add(journal.Task(1));
  queue.Add(journal.Task(2));
  running.WaitForNotification();
  queue.Shut(absl::UnavailableError("the server went silent"));
  // Refused at once, on this thread, while the first task still runs.
  EXPECT_EQ(journal.lines(),
            (std::vector<std::string>{"refused 1: the server went silent",
                                      "refused 2: the server went silent"}));
  // A later task is refused on the caller's thread with the same status.
  queue.Add(journal.Task(3));
  EXPECT_EQ(journal.lines().back(), "refused 3: the server went silent");
  EXPECT_EQ(journal.threads().back(), std::this_thread::get_id());
  // A second Shut changes nothing.
  queue.Shut(absl::InternalError("ignored"));
  queue.Add(journal.Task(4));
  EXPECT_EQ(journal.lines().back(), "refused 4: the server went silent");
  release.Notify();
  queue.Close(absl::CancelledError("ignored too"));
}

TEST(CollectiveQueueTest, CloseWaitsForTheRunningTask) {
  CollectiveQueue queue;
  absl::Notification running;
  bool finished = false;
  queue.Add([&](const absl::Status&) {
    running.Notify();
    // Lets time pass, so that Close is called while this task still runs
    // (no event says "Close has begun waiting"); the check holds either way.
    absl::SleepFor(absl::Milliseconds(50));
    finished = true;
  });
  running.WaitForNotification();
  queue.Close(absl::CancelledError("closed"));
  EXPECT_TRUE(finished);  // joined: the write is visible without a lock
}

TEST(CollectiveQueueTest, AnOkStatusClosesWithCancelled) {
  Journal journal;
  CollectiveQueue queue;
  queue.Close(absl::OkStatus());
  queue.Add(journal.Task(1));
  EXPECT_EQ(journal.lines(),
            (std::vector<std::string>{"refused 1: the group was closed"}));
}

TEST(CollectiveQueueTest, TheDestructorRefusesWhatWaits) {
  Journal journal;
  absl::Notification release;
  std::thread releaser;
  {
    CollectiveQueue queue;
    absl::Notification running;
    queue.Add([&](const absl::Status&) {
      running.Notify();
      release.WaitForNotification();
    });
    queue.Add(journal.Task(1));
    running.WaitForNotification();
    releaser = std::thread([&] {
      // The destructor refuses task 1 before it waits for the running one.
      journal.AwaitLines(1);
      release.Notify();
    });
  }
  releaser.join();
  EXPECT_EQ(journal.lines(),
            (std::vector<std::string>{"refused 1: the group was closed"}));
}

}  // namespace
}  // namespace fedgather
