// Bootstrap wire format: frames of [u32 length][u32 type][payload], payload
// encoded with Writer/Reader (little-endian integers, length-prefixed strings).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace loom::bootstrap {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr uint64_t kStoreMagic = 0x6c6f6f6d73746f72ull;  // "loomstor"
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;
// Before the job secret is checked the store reads nothing larger: a hello
// is some 40 bytes and a host name.
inline constexpr uint32_t kMaxHelloBytes = 4096;

enum class MsgType : uint32_t {
  kHello = 1,        // client -> server: magic, version, secret, rank, size, host, pid
  kHelloOk = 2,      // server -> client
  kError = 3,        // server -> client: message; the server closes after it
  kAllGather = 4,    // client -> server: tag, value
  kGathered = 5,     // server -> client: tag, values[size]
  kPeerFailed = 6,   // server -> client: rank, message (a rank vanished or aborted)
  kBye = 7,          // client -> server: clean shutdown of this rank
  kAbort = 8,        // client -> server: this rank failed with message; tell the others
  kQuery = 9,        // client -> server: tag; who joined, who reached the tag
  kQueryReply = 10,  // server -> client: tag, joined ranks, ranks that reached the tag
  kNotify = 11,      // client -> server: target rank, payload; relayed to the target
  kNotified = 12,    // server -> client: from rank, gone (u32), payload. gone = 1: the
                     // server answers for a target that said goodbye or vanished, and
                     // hands the sender its own payload back
  kSet = 13,         // client -> server: key, value; this rank's value under key (empty: none)
  kGet = 14,         // client -> server: request id, key
  kGot = 15,         // server -> client: request id, count, then (rank i32, value) for
                     // each rank holding a value under key, in rank order
};

// What a store can do beyond protocol version 1's first twelve messages,
// as bits of the u32 its hello reply carries (an older store's reply is
// empty: none), so that a newer client never sends what a store would
// refuse by closing the connection.
inline constexpr uint32_t kStoreKeys = 1;  // kSet, kGet, kGot
// What a rank may keep in the store with kSet: the store's memory stays in
// proportion to the ranks, whatever they send.
inline constexpr uint32_t kMaxKeyBytes = 256;
inline constexpr uint32_t kMaxValueBytes = 16 << 10;
inline constexpr uint32_t kMaxKeysPerRank = 4;

class Writer {
 public:
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void I32(int32_t v) { Raw(&v, 4); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    Raw(s.data(), s.size());
  }
  // The payload so far (a notice's body, say).
  const std::string& payload() const { return buf_; }
  // Frame = [len][type][payload]; len counts type + payload.
  std::string Frame(MsgType type) const {
    std::string f;
    uint32_t len = static_cast<uint32_t>(4 + buf_.size());
    uint32_t t = static_cast<uint32_t>(type);
    f.append(reinterpret_cast<const char*>(&len), 4);
    f.append(reinterpret_cast<const char*>(&t), 4);
    f += buf_;
    return f;
  }

 private:
  void Raw(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string buf_;
};

// Reads a payload; any overrun sets failed() and yields zeros/empties.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  uint32_t U32() { return Fixed<uint32_t>(); }
  uint64_t U64() { return Fixed<uint64_t>(); }
  int32_t I32() { return Fixed<int32_t>(); }
  std::string Str() {
    uint32_t n = U32();
    if (failed_ || n > data_.size() - pos_) {
      failed_ = true;
      return {};
    }
    std::string s(data_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool failed() const { return failed_; }

 private:
  template <typename T>
  T Fixed() {
    T v{};
    if (failed_ || sizeof(T) > data_.size() - pos_) {
      failed_ = true;
      return v;
    }
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view data_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace loom::bootstrap
