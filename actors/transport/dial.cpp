#include "dial.hpp"

#include <caf/io/all.hpp>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "basp_fd.hpp"
#include "tls_scribe.hpp"
#include "tune/net/tls.hpp"

namespace tune {

namespace {

std::shared_ptr<tls::context> tls_ctx;

// Why recent TLS dials failed, by dial_request::id.
struct failures {
  std::mutex mutex;
  std::map<uint64_t, dial_failure> by_id;
  uint64_t next_id = 1;
};
failures& recent() {
  static failures f;
  return f;
}
void record(uint64_t id, const std::string& why, bool hopeless) {
  auto& f = recent();
  std::lock_guard<std::mutex> lock{f.mutex};
  f.by_id.try_emplace(id, dial_failure{why, hopeless});
  while (f.by_id.size() > 256) f.by_id.erase(f.by_id.begin());
}

constexpr int connect_timeout_ms = 10000;

// Finishes one TLS dial off the caller's thread (a detached actor: the TCP connect may
// take seconds): waits for the connect, makes the TLS scribe and hands it to the BASP
// broker, whose answer goes to the caller.
caf::behavior tls_dialer(caf::event_based_actor* self, int fd, std::string where, std::shared_ptr<tls::context> ctx,
                         uint64_t id) {
  return {
      [=](caf::connect_atom) {
        auto answer = self->make_response_promise();
        self->quit();  // after this one message
        pollfd p{fd, POLLOUT, 0};
        int rc;
        while ((rc = ::poll(&p, 1, connect_timeout_ms)) < 0 && errno == EINTR) {
        }
        int err = 0;
        socklen_t len = sizeof err;
        if (rc == 0) err = ETIMEDOUT;
        else ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          ::close(fd);
          record(id, "cannot connect to " + where + ": " + std::strerror(err), false);
          answer.deliver(caf::make_error(caf::sec::cannot_connect_to_node));
          return;
        }
        std::string why;
        auto scribe = make_tls_scribe(self->home_system(), fd, where, *ctx,
                                      [id](const std::string& w, bool hopeless) { record(id, w, hopeless); }, why);
        if (!scribe) {
          record(id, why, true);
          answer.deliver(caf::make_error(caf::sec::cannot_connect_to_node));
          return;
        }
        answer.delegate(basp_broker(self->home_system()), caf::connect_atom::value, std::move(scribe), uint16_t{0});
      }};
}

}  // namespace

void set_client_tls(std::shared_ptr<tls::context> ctx) { tls_ctx = std::move(ctx); }
const std::shared_ptr<tls::context>& client_tls() { return tls_ctx; }

expected<dial_request> dial(caf::actor_system& sys, const std::string& host, uint16_t port) {
  if (!tls_ctx)
    return dial_request{caf::actor_cast<caf::actor>(sys.middleman().actor_handle()),
                        caf::make_message(caf::connect_atom::value, host, port), 0};
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0)
    return status{errc::not_found, "cannot resolve " + host + ": " + gai_strerror(e)};
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
  int err = errno;
  ::freeaddrinfo(res);
  if (fd < 0 || (rc != 0 && err != EINPROGRESS)) {
    if (fd >= 0) ::close(fd);
    return status{errc::not_found, "cannot connect to " + where + ": " + std::strerror(err)};
  }
  uint64_t id;
  {
    auto& f = recent();
    std::lock_guard<std::mutex> lock{f.mutex};
    id = f.next_id++;
  }
  auto helper = sys.spawn<caf::detached + caf::hidden>(tls_dialer, fd, where, tls_ctx, id);
  return dial_request{helper, caf::make_message(caf::connect_atom::value), id};
}

dial_failure connect_failure(caf::actor_system& sys, uint64_t id, const caf::error& err) {
  if (id != 0) {
    auto& f = recent();
    std::lock_guard<std::mutex> lock{f.mutex};
    if (auto it = f.by_id.find(id); it != f.by_id.end()) return it->second;
  }
  dial_failure d{sys.render(err), false};
  if (err == caf::sec::disconnect_during_handshake) {
    // A head that closes before its handshake refused this process: a plain process
    // at a cluster that uses TLS, most often.
    d.hopeless = true;
    d.why += tls_ctx ? " (the head closed the connection during the handshake)"
                     : " (the head closed the connection during the handshake: if its cluster uses TLS, give --tls-cert, "
                       "--tls-key and --tls-ca, or TUNE_TLS_CERT, TUNE_TLS_KEY and TUNE_TLS_CA)";
  }
  return d;
}

}  // namespace tune
