// The store's rank-to-rank notices (StoreClient::Notify): relayed to the
// target's notice callback with the sender's rank, in order, and answered
// by the store itself ("gone", with the sender's own payload) for a target
// that said goodbye or never joined. And what strangers can cost it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "base/log.h"
#include "comm/bootstrap/store_client.h"
#include "comm/bootstrap/store_server.h"
#include "comm/bootstrap/wire.h"

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

// Ranks 0..n-1 of a job of n, connected in rank order (empty on a failure).
std::vector<std::unique_ptr<StoreClient>> ConnectAll(uint16_t port, uint64_t secret, int n) {
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int r = 0; r < n; ++r) {
    auto c = StoreClient::Connect("127.0.0.1", port, secret,
                                  StoreClient::Identity{r, n, "localhost", 100 + r},
                                  Deadline::After(std::chrono::seconds(10)));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return {};
    clients.push_back(std::move(c.value()));
  }
  return clients;
}

TEST(StoreNotices, RelayedInOrderAndAnsweredForRanksThatLeft) {
  constexpr uint64_t kSecret = 0x5eed;
  constexpr int kRanks = 3;
  auto server = StoreServer::Start("127.0.0.1", 0, kSecret);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // Declared before the clients, so destroyed after them: a client's reader
  // thread may still be running its callback until the client is gone.
  std::vector<std::unique_ptr<Inbox>> inbox;
  std::vector<std::unique_ptr<StoreClient>> clients =
      ConnectAll(server.value()->port(), kSecret, kRanks);
  ASSERT_EQ(clients.size(), size_t{kRanks});
  for (auto& c : clients) {
    inbox.push_back(std::make_unique<Inbox>());
    Inbox* box = inbox.back().get();
    c->SetNoticeCallback([box](int from, bool gone, const std::string& payload) {
      std::lock_guard<std::mutex> lock(box->mu);
      box->got.emplace_back(from, gone, payload);
      box->cv.notify_all();
    });
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

// A plain TCP connection to the store on loopback; -1 when none could be made.
int ConnectRaw(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the peer closed `fd` within `ms` (a read returns 0 or an error).
bool ClosedByPeer(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return false;
  char c;
  return read(fd, &c, 1) <= 0;
}

size_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

bool JoinAsRankZeroOfOne(uint16_t port, uint64_t secret) {
  auto c = StoreClient::Connect("127.0.0.1", port, secret,
                                StoreClient::Identity{0, 1, "localhost", 1},
                                Deadline::After(std::chrono::seconds(10)));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok();
}

// A hello that claims an absurd world size is refused before it costs
// anything, and the job's size stays open for the real ranks; the store
// serves a socketpair handed to it as if accepted.
TEST(StoreStrangers, AHelloClaimingNoRanksIsRefusedAndTheJobStillForms) {
  constexpr uint64_t kSecret = 0x5eed;
  auto server = StoreServer::Start("127.0.0.1", 0, kSecret);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  for (int size : {0, -3}) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    server.value()->ServeConnection(fds[1]);
    Writer w;
    w.U64(kStoreMagic);
    w.U32(kProtocolVersion);
    w.U64(kSecret);
    w.I32(0);
    w.I32(size);
    w.Str("h");
    w.U64(1);
    const std::string hello = w.Frame(MsgType::kHello);
    ASSERT_EQ(write(fds[0], hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
    char reply[512];
    ssize_t got = 0;
    for (ssize_t n; (n = read(fds[0], reply + got, sizeof(reply) - got)) > 0;) got += n;
    const std::string text(reply, static_cast<size_t>(got));
    EXPECT_NE(text.find("claims a world size of " + std::to_string(size)), std::string::npos)
        << text;
    close(fds[0]);
  }
  EXPECT_TRUE(JoinAsRankZeroOfOne(server.value()->port(), kSecret));
}

// A frame header claiming a 64 MiB body before any hello costs the store
// nothing: it closes the connection having read 8 bytes.
TEST(StoreStrangers, AHugeFrameBeforeTheHelloCostsNothing) {
  constexpr uint64_t kSecret = 0x5eed;
  auto server = StoreServer::Start("127.0.0.1", 0, kSecret);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const size_t before = ResidentBytes();
  for (int i = 0; i < 8; ++i) {
    const int fd = ConnectRaw(server.value()->port());
    ASSERT_GE(fd, 0);
    const uint32_t header[2] = {kMaxFrameBytes, static_cast<uint32_t>(MsgType::kHello)};
    ASSERT_EQ(write(fd, header, sizeof(header)), static_cast<ssize_t>(sizeof(header)));
    EXPECT_TRUE(ClosedByPeer(fd, 5000)) << "connection " << i << " left open";
    close(fd);
  }
  EXPECT_LT(ResidentBytes(), before + (16u << 20)) << "resident before " << before;
  EXPECT_TRUE(JoinAsRankZeroOfOne(server.value()->port(), kSecret));
}

// Silent connections beyond kMaxPending push out the oldest, so a real rank
// still gets in however many strangers connect first.
TEST(StoreStrangers, SilentConnectionsAreBoundedAndARankStillJoins) {
  constexpr uint64_t kSecret = 0x5eed;
  auto server = StoreServer::Start("127.0.0.1", 0, kSecret);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<int> fds;
  for (int i = 0; i < 100; ++i) {
    const int fd = ConnectRaw(server.value()->port());
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
  }
  EXPECT_TRUE(ClosedByPeer(fds.front(), 5000)) << "the oldest silent connection stayed";
  EXPECT_TRUE(JoinAsRankZeroOfOne(server.value()->port(), kSecret));
  for (int fd : fds) close(fd);
}

// Running out of descriptors for a while does not stop the acceptor: a
// rank that comes afterwards still joins.
TEST(StoreStrangers, TheStoreAcceptsAgainAfterRunningOutOfDescriptors) {
  constexpr uint64_t kSecret = 0x5eed;
  auto server = StoreServer::Start("127.0.0.1", 0, kSecret);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  // Room for a few more descriptors than are open now: the clients below
  // use them up, and the store's accept fails with EMFILE.
  int open_now = 0;
  for (int fd = 0; fd < 4096; ++fd) open_now += fcntl(fd, F_GETFD) != -1;
  rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(open_now + 16);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  std::vector<int> fds;
  for (int i = 0; i < 64; ++i) {
    const int fd = ConnectRaw(server.value()->port());
    if (fd < 0) break;
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the store meets EMFILE
  for (int fd : fds) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_FALSE(fds.empty());
  EXPECT_TRUE(JoinAsRankZeroOfOne(server.value()->port(), kSecret));
}

// A rank started with another world size fails every rank already in the
// job at once, naming both sizes and who said each, instead of leaving
// them waiting silently until their deadline.
TEST(StoreStartup, AWorldSizeDisagreementFailsEveryRankAtOnce) {
  constexpr uint64_t kSecret = 0x5eed;
  auto server = StoreServer::Start("127.0.0.1", 0, kSecret);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = server.value()->port();
  auto first = StoreClient::Connect("127.0.0.1", port, kSecret,
                                    StoreClient::Identity{0, 2, "host-a", 10},
                                    Deadline::After(std::chrono::seconds(10)));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = StoreClient::Connect("127.0.0.1", port, kSecret,
                                     StoreClient::Identity{1, 3, "host-b", 11},
                                     Deadline::After(std::chrono::seconds(10)));
  ASSERT_FALSE(second.ok());
  const std::string want =
      "rank 1 on host-b (pid 11) was started with a world size of 3, but rank(s) 0 joined with 2";
  EXPECT_NE(second.status().message().find(want), std::string::npos) << second.status().ToString();
  // Rank 1 never joins: waiting for it would end in kTimeout, not this.
  auto gathered = first.value()->AllGather("setup", "", Deadline::After(std::chrono::seconds(20)));
  ASSERT_FALSE(gathered.ok());
  EXPECT_EQ(gathered.status().code(), Code::kRemoteError) << gathered.status().ToString();
  EXPECT_NE(gathered.status().message().find(want), std::string::npos)
      << gathered.status().ToString();
}

// While a rank waits for others, it says which and for how long.
TEST(StoreStartup, AWaitingRankSaysWhomItWaitsFor) {
  constexpr uint64_t kSecret = 0x5eed;
  auto server = StoreServer::Start("127.0.0.1", 0, kSecret);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto alone = StoreClient::Connect("127.0.0.1", server.value()->port(), kSecret,
                                    StoreClient::Identity{0, 2, "localhost", 10},
                                    Deadline::After(std::chrono::seconds(10)));
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  setenv("NCCL_DEBUG", "INFO", 1);
  log::ReloadFromEnv();
  ::testing::internal::CaptureStderr();
  auto gathered = alone.value()->AllGather("setup", "", Deadline::After(std::chrono::milliseconds(1800)));
  const std::string err = ::testing::internal::GetCapturedStderr();
  unsetenv("NCCL_DEBUG");
  log::ReloadFromEnv();
  EXPECT_EQ(gathered.status().code(), Code::kTimeout);
  EXPECT_NE(err.find("rank 0: waited 1 s for every rank to reach 'setup' (deadline in "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("rank(s) 1 never connected to the store"), std::string::npos) << err;
}

// Keyed values (kSet/kGet): each rank's own value under a key, read back
// for every rank at once, replaced, removed, and refused past the limits.
TEST(StoreKeys, EveryRanksValueRoundTripsInRankOrder) {
  constexpr uint64_t kSecret = 0x5eed;
  constexpr int kRanks = 3;
  auto server = StoreServer::Start("127.0.0.1", 0, kSecret);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<std::unique_ptr<StoreClient>> clients =
      ConnectAll(server.value()->port(), kSecret, kRanks);
  ASSERT_EQ(clients.size(), size_t{kRanks});
  const auto soon = [] { return Deadline::After(std::chrono::seconds(10)); };
  auto none = clients[1]->GetAll("wait", soon());
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, std::vector<std::string>(kRanks));

  ASSERT_TRUE(clients[0]->Set("wait", std::string("zero\0", 5)).ok());
  ASSERT_TRUE(clients[2]->Set("wait", "two").ok());
  ASSERT_TRUE(clients[2]->Set("other", "2").ok());
  ASSERT_TRUE(clients[2]->Set("wait", "two again").ok());  // replaces
  // A set and a get from different clients race; the set's sender asks.
  auto got = clients[2]->GetAll("wait", soon());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, (std::vector<std::string>{std::string("zero\0", 5), "", "two again"}));

  ASSERT_TRUE(clients[0]->Set("wait", "").ok());  // removes
  auto after = clients[0]->GetAll("wait", soon());
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, (std::vector<std::string>{"", "", "two again"}));

  // Past the limits a value is dropped, and the rank stays in the job.
  ASSERT_TRUE(clients[1]->Set("wait", std::string(kMaxValueBytes + 1, 'x')).ok());
  for (uint32_t k = 0; k < kMaxKeysPerRank + 2; ++k) {
    ASSERT_TRUE(clients[1]->Set("key" + std::to_string(k), "v").ok());
  }
  auto big = clients[1]->GetAll("wait", soon());
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ((*big)[1], "");
  auto last = clients[1]->GetAll("key" + std::to_string(kMaxKeysPerRank), soon());
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ((*last)[1], "") << "a key beyond kMaxKeysPerRank was kept";
  auto first = clients[1]->GetAll("key0", soon());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)[1], "v");
}

// A one-connection stand-in for a store: answers the hello with `features`
// (none: an older store's empty reply) and then reads on, answering nothing
// (a stopped store).
class MuteStore {
 public:
  explicit MuteStore(std::optional<uint32_t> features) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listen_fd_, 1), 0);
    EXPECT_EQ(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, features] {
      fd_ = accept(listen_fd_, nullptr, nullptr);
      uint32_t header[2];
      if (fd_ < 0 || read(fd_, header, 8) != 8) return;
      std::string body(header[0] - 4, '\0');
      for (size_t got = 0; got < body.size();) {
        const ssize_t n = read(fd_, body.data() + got, body.size() - got);
        if (n <= 0) return;
        got += static_cast<size_t>(n);
      }
      Writer w;
      if (features) w.U32(*features);
      const std::string ok = w.Frame(MsgType::kHelloOk);
      if (write(fd_, ok.data(), ok.size()) != static_cast<ssize_t>(ok.size())) return;
      char sink[4096];
      while (read(fd_, sink, sizeof(sink)) > 0) {
      }
    });
  }
  ~MuteStore() {
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    if (fd_ >= 0) close(fd_);
    close(listen_fd_);
  }
  uint16_t port() const { return port_; }

 private:
  int listen_fd_ = -1;
  std::atomic<int> fd_{-1};  // the accepted connection, set on the thread
  uint16_t port_ = 0;
  std::thread thread_;
};

