#include "tune/trial/spawn_protocol.hpp"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

namespace tune::spawn_protocol {

std::array<int, channel_count> in_order(const channels& c) { return {c.out, c.err, c.report, c.fail, c.news}; }

channels from_order(const std::array<int, channel_count>& fds) { return {fds[0], fds[1], fds[2], fds[3], fds[4]}; }

word_bytes encode_word(int32_t v) {
  word_bytes b;
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

int32_t decode_word(const word_bytes& b) {
  int32_t v = 0;
  std::memcpy(&v, b.data(), sizeof v);
  return v;
}

answer_bytes encode_answer(spawn_answer a) {
  answer_bytes b;
  auto keeper = encode_word(a.keeper), error = encode_word(a.error);
  std::copy(keeper.begin(), keeper.end(), b.begin());
  std::copy(error.begin(), error.end(), b.begin() + 4);
  return b;
}

spawn_answer decode_answer(const answer_bytes& b) {
  word_bytes keeper, error;
  std::copy(b.begin(), b.begin() + 4, keeper.begin());
  std::copy(b.begin() + 4, b.end(), error.begin());
  return {decode_word(keeper), decode_word(error)};
}

namespace {

// A field: its length (a word), then its bytes.
void put(std::string& out, std::string_view s) {
  auto n = encode_word(static_cast<int32_t>(static_cast<uint32_t>(s.size())));
  out.append(n.data(), n.size());
  out += s;
}

// Reads the body's fields in order; `ok` turns false at the first malformed one and
// stays so (every later read then yields nothing).
class field_reader {
 public:
  explicit field_reader(std::string_view body) : in_(body) {}
  bool ok() const { return ok_; }
  bool at_end() const { return ok_ && at_ == in_.size(); }

  std::string text() {
    word_bytes b;
    if (!ok_ || in_.size() - at_ < b.size()) return fail();
    std::copy_n(in_.begin() + static_cast<std::ptrdiff_t>(at_), b.size(), b.begin());
    at_ += b.size();
    auto n = static_cast<uint32_t>(decode_word(b));
    if (in_.size() - at_ < n) return fail();
    std::string s{in_.substr(at_, n)};
    at_ += n;
    return s;
  }
  // A count of fields that follow: at most one per 4 bytes left.
  size_t count() {
    uint64_t n = value<uint64_t>();
    if (n > (in_.size() - at_) / 4) fail();
    return ok_ ? static_cast<size_t>(n) : 0;
  }
  // A number: ASCII digits, after a '-' for a signed T; within T.
  template <class T>
  T value() {
    std::string s = text();
    T v{};
    const char* end = s.data() + s.size();
    auto [stop, ec] = std::from_chars(s.data(), end, v);
    if (s.empty() || ec != std::errc{} || stop != end) fail();
    return ok_ ? v : T{};
  }

 private:
  std::string fail() {
    ok_ = false;
    return {};
  }
  std::string_view in_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace

std::string encode_request(const process_spec& spec) {
  std::string body;
  put(body, std::to_string(spec.argv.size()));
  for (auto& a : spec.argv) put(body, a);
  put(body, std::to_string(spec.env.size()));
  for (auto& [k, v] : spec.env) put(body, k), put(body, v);
  put(body, spec.cwd);
  put(body, spec.contain.into);
  put(body, std::to_string(spec.contain.join.size()));
  for (auto& j : spec.contain.join) put(body, j);
  put(body, spec.contain.kill);
  put(body, spec.contain.subreaper ? "1" : "0");
  put(body, std::to_string(spec.run_as.uid));
  put(body, std::to_string(spec.run_as.gid));
  put(body, std::to_string(spec.run_as.groups.size()));
  for (auto g : spec.run_as.groups) put(body, std::to_string(g));
  if (body.size() > std::numeric_limits<uint32_t>::max()) return {};
  std::string frame;
  put(frame, body);
  return frame;
}

std::optional<process_spec> decode_request(std::string_view body) {
  field_reader in{body};
  process_spec spec;
  spec.argv.resize(in.count());
  for (auto& a : spec.argv) a = in.text();
  for (size_t i = 0, n = in.count(); i < n && in.ok(); ++i) {
    auto k = in.text();
    spec.env[k] = in.text();
  }
  spec.cwd = in.text();
  spec.contain.into = in.text();
  spec.contain.join.resize(in.count());
  for (auto& j : spec.contain.join) j = in.text();
  spec.contain.kill = in.text();
  spec.contain.subreaper = in.text() == "1";
  spec.run_as.uid = in.value<int64_t>();
  spec.run_as.gid = in.value<int64_t>();
  spec.run_as.groups.resize(in.count());
  for (auto& g : spec.run_as.groups) g = in.value<uint32_t>();
  if (!in.at_end() || spec.argv.empty()) return std::nullopt;
  return spec;
}

bool read_full(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool write_word(int fd, int32_t v) {
  auto b = encode_word(v);
  return write_all(fd, b.data(), b.size());
}

bool read_word(int fd, int32_t& v) {
  word_bytes b;
  if (!read_full(fd, b.data(), b.size())) return false;
  v = decode_word(b);
  return true;
}

bool send_request(int sock, const process_spec& spec) {
  std::string bytes = encode_request(spec);
  if (bytes.empty()) {
    errno = E2BIG;
    return false;
  }
  size_t at = 0;
  while (at < bytes.size()) {
    ssize_t w = ::send(sock, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    at += static_cast<size_t>(w);
  }
  return true;
}

std::optional<std::string> read_request(int sock) {
  int32_t n = 0;
  if (!read_word(sock, n)) return std::nullopt;
  std::string body(static_cast<uint32_t>(n), '\0');
  if (!read_full(sock, body.data(), body.size())) return std::nullopt;
  return body;
}

bool send_answer(int sock, spawn_answer a, const channels* ends) {
  answer_bytes bytes = encode_answer(a);
  msghdr msg{};
  iovec iov{bytes.data(), bytes.size()};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * channel_count)];
  if (ends) {
    auto fds = in_order(*ends);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof fds);
  }
  ssize_t sent;
  do sent = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(bytes.size());
}

expected<received_answer> receive_answer(int sock) {
  answer_bytes bytes{};
  msghdr msg{};
  iovec iov{bytes.data(), bytes.size()};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * channel_count)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got;
  do got = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  if (got <= 0) return status{errc::not_found, got == 0 ? "it closed its channel" : ::strerror(errno)};
  received_answer r;
  std::array<int, channel_count> fds{-1, -1, -1, -1, -1};
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      r.passed = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      std::memcpy(fds.data(), CMSG_DATA(c), sizeof(int) * std::min<size_t>(static_cast<size_t>(r.passed), channel_count));
    }
  r.ends = from_order(fds);
  // The rest of a short read (the descriptors came with its first byte).
  if (got < static_cast<ssize_t>(bytes.size()) &&
      !read_full(sock, bytes.data() + got, bytes.size() - static_cast<size_t>(got)))
    return status{errc::not_found, "a short answer"};
  r.answer = decode_answer(bytes);
  return r;
}

}  // namespace tune::spawn_protocol
