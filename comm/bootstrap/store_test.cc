// The store's rank-to-rank notices (StoreClient::Notify): relayed to the
// target's notice callback with the sender's rank, in order, and answered
// by the store itself ("gone", with the sender's own payload) for a target
// that said goodbye or never joined.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/bootstrap/store_client.h"
#include "comm/bootstrap/store_server.h"

namespace loom::bootstrap {
namespace {

using Notice = std::tuple<int, bool, std::string>;  // from, gone, payload

// What one client's callback received.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Notice> got;
  // Waits until `n` notices arrived (or 10 s passed); returns them.
  std::vector<Notice> Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return got.size() >= n; });
    return got;
  }
  // Waits until `want` arrived (or 10 s passed); returns all so far.
  std::vector<Notice> WaitFor(const Notice& want) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10),
                [&] { return std::find(got.begin(), got.end(), want) != got.end(); });
    return got;
  }
};

TEST(StoreNotices, RelayedInOrderAndAnsweredForRanksThatLeft) {
  constexpr uint64_t kSecret = 0x5eed;
  constexpr int kRanks = 3;
  auto server = StoreServer::Start("127.0.0.1", 0, kSecret);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // Declared before the clients, so destroyed after them: a client's reader
  // thread may still be running its callback until the client is gone.
  std::vector<std::unique_ptr<Inbox>> inbox;
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int r = 0; r < kRanks; ++r) {
    auto c = StoreClient::Connect("127.0.0.1", server.value()->port(), kSecret,
                                  StoreClient::Identity{r, kRanks, "localhost", 100 + r},
                                  Deadline::After(std::chrono::seconds(10)));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    inbox.push_back(std::make_unique<Inbox>());
    Inbox* box = inbox.back().get();
    c.value()->SetNoticeCallback([box](int from, bool gone, const std::string& payload) {
      std::lock_guard<std::mutex> lock(box->mu);
      box->got.emplace_back(from, gone, payload);
      box->cv.notify_all();
    });
    clients.push_back(std::move(c.value()));
  }
  // Connect returns once the store registered the rank: all have joined.
  ASSERT_TRUE(clients[0]->Notify(1, "first").ok());
  ASSERT_TRUE(clients[0]->Notify(1, std::string("se\0cond", 7)).ok());  // bytes, not C strings
  ASSERT_TRUE(clients[2]->Notify(1, "third").ok());
  std::vector<Notice> at1 = inbox[1]->Wait(3);
  ASSERT_EQ(at1.size(), 3u);
  // Per sender, in order; senders interleave as the store reads them.
  std::vector<Notice> from0;
  for (const Notice& n : at1) {
    if (std::get<0>(n) == 0) from0.push_back(n);
  }
  ASSERT_EQ(from0.size(), 2u);
  EXPECT_EQ(from0[0], Notice(0, false, "first"));
  EXPECT_EQ(from0[1], Notice(0, false, std::string("se\0cond", 7)));
  EXPECT_NE(std::find(at1.begin(), at1.end(), Notice(2, false, "third")), at1.end());

  // A rank that said goodbye: the store answers the sender for it. The
  // goodbye and the notice travel on different connections, so a notice may
  // still reach rank 2 first: ask until the store answers (as DeviceIpc does).
  clients[2]->Bye();
  bool answered = false;
  for (int i = 0; i < 100 && !answered; ++i) {
    ASSERT_TRUE(clients[0]->Notify(2, "anyone?").ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(inbox[0]->mu);
    answered = !inbox[0]->got.empty();
  }
  ASSERT_TRUE(answered) << "the store never answered for the rank that left";
  ASSERT_TRUE(clients[0]->Notify(7, "no such rank").ok());
  const Notice unknown(7, true, "no such rank");
  std::vector<Notice> at0 = inbox[0]->WaitFor(unknown);
  EXPECT_NE(std::find(at0.begin(), at0.end(), unknown), at0.end());
  for (const Notice& n : at0) {
    if (n != unknown) {
      EXPECT_EQ(n, Notice(2, true, "anyone?"));
    }
  }
}

}  // namespace
}  // namespace loom::bootstrap
