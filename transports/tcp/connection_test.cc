// TcpConnection on its own, over socket pairs in one thread: how a message
// is striped over a direction's sockets, which socket each lane and
// direction uses, the bytes on the wire, and the send buffer of a
// connection that stays on the host.
#include "transports/tcp/connection.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace loom {
namespace {

TEST(TcpTransport, StripingCoversEveryByteOnce) {
  const size_t U = TcpConnection::kStripeBytes;
  for (int n : {1, 2, 3, 4, 7}) {
    for (size_t bytes :
         {size_t{0}, size_t{1}, U - 1, U, U + 1, 3 * U, 5 * U + 17, 11 * U + U / 2}) {
      std::vector<int> hits(bytes, 0);
      size_t total = 0;
      for (int s = 0; s < n; ++s) {
        size_t share = TcpConnection::Share(bytes, s, n);
        total += share;
        size_t last = 0;
        for (size_t i = 0; i < share; ++i) {
          size_t g = TcpConnection::MessageOffset(i, s, n);
          ASSERT_LT(g, bytes);
          if (i > 0) {
            ASSERT_GT(g, last);  // each socket's share is in message order
          }
          last = g;
          ++hits[g];
        }
      }
      EXPECT_EQ(total, bytes);
      for (size_t g = 0; g < bytes; ++g) ASSERT_EQ(hits[g], 1) << "n=" << n << " byte " << g;
    }
  }
}

// With two sockets, the lower rank's messages travel on the first and the
// higher rank's on the second (one socket per direction, like NCCL's one-way
// connections); each side still receives what the other sent.
TEST(TcpTransport, EachDirectionHasItsOwnSocket) {
  int pair0[2], pair1[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair0), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair1), 0);
  TcpConnection lower(1, true, "h1", "NET/Socket/lo", {pair0[0], pair1[0]});
  TcpConnection higher(0, false, "h0", "NET/Socket/lo", {pair0[1], pair1[1]});
  auto queued = [](int fd) {
    int n = -1;
    EXPECT_EQ(ioctl(fd, FIONREAD, &n), 0);
    return n;
  };
  auto drive = [](TcpConnection& c) {
    for (int i = 0; i < 1000 && !c.idle(); ++i) {
      auto r = c.Progress();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    }
    EXPECT_TRUE(c.idle());
  };
  for (const bool from_lower : {true, false}) {
    SCOPED_TRACE(from_lower ? "lower to higher" : "higher to lower");
    TcpConnection& sender = from_lower ? lower : higher;
    TcpConnection& receiver = from_lower ? higher : lower;
    std::vector<char> src(3000), dst(3000, 0);
    for (size_t i = 0; i < src.size(); ++i) {
      src[i] = static_cast<char>(i * 7 + (from_lower ? 1 : 2));
    }
    Transfer send, recv;
    send.dir = Transfer::Dir::kSend;
    send.src = src.data();
    send.bytes = src.size();
    recv.dir = Transfer::Dir::kRecv;
    recv.dst = dst.data();
    recv.bytes = dst.size();
    sender.PostSend(&send);
    drive(sender);
    // Everything it sent waits on its own direction's socket, none on the other.
    EXPECT_GT(queued(from_lower ? pair0[1] : pair1[0]), 0);
    EXPECT_EQ(queued(from_lower ? pair1[1] : pair0[0]), 0);
    receiver.PostRecv(&recv);
    drive(receiver);
    EXPECT_EQ(dst, src);
  }
}

