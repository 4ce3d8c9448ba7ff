// For the client test programs (pg_client, trial_client): a cluster_client for
// --address HOST:PORT and --token-file, through the same parsing as the tune CLI.
#pragma once

#include "tune/cluster/address.hpp"
#include "client/client.hpp"
#include "tune/cluster/token.hpp"

namespace tune::test {

inline expected<std::unique_ptr<cluster_client>> connect_client(caf::actor_system& sys, const std::string& address,
                                                                const std::string& token_file) {
  auto where = parse_host_port(address, "--address");
  if (!where) return where.error();
  auto token = read_token(token_file);
  if (!token) return token.error();
  return cluster_client::connect(sys, where->host, where->port, token->token);
}

}  // namespace tune::test
