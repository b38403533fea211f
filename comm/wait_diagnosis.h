// Cross-host wait diagnosis through the rendezvous store: a rank whose wait
// lasts publishes it (whom it waits on, which links stall), and a rank that
// times out reads every rank's report and follows the waits from rank to
// rank, across hosts, to the cause: a link that stopped acknowledging, a
// rank that is stopped or never reported, or a cycle of waits.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "transports/wait_report.h"

namespace loom {

namespace bootstrap {
class StoreClient;
}

// The store key every rank publishes its wait under (each communicator has
// a store of its own, so the key needs no communicator in it).
inline constexpr std::string_view kWaitKey = "wait";

// The store's value for a report, and back (nullopt: empty, or not one).
std::string EncodeWaitReport(const WaitReport& w);
std::optional<WaitReport> DecodeWaitReport(std::string_view bytes);

// How long a wait goes without progress before it is published: a quarter
// of the timeout, so that every rank of a stall (they stall within moments
// of one another) has published long before the first one times out, but
// at least 1 s, which no healthy wait lasts, and at most 30 s, so a long
// timeout does not keep the report back; half the timeout when that is
// shorter than 1 s.
std::chrono::milliseconds WaitReportThreshold(std::chrono::milliseconds timeout);

// How messages name each rank's host: its hostname, with its host identity
// added where one hostname stands for several hosts (containers alike).
std::vector<std::string> HostLabels(const std::vector<std::string>& hostnames,
                                    const std::vector<std::string>& host_ids);

// What a timed-out rank's lookup found.
struct WaitLookup {
  enum class Store { kAnswered, kSilent, kGone };
  Store store = Store::kAnswered;  // kSilent: no answer within the budget; kGone: no store
  std::vector<std::optional<WaitReport>> reports;  // by rank, when answered
};

// The cause of a timeout, as a clause of the error message: the culprit
// named by rank and host ("the network link between rank 1 on host h1 and
// rank 2 on host h2 stopped acknowledging ..."), with the path of waits that
// leads there; or what the reports show when they name none (a cycle).
struct WaitCause {
  std::string text;  // "" when there is nothing to add
  bool culprit = false;
};

// Follows the waits from `me` (its report is `mine`, fresh) through the
// others' reports, breadth first. Culprits, the strongest first: a stalled
// link on the way (a cut: the waits alone form a cycle), a same-host peer
// seen stopped, a rank waited on that reported nothing. Then a stalled link
// elsewhere, then the cycle. A silent store is named through its owner,
// `store_owner`, with `budget` in the words. `hosts[r]`: rank r's host. A
// stopped peer of `me` itself is a culprit without words: the same-host
// chain (Engine::WaitChain) says so already.
WaitCause FollowWaits(int me, const WaitReport& mine, const WaitLookup& lookup,
                      const std::vector<std::string>& hosts, int store_owner,
                      std::chrono::milliseconds budget);

// The communicator's WaitReporter: publishes through its store and reads
// every rank's report back at a timeout, for at most kLookupBudget.
class StoreWaitReporter final : public WaitReporter {
 public:
  // A store on a live management network answers within milliseconds; this
  // keeps a failure within a second of LOOM_TIMEOUT_MS when it does not.
  static constexpr std::chrono::milliseconds kLookupBudget{500};

  // `store` is the communicator's pointer to its store client, read at
  // each call (null once the communicator has dropped it). `hosts[r]`
  // names rank r's host in messages.
  StoreWaitReporter(const std::unique_ptr<bootstrap::StoreClient>* store, int rank,
                    std::vector<std::string> hosts, std::chrono::milliseconds timeout);

  std::chrono::milliseconds threshold() const override { return threshold_; }
  void Publish(const WaitReport& wait) override;
  void Withdraw() override;
  std::string Explain(const WaitReport& mine, bool* culprit) override;

 private:
  const std::unique_ptr<bootstrap::StoreClient>* store_;
  int rank_;
  std::vector<std::string> hosts_;
  std::chrono::milliseconds threshold_;
};

}  // namespace loom