// Messages of up to kSmallLaneBytes travel both ways on the small lane's
// socket, larger ones on their direction's bulk socket; a peer that is
// ahead (its small message waiting while a bulk receive is in progress) is
// fine, and a message on the other lane than its receive is a named
// mismatch, not a hang.
class TcpLanes : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int* pair : {bulk0, bulk1, small}) ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    lower = std::make_unique<TcpConnection>(1, true, "h1", "NET/Socket/lo",
                                            std::vector<int>{bulk0[0], bulk1[0]}, small[0]);
    higher = std::make_unique<TcpConnection>(0, false, "h0", "NET/Socket/lo",
                                             std::vector<int>{bulk0[1], bulk1[1]}, small[1]);
  }
  static int Queued(int fd) {
    int n = -1;
    EXPECT_EQ(ioctl(fd, FIONREAD, &n), 0);
    return n;
  }
  static Transfer Send(const std::vector<char>& b) {
    Transfer t;
    t.dir = Transfer::Dir::kSend;
    t.src = b.data();
    t.bytes = b.size();
    return t;
  }
  static Transfer Recv(std::vector<char>& b) {
    Transfer t;
    t.dir = Transfer::Dir::kRecv;
    t.dst = b.data();
    t.bytes = b.size();
    return t;
  }
  // Progresses both ends until both are idle; the first error, if any.
  Status DriveBoth() {
    for (int i = 0; i < 100000 && !(lower->idle() && higher->idle()); ++i) {
      for (TcpConnection* c : {lower.get(), higher.get()}) {
        auto r = c->Progress();
        if (!r.ok()) return r.status();
      }
    }
    return lower->idle() && higher->idle() ? Status::Ok() : InternalError("not idle");
  }
  int bulk0[2], bulk1[2], small[2];  // closed by the connections
  std::unique_ptr<TcpConnection> lower, higher;
};

TEST_F(TcpLanes, SmallMessagesShareOneSocketBothWays) {
  const size_t small_bytes = TcpConnection::kSmallLaneBytes;
  std::vector<char> a(small_bytes, 'a'), b(small_bytes, 'b');
  std::vector<char> a_in(small_bytes), b_in(small_bytes);
  Transfer sa = Send(a), sb = Send(b);
  lower->PostSend(&sa);
  higher->PostSend(&sb);
  for (int i = 0; i < 100 && !(lower->idle() && higher->idle()); ++i) {
    ASSERT_TRUE(lower->Progress().ok());
    ASSERT_TRUE(higher->Progress().ok());
  }
  // Both directions' messages wait on the one small-lane socket pair.
  EXPECT_GT(Queued(small[0]), 0);
  EXPECT_GT(Queued(small[1]), 0);
  for (int fd : {bulk0[0], bulk0[1], bulk1[0], bulk1[1]}) EXPECT_EQ(Queued(fd), 0);
  Transfer ra = Recv(a_in), rb = Recv(b_in);
  higher->PostRecv(&ra);
  lower->PostRecv(&rb);
  ASSERT_TRUE(DriveBoth().ok());
  EXPECT_EQ(a_in, a);
  EXPECT_EQ(b_in, b);
}

TEST_F(TcpLanes, ALargerMessageTakesItsDirectionsBulkSocket) {
  std::vector<char> big(TcpConnection::kSmallLaneBytes + 1, 'x');
  Transfer t = Send(big);
  lower->PostSend(&t);
  for (int i = 0; i < 100 && !lower->idle(); ++i) ASSERT_TRUE(lower->Progress().ok());
  EXPECT_GT(Queued(bulk0[1]), 0);
  EXPECT_EQ(Queued(small[1]), 0);
  EXPECT_EQ(Queued(bulk1[1]), 0);
}

// On the wire a bulk message's payload follows a header padded to a cache
// line, so it keeps its buffer's alignment in the kernel's socket pages (a
// 16-byte header makes the send-side copy misaligned and slow); a small
// message's follows the bare
// header.
TEST_F(TcpLanes, TheBulkHeaderFillsACacheLineTheSmallOneIsBare) {
  for (const bool bulk : {true, false}) {
    SCOPED_TRACE(bulk ? "bulk" : "small");
    SetUp();
    std::vector<char> msg(bulk ? TcpConnection::kSmallLaneBytes + 64 : 100);
    for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<char>(i * 5 + 1);
    Transfer t = Send(msg);
    lower->PostSend(&t);
    for (int i = 0; i < 1000 && !lower->idle(); ++i) ASSERT_TRUE(lower->Progress().ok());
    ASSERT_TRUE(lower->idle());
    const size_t header = bulk ? TcpConnection::kBulkHeaderBytes : sizeof(MessageHeader);
    std::vector<char> wire(header + msg.size());
    const int fd = bulk ? bulk0[1] : small[1];
    size_t got = 0;
    while (got < wire.size()) {
      const ssize_t r = ::read(fd, wire.data() + got, wire.size() - got);
      ASSERT_GT(r, 0);
      got += static_cast<size_t>(r);
    }
    EXPECT_EQ(Queued(fd), 0);
    MessageHeader h;
    std::memcpy(&h, wire.data(), sizeof(h));
    EXPECT_EQ(h.bytes, msg.size());
    EXPECT_EQ(h.magic, kHeaderMagic);
    EXPECT_TRUE(std::equal(msg.begin(), msg.end(), wire.begin() + static_cast<ptrdiff_t>(header)));
  }
}

