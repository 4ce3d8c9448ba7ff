#include "connect.hpp"

#include <cstdlib>
#include <iostream>
#include <thread>

#include "tune/cluster/address.hpp"
#include "tune/cluster/token.hpp"

namespace tune::cli {

std::variant<connected, int> connect_head(const std::string& command, const po::variables_map& vm,
                                           std::chrono::milliseconds extra_wait) {
  std::string address = text_option(vm, "address");
  if (address.empty())
    if (const char* e = std::getenv("TUNE_ADDRESS")) address = e;
  if (address.empty()) return fail(command, "give --address HOST:PORT of the head (or set TUNE_ADDRESS)", 2);
  auto head = parse_host_port(address, "--address");
  if (!head) return fail(command, head.error().message(), 2);
  double timeout_s = vm["timeout"].as<double>();
  if (!(timeout_s > 0 && timeout_s <= 3600)) return fail(command, "--timeout must be between 0 and 3600 seconds", 2);
  auto token = read_token(vm["token-file"].as<std::string>());
  if (!token) return fail(command, token.error().message());
  if (int rc = use_client_tls(command, vm); rc >= 0) return rc;
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  // Connecting to an address that never answers can block inside CAF: end the process
  // with a clear error instead of hanging.
  std::thread([command, limit = timeout + extra_wait, where = head->to_string()] {
    std::this_thread::sleep_for(limit + std::chrono::seconds(2));
    std::cerr << "tune " << command << ": no answer from " << where << " in time (is a head running there?)\n";
    std::_Exit(1);
  }).detach();
  connected c;
  c.cfg = std::make_unique<wire::config>();
  c.sys = std::make_unique<caf::actor_system>(*c.cfg);
  c.where = head->to_string();
  auto client = cluster_client::connect(*c.sys, head->host, head->port, token->token, timeout);
  if (!client) return fail(command, client.error().message());
  c.client = std::move(client).value();
  return c;
}

void finish(int rc) {
  std::cout.flush();
  std::cerr.flush();
  std::_Exit(rc);
}

}  // namespace tune::cli
