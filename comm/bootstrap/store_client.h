// StoreClient: one rank's connection to the rendezvous store. Implements
// Exchange (all-gather by tag) for connection setup, delivers the store's
// "a peer failed" notices to a callback from its reader thread, and relays
// short notices between ranks (Notify) that reach the target even while its
// communicator is idle.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/exchange.h"

namespace loom::bootstrap {

class StoreClient final : public Exchange {
 public:
  struct Identity {
    int rank = 0;
    int size = 0;
    std::string host;
    int64_t pid = 0;
  };
  // Called on the reader thread with (failed rank, message) when the store
  // reports a peer failure or the store itself goes away (rank -1).
  using FailureCallback = std::function<void(int rank, const std::string& message)>;
  // Called on the reader thread with a notice another rank sent with
  // Notify. gone: the store answered for `from`, which said goodbye or
  // vanished, and `payload` is the one this rank sent it. The callback may
  // call Notify; it must not block for long (it holds up every reply).
  using NoticeCallback = std::function<void(int from, bool gone, const std::string& payload)>;

  // Connects (retrying while the store is not up yet) and registers. Fails
  // with the store's reason (secret mismatch, rank taken...) or a timeout.
  static Result<std::unique_ptr<StoreClient>> Connect(const std::string& host, uint16_t port,
                                                      uint64_t secret, const Identity& me,
                                                      Deadline deadline);
  ~StoreClient() override;

  void SetFailureCallback(FailureCallback cb);
  // Set before any peer may send a notice (before the communicator's
  // connected barrier).
  void SetNoticeCallback(NoticeCallback cb);
  // Sends `payload` to rank `target`'s notice callback, through the store.
  // Returns once sent; delivery is in order per (sender, target).
  Status Notify(int target, std::string_view payload);

  Result<std::vector<std::string>> AllGather(std::string_view tag, std::string mine,
                                             Deadline deadline) override;
  // Keeps `value` in the store as this rank's under `key`, replacing its
  // earlier one (empty: removes it). Returns once sent, without an answer;
  // a store that cannot keep values (an older one) makes it do nothing.
  Status Set(std::string_view key, std::string_view value);
  // Every rank's value under `key`, in rank order ("" where a rank has
  // none). Blocks until the store answers, at most until `deadline`
  // (then a Timeout); Unsupported from a store that keeps no values.
  Result<std::vector<std::string>> GetAll(std::string_view key, Deadline deadline);
  // Tells the others this rank failed (best effort).
  void ReportFailure(const std::string& message);
  // Clean goodbye: the store will not report this rank as vanished.
  void Bye();

 private:
  StoreClient() = default;
  Status SendFrame(const std::string& frame);
  void ReaderLoop();
  // After a timed-out all-gather: asks the store which ranks are missing.
  // Called with mu_ held (through `lock`); returns "" if the store is silent.
  std::string DescribeMissing(const std::string& tag, std::unique_lock<std::mutex>& lock);
  Status LostStatus() const;  // with mu_ held, once lost_: why, as an error

  int fd_ = -1;
  Identity me_;
  std::string store_desc_;
  std::thread reader_;
  std::mutex mu_;  // guards everything below and socket writes
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::string>> gathered_;
  struct QueryReply {
    std::vector<int> joined, reached;
  };
  std::map<std::string, QueryReply> replies_;
  bool lost_ = false;  // the connection to the store is gone (broken_ says why)
  bool keys_ = false;  // the store keeps values (kStoreKeys)
  uint32_t last_get_ = 0;
  // GetAll's answers, by request id; only for requests still awaited (an
  // answer that comes after its deadline is dropped).
  std::map<uint32_t, std::optional<std::vector<std::string>>> got_;
  Status broken_;  // set when the store connection is gone or a peer failed
  FailureCallback on_failure_;
  NoticeCallback on_notice_;
  bool said_bye_ = false;
};

}  // namespace loom::bootstrap
