// Shared-memory setup for one communicator: this rank's mailbox and FIFOs,
// then one ShmConnection per same-host peer.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/exchange.h"
#include "transports/shm/connection.h"
#include "transports/shm/segment.h"

namespace loom {

class ShmContext {
 public:
  // `tag` makes segment names unique per communicator (job secret + comm id).
  // Creates the mailbox; `fifo_bytes` is the capacity of each FIFO.
  static Result<std::unique_ptr<ShmContext>> Create(const std::string& tag, int rank,
                                                    size_t fifo_bytes);

  Doorbell* doorbell() const { return &mailbox()->doorbell; }
  SmallSlot* small_slots() const { return mailbox()->small; }
  // The key this rank's slots are released on for TSan (transports/tsan.h);
  // null in other builds.
  void* small_tsan_key() const {
    const uint64_t keys = mailbox()->tsan_keys;
    return keys == 0 ? nullptr : &reinterpret_cast<TsanKeys*>(keys)->slots;
  }

  // Collective over all ranks of the communicator (every rank calls it, with
  // an empty `peers` if it has no shm peer): creates FIFOs to `peers`, waits
  // for everyone, maps the peers' FIFOs and mailboxes, waits again, and
  // unlinks every name so nothing is left in /dev/shm even after a crash.
  // Returns connections indexed like `peers`.
  Result<std::vector<std::unique_ptr<Connection>>> Connect(Exchange& exchange,
                                                           const std::vector<int>& peers,
                                                           const std::vector<std::string>& hosts,
                                                           const std::vector<int>& pids,
                                                           Deadline deadline);

 private:
  ShmContext() = default;
  ShmMailbox* mailbox() const { return static_cast<ShmMailbox*>(mailbox_.data()); }
  std::string FifoName(int from, int to) const;
  std::string MailboxName(int rank) const;

  std::string tag_;
  int rank_ = 0;
  size_t fifo_bytes_ = 0;
  ShmSegment mailbox_;
};

// What ranks killed during Connect leave behind. Connect unlinks every name
// once all ranks have mapped them, but a rank killed before that (a
// launcher's SIGTERM or SIGKILL while it waits in setup) leaves its mailbox
// and FIFOs in /dev/shm until reboot. Removes every name of each
// communicator whose mailbox was created by one of `exited` (processes known
// to have ended, such as a launcher's reaped ranks) and whose creator no
// longer runs. Returns how many names it removed.
size_t RemoveSegmentsLeftBy(const std::vector<pid_t>& exited);
// The same for every communicator whose mailbox's creator no longer runs
// in this process's PID namespace, whoever started it: ShmContext::Create
// calls it, so what a rank killed with its launcher left is gone once any
// later communicator starts on the host. A mailbox from another PID
// namespace (containers sharing /dev/shm) is never judged by its pid, and
// one written less than 10 s ago is left for later.
size_t RemoveSegmentsOfDeadCreators();

}  // namespace loom