TEST(StoreKeys, ALookupEndsAtItsDeadlineWhenTheStoreIsSilent) {
  MuteStore mute(kStoreKeys);
  auto c = StoreClient::Connect("127.0.0.1", mute.port(), 1, StoreClient::Identity{1, 2, "h", 1},
                                Deadline::After(std::chrono::seconds(10)));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c.value()->Set("wait", "x").ok());
  const auto start = std::chrono::steady_clock::now();
  auto got = c.value()->GetAll("wait", Deadline::After(std::chrono::milliseconds(200)));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(got.status().code(), Code::kTimeout) << got.status().ToString();
  EXPECT_GE(took, std::chrono::milliseconds(200));
  EXPECT_LT(took, std::chrono::seconds(2));
  c.value()->Bye();
}

TEST(StoreKeys, AnOlderStoreIsNeverSentAKey) {
  MuteStore older(std::nullopt);
  auto c = StoreClient::Connect("127.0.0.1", older.port(), 1, StoreClient::Identity{1, 2, "h", 1},
                                Deadline::After(std::chrono::seconds(10)));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c.value()->Set("wait", "x").ok());  // nothing sent
  auto got = c.value()->GetAll("wait", Deadline::After(std::chrono::seconds(10)));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().code(), Code::kTimeout) << got.status().ToString();
  c.value()->Bye();
}

}  // namespace
}  // namespace loom::bootstrap
