#include "dial.hpp"

#include <caf/io/all.hpp>
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "basp_fd.hpp"
#include "gate.hpp"
#include "tune/net/tls.hpp"

namespace tune {

namespace {

std::shared_ptr<tls::context> tls_ctx;
std::mutex gate_mutex;
std::unique_ptr<basp_gate> out_gate;  // started at the first TLS dial, for the process's life

basp_gate& outbound_gate() {
  std::lock_guard<std::mutex> lock{gate_mutex};
  if (!out_gate) out_gate = basp_gate::outbound();
  return *out_gate;
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
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    ::close(fd);
    return status{errc::not_found, std::string{"socketpair: "} + std::strerror(errno)};
  }
  uint64_t id = outbound_gate().add_outbound(fd, sv[1], tls_ctx, where);
  return dial_request{basp_broker(sys), connect_fd_message(sys, sv[0], where), id};  // CAF owns sv[0]
}

std::string connect_failure(caf::actor_system& sys, uint64_t id, const caf::error& err) {
  std::string why;
  if (id != 0) {
    std::lock_guard<std::mutex> lock{gate_mutex};
    if (out_gate) why = out_gate->failure(id);
  }
  if (!why.empty()) return why;
  why = sys.render(err);
  if (err == caf::sec::disconnect_during_handshake)
    why += tls_ctx ? " (the head closed the connection during the handshake)"
                   : " (the head closed the connection during the handshake: if its cluster uses TLS, give --tls-cert, "
                     "--tls-key and --tls-ca, or TUNE_TLS_CERT, TUNE_TLS_KEY and TUNE_TLS_CA)";
  return why;
}

bool hopeless(const std::string& why) { return why.find("TLS") != std::string::npos; }

}  // namespace tune
