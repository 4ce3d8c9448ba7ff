#include "tls_scribe.hpp"

#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "basp_frames.hpp"
#include "tune/net/tls.hpp"

namespace tune {

namespace {

using caf::io::network::rw_state;
using native_socket = caf::io::network::native_socket;

constexpr uint32_t max_frame = 64u << 20;  // as the head's gate (gate_options::max_frame)
constexpr size_t max_record_batch = 256 * 1024;  // plaintext encrypted per write_some

// What one connection's policy keeps between calls (CAF's stream owns the policy by
// value; the scribe reaches the same state for the hello and the forced writes).
struct tls_state {
  std::unique_ptr<tls::session> session;
  std::string plain;      // decrypted, not yet handed to CAF
  size_t plain_off = 0;
  std::string out;        // ciphertext not yet written to the socket
  size_t owed = 0;        // plaintext bytes encrypted (in `out`) but not yet reported written
  frame_checker frames{basp::server_handshake};
  tls_failure_sink on_failure;
  bool failed = false;
  std::string peer;
  caf::io::network::stream* stream = nullptr;
  caf::io::network::stream_manager* manager = nullptr;
  char buf[64 * 1024];

  void fail(std::string why, bool hopeless) {
    if (failed) return;
    failed = true;
    if (on_failure) on_failure(why, hopeless);
  }
  // Writes what it can of `out`; false when the socket failed.
  bool flush(native_socket fd) {
    while (!out.empty()) {
      ssize_t k = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (k < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        fail(std::string{"the connection to the head failed: "} + std::strerror(errno), false);
        return false;
      }
      out.erase(0, static_cast<size_t>(k));
    }
    return true;
  }
};

struct tls_policy {
  std::shared_ptr<tls_state> st;

  explicit tls_policy(std::shared_ptr<tls_state> s) : st(std::move(s)) {}

  rw_state read_some(size_t& result, native_socket fd, void* buf, size_t len) {
    result = 0;
    auto& s = *st;
    while (s.plain_off == s.plain.size()) {
      s.plain.clear();
      s.plain_off = 0;
      ssize_t k = ::recv(fd, s.buf, sizeof s.buf, 0);
      if (k == 0) {
        if (s.frames.waiting_first())
          s.fail(s.session->established()
                     ? "the head closed the TLS connection before its handshake: it refused this process's "
                       "certificate (give one the cluster's CA signed, valid now)"
                     : "the head closed the connection during the TLS handshake: it refused this process's "
                       "certificate (give one the cluster's CA signed, valid now), or it does not use TLS",
                 true);
        return rw_state::failure;
      }
      if (k < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return rw_state::success;
        s.fail(std::string{"the connection to the head failed: "} + std::strerror(errno), false);
        return rw_state::failure;
      }
      std::string why;
      if (!s.session->receive(s.buf, static_cast<size_t>(k), s.plain, why)) {
        if (!s.session->established() && why.find("wrong version number") != std::string::npos)
          why = "the head does not use TLS (its cluster was started without --tls-cert): connect without "
                "--tls-cert, --tls-key and --tls-ca (" + why + ")";
        else if (why.find("alert") != std::string::npos)
          why += " (the other side refused this process's certificate: give one the cluster's CA signed, valid now)";
        s.session->take_output(s.out);  // our alert, as far as the socket takes it
        s.flush(fd);
        s.fail("TLS: " + why, s.frames.waiting_first());
        return rw_state::failure;
      }
      s.session->take_output(s.out);  // handshake messages, session tickets' answers
      if (!s.out.empty()) {
        if (!s.flush(fd)) return rw_state::failure;
        if (!s.out.empty() && s.stream && s.manager)
          s.stream->force_empty_write(caf::io::network::stream::manager_ptr{s.manager});
      }
      if (!s.plain.empty() && !s.frames.check(s.plain.data(), s.plain.size(), max_frame, why)) {
        s.fail("the head sent " + why, false);
        return rw_state::failure;
      }
    }
    size_t n = std::min(len, s.plain.size() - s.plain_off);
    std::memcpy(buf, s.plain.data() + s.plain_off, n);
    s.plain_off += n;
    result = n;
    return rw_state::success;
  }

  rw_state write_some(size_t& result, native_socket fd, const void* buf, size_t len) {
    result = 0;
    auto& s = *st;
    if (!s.flush(fd)) return rw_state::failure;
    if (!s.out.empty()) return rw_state::success;  // the socket is full: later
    if (s.owed > 0) {  // encrypted last time and now on its way
      result = std::min(s.owed, len);
      s.owed -= result;
      return rw_state::success;
    }
    if (len == 0) return rw_state::success;
    size_t n = std::min(len, max_record_batch);
    std::string why;
    if (!s.session->send(std::string_view{static_cast<const char*>(buf), n}, why)) {
      s.fail("TLS: " + why, false);
      return rw_state::failure;
    }
    s.session->take_output(s.out);
    if (!s.flush(fd)) return rw_state::failure;
    if (s.out.empty() || n < len) {
      result = n;
    } else {
      // All of CAF's buffer is encrypted but not all of it is written: one byte is
      // reported later, so the stream keeps asking to write until `out` is out.
      result = n - 1;
      s.owed = 1;
    }
    return rw_state::success;
  }

  bool must_read_more(native_socket, size_t) { return st->plain_off < st->plain.size(); }

  static bool try_accept(native_socket&, native_socket) { return false; }
};

// As CAF's scribe_impl, with the TLS stream; named after the head it dialed.
class tls_scribe : public caf::io::scribe {
 public:
  tls_scribe(caf::io::network::default_multiplexer& mx, native_socket fd, std::shared_ptr<tls_state> st)
      : scribe(caf::io::network::conn_hdl_from_socket(fd)), st_(st), stream_(mx, fd, st) {
    st_->stream = &stream_;
    st_->manager = this;
  }

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_) launch();
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override { return st_->peer; }
  uint16_t port() const override { return 0; }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  void launch() {
    launched_ = true;
    stream_.start(this);
    if (!st_->out.empty()) stream_.force_empty_write(this);  // the rest of the hello
  }

  std::shared_ptr<tls_state> st_;
  bool launched_ = false;
  caf::io::network::stream_impl<tls_policy> stream_;
};

}  // namespace

caf::io::scribe_ptr make_tls_scribe(caf::actor_system& sys, int fd, const std::string& peer, const tls::context& ctx,
                                    tls_failure_sink on_failure, std::string& why) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto st = std::make_shared<tls_state>();
  st->session = std::make_unique<tls::session>(ctx);
  st->on_failure = std::move(on_failure);
  st->peer = peer;
  if (!st->session->start(why)) {
    why = "TLS: " + why;
    ::close(fd);
    return nullptr;
  }
  st->session->take_output(st->out);
  if (!st->flush(fd)) {
    why = "cannot send the TLS hello to " + peer;
    ::close(fd);
    return nullptr;
  }
  auto& mx = dynamic_cast<caf::io::network::default_multiplexer&>(sys.middleman().backend());
  return caf::make_counted<tls_scribe>(mx, fd, std::move(st));
}

}  // namespace tune