TEST_F(TcpLanes, APeerAheadOnTheSmallLaneIsNoMismatch) {
  // The sender's second message (small) overtakes its first (bulk, larger
  // than the socket buffers) while the receiver has posted only the first.
  std::vector<char> big(4 << 20), tiny(8, 't'), big_in(big.size()), tiny_in(8);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13);
  Transfer s1 = Send(big), s2 = Send(tiny), r1 = Recv(big_in), r2 = Recv(tiny_in);
  lower->PostSend(&s1);
  lower->PostSend(&s2);
  higher->PostRecv(&r1);
  for (int i = 0; i < 100000 && !higher->idle(); ++i) {
    ASSERT_TRUE(lower->Progress().ok());
    auto r = higher->Progress();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  ASSERT_TRUE(higher->idle());
  higher->PostRecv(&r2);
  ASSERT_TRUE(DriveBoth().ok());
  EXPECT_EQ(big_in, big);
  EXPECT_EQ(tiny_in, tiny);
}

// The posted transfers of a direction live in a ring of reused entries:
// waves of different depths (some completing while others stay queued, so
// the ring wraps and then grows with entries in flight) still deliver each
// message whole, in order, into its own buffer.
TEST_F(TcpLanes, ManyTransfersInFlightArriveInOrder) {
  const size_t bulk = TcpConnection::kSmallLaneBytes + 100;
  int next = 0;
  for (const int depth : {1, 3, 2, 7, 5, 17, 1, 9}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    std::vector<std::vector<char>> out(depth), in(depth);
    std::vector<Transfer> sends(depth), recvs(depth);
    for (int k = 0; k < depth; ++k, ++next) {
      // Bulk and small messages alternate, each with its own contents.
      out[k].resize(k % 2 == 0 ? bulk + static_cast<size_t>(next) : 10 + static_cast<size_t>(next));
      for (size_t i = 0; i < out[k].size(); ++i) out[k][i] = static_cast<char>(i * 3 + next);
      in[k].assign(out[k].size(), 0);
      sends[k] = Send(out[k]);
      recvs[k] = Recv(in[k]);
    }
    // The receives are posted after some of the sends have gone out, in
    // two halves, so one end's queue is partly drained when the rest arrive.
    for (int k = 0; k < depth; ++k) lower->PostSend(&sends[k]);
    for (int k = 0; k < depth / 2; ++k) higher->PostRecv(&recvs[k]);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(lower->Progress().ok());
      ASSERT_TRUE(higher->Progress().ok());
    }
    for (int k = depth / 2; k < depth; ++k) higher->PostRecv(&recvs[k]);
    ASSERT_TRUE(DriveBoth().ok());
    for (int k = 0; k < depth; ++k) {
      EXPECT_EQ(in[k], out[k]) << "message " << k;
      EXPECT_EQ(recvs[k].done, out[k].size());
    }
  }
}

TEST_F(TcpLanes, AMessageOnTheOtherLaneIsANamedMismatch) {
  for (const bool sender_small : {true, false}) {
    SCOPED_TRACE(sender_small ? "small sent, large expected" : "large sent, small expected");
    SetUp();
    std::vector<char> small_buf(100, 's'), large_buf(100 << 10, 'l');
    Transfer s = Send(sender_small ? small_buf : large_buf);
    Transfer r = Recv(sender_small ? large_buf : small_buf);
    lower->PostSend(&s);
    higher->PostRecv(&r);
    Status st;
    for (int i = 0; i < 100000 && st.ok(); ++i) {
      (void)lower->Progress();
      auto p = higher->Progress();
      if (!p.ok()) st = p.status();
    }
    EXPECT_EQ(st.code(), Code::kInvalidUsage) << st.ToString();
    EXPECT_NE(st.message().find("mismatched operations"), std::string::npos) << st.message();
  }
}

// A socket listening on 127.0.0.1 and a connection to it.
struct LoopbackSockets {
  int listener = -1, client = -1, server = -1;
};
void ConnectOnLoopback(LoopbackSockets* out) {
  out->listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(out->listener, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(out->listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(out->listener, 1), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(out->listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  out->client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(out->client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  out->server = accept(out->listener, nullptr, nullptr);
  ASSERT_GE(out->server, 0);
}

// A connection on loopback is recognised as staying on the host; a socket
// that is not TCP/IP, or not connected, is not.
TEST(TcpTransport, LoopbackStaysOnHost) {
  LoopbackSockets socks;
  ASSERT_NO_FATAL_FAILURE(ConnectOnLoopback(&socks));
  const int lfd = socks.listener, c = socks.client, s = socks.server;
  EXPECT_TRUE(TcpConnection::StaysOnHost(c));
  EXPECT_TRUE(TcpConnection::StaysOnHost(s));
  EXPECT_FALSE(TcpConnection::StaysOnHost(lfd));  // listening: no peer
  int unix_pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, unix_pair), 0);
  EXPECT_FALSE(TcpConnection::StaysOnHost(unix_pair[0]));
  // The connection shrinks the send buffer of such a socket (the kernel
  // doubles the request), and leaves it at most that size; it fixes the
  // receive buffer where the kernel lets it (as root, or under a
  // net.core.rmem_max that is large enough).
  int sndbuf = 0, rcvbuf = 0;
  socklen_t sl = sizeof(sndbuf), rl = sizeof(rcvbuf);
  {
    TcpConnection conn(1, true, "here", "NET/Socket/lo", {c});
    ASSERT_EQ(getsockopt(c, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl), 0);
    EXPECT_LE(sndbuf, 2 * TcpConnection::kLocalSendBufferBytes);
    EXPECT_GT(sndbuf, 64 << 10);
    ASSERT_EQ(getsockopt(c, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &rl), 0);
    long rmem_max = 0;
    if (FILE* f = std::fopen("/proc/sys/net/core/rmem_max", "r")) {
      if (std::fscanf(f, "%ld", &rmem_max) != 1) rmem_max = 0;
      std::fclose(f);
    }
    const int probe = socket(AF_INET, SOCK_STREAM, 0);
    const int want = TcpConnection::kLocalReceiveBufferBytes;
    const bool forced = setsockopt(probe, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof(want)) == 0;
    close(probe);
    if (forced || rmem_max >= TcpConnection::kLocalReceiveBufferBytes) {
      EXPECT_EQ(rcvbuf, 2 * TcpConnection::kLocalReceiveBufferBytes);
    } else {
      EXPECT_LT(rcvbuf, 2 * TcpConnection::kLocalReceiveBufferBytes);  // left to autotuning
    }
  }  // closes c
  for (int fd : {s, lfd, unix_pair[0], unix_pair[1]}) close(fd);
}

// On such a socket a message share of kLargeSendMessageBytes or more is sent
// with the large send buffer, and a smaller one after it with the small
// buffer again; every byte arrives either way.
TEST(TcpTransport, LoopbackSendBufferFollowsTheMessageSize) {
  LoopbackSockets socks;
  ASSERT_NO_FATAL_FAILURE(ConnectOnLoopback(&socks));
  close(socks.listener);
  const int c = socks.client, s = socks.server;
  // The buffer the kernel reports for a request of `bytes`: doubled, and
  // without CAP_NET_ADMIN cut to net.core.wmem_max first.
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  const int large = TcpConnection::kLocalLargeSendBufferBytes;
  const bool forced = setsockopt(probe, SOL_SOCKET, SO_SNDBUFFORCE, &large, sizeof(large)) == 0;
  close(probe);
  long wmem_max = 0;
  if (FILE* f = std::fopen("/proc/sys/net/core/wmem_max", "r")) {
    if (std::fscanf(f, "%ld", &wmem_max) != 1) wmem_max = 0;
    std::fclose(f);
  }
  auto expected = [&](int bytes) {
    return 2 * (forced ? bytes : static_cast<int>(std::min<long>(bytes, wmem_max)));
  };
  auto sndbuf = [](int fd) {
    int v = 0;
    socklen_t l = sizeof(v);
    EXPECT_EQ(getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &l), 0);
    return v;
  };
  TcpConnection sender(1, true, "here", "NET/Socket/lo", {c});
  TcpConnection receiver(0, false, "here", "NET/Socket/lo", {s});
  EXPECT_EQ(sndbuf(c), expected(TcpConnection::kLocalSendBufferBytes));
  for (const size_t bytes : {TcpConnection::kLargeSendMessageBytes, size_t{64} << 10}) {
    SCOPED_TRACE(bytes);
    std::vector<char> src(bytes), dst(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<char>(i * 13 + bytes);
    Transfer send, recv;
    send.dir = Transfer::Dir::kSend;
    send.src = src.data();
    send.bytes = bytes;
    recv.dir = Transfer::Dir::kRecv;
    recv.dst = dst.data();
    recv.bytes = bytes;
    sender.PostSend(&send);
    receiver.PostRecv(&recv);
    for (int i = 0; i < 1000000 && !(sender.idle() && receiver.idle()); ++i) {
      for (TcpConnection* conn : {&sender, &receiver}) {
        auto r = conn->Progress();
        ASSERT_TRUE(r.ok()) << r.status().ToString();
      }
    }
    ASSERT_TRUE(sender.idle() && receiver.idle());
    EXPECT_EQ(dst, src);
    EXPECT_EQ(sndbuf(c), expected(TcpConnection::LocalSendBufferFor(bytes)));
  }
  EXPECT_NE(TcpConnection::LocalSendBufferFor(TcpConnection::kLargeSendMessageBytes),
            TcpConnection::LocalSendBufferFor(TcpConnection::kLargeSendMessageBytes - 1));
}

// A peer that stops reading is no stalled link: its kernel acknowledges
// what arrives and then closes its window, and a send that waits for room
// past kStallSilenceMs is not reported. (A link that stops acknowledging
// needs a cut network: tests/netns/chaos_test.sh.) Nor is a socket that is
// not TCP.
TEST(TcpTransport, APeerThatDoesNotReadIsNoStalledLink) {
  LoopbackSockets socks;
  ASSERT_NO_FATAL_FAILURE(ConnectOnLoopback(&socks));
  close(socks.listener);
  TcpConnection sender(1, true, "here", "NET/Socket/lo", {socks.client});
  std::vector<char> src(32 << 20, 'x');
  Transfer send;
  send.dir = Transfer::Dir::kSend;
  send.src = src.data();
  send.bytes = src.size();
  sender.PostSend(&send);
  for (int i = 0; i < 1000; ++i) {
    auto r = sender.Progress();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  ASSERT_FALSE(sender.idle()) << "the send fit in the socket buffers";
  std::this_thread::sleep_for(std::chrono::milliseconds(TcpConnection::kStallSilenceMs + 300));
  EXPECT_FALSE(sender.SendStall().has_value());
  close(socks.server);

  int unix_pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, unix_pair), 0);
  TcpConnection over_unix(1, true, "here", "NET/Socket/lo", {unix_pair[0]});
  EXPECT_FALSE(over_unix.SendStall().has_value());
  close(unix_pair[1]);
}

}  // namespace
}  // namespace loom
