// A client process for the placement-group chaos test: creates, waits for and removes
// random groups against a real head for a while, checking every group it sees ready:
// all bundles held (all or nothing), the strategy kept, each bundle given exactly the
// GPUs it asked for. Last line: one JSON object with its counts and any violation.
//
//   pg_client --address HOST:PORT --token-file F --seconds S --seed N [--crash]
// --crash: at the end, die by SIGKILL holding its groups (the head must remove them).
#include <signal.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "client/client.hpp"
#include "client_connect.hpp"
#include "tune/cluster/token.hpp"

namespace po = boost::program_options;
using namespace tune;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> violations;

void check(const group_request& req, const group_info& g) {
  if (g.state != "created") return;  // rescheduling after a node loss is allowed
  auto bad = [&](const std::string& what) { violations.push_back(g.id + ": " + what); };
  if (g.bundles.size() != req.bundles.size()) return bad("bundle count differs from the request");
  std::set<std::string> nodes;
  for (size_t i = 0; i < g.bundles.size(); ++i) {
    auto& b = g.bundles[i];
    if (b.state != "held" || b.node.empty()) return bad("created, but bundle " + std::to_string(i) + " is " + b.state);
    nodes.insert(b.node);
    double want = req.bundles[i].gpu().to_double();
    double got = 0;
    for (auto& c : b.gpus) got += c.share;
    if (std::abs(want - got) > 1e-6) bad("bundle " + std::to_string(i) + " has " + std::to_string(got) + " GPUs, asked " + std::to_string(want));
    if (want >= 1 && b.gpus.size() != static_cast<size_t>(want)) bad("bundle " + std::to_string(i) + ": not whole cards");
    std::set<std::string> uuids;
    for (auto& c : b.gpus) uuids.insert(c.uuid);
    if (uuids.size() != b.gpus.size()) bad("bundle " + std::to_string(i) + " has one card twice");
  }
  if (req.strat == strategy::strict_spread && nodes.size() != g.bundles.size()) bad("STRICT_SPREAD with two bundles on one node");
  if (req.strat == strategy::strict_pack && nodes.size() != 1) bad("STRICT_PACK over several nodes");
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc("pg_client options");
  desc.add_options()("address", po::value<std::string>()->required(), "HOST:PORT of the head")(
      "token-file", po::value<std::string>()->required(), "the cluster token")(
      "seconds", po::value<double>()->default_value(10), "how long to run")(
      "seed", po::value<unsigned>()->default_value(1), "random seed")("crash", "die by SIGKILL at the end");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "pg_client: " << e.what() << "\n" << desc;
    return 2;
  }
  wire::config cfg;
  caf::actor_system sys{cfg};
  auto c = test::connect_client(sys, vm["address"].as<std::string>(), vm["token-file"].as<std::string>());
  if (!c) {
    std::cerr << "pg_client: " << c.error().message() << "\n";
    return 1;
  }
  auto& client = **c;
  std::mt19937 rng{vm["seed"].as<unsigned>()};
  const std::vector<resource_set> shapes{*resource_set::make({{"gpu", 1}}), *resource_set::make({{"gpu", 0.5}}),
                                         *resource_set::make({{"gpu", 0.25}, {"cpu", 1}})};
  const std::vector<strategy> strategies{strategy::pack, strategy::spread, strategy::strict_pack, strategy::strict_spread};
  std::map<std::string, group_request> mine;
  int created = 0, ready = 0, removed = 0, infeasible = 0, not_ready = 0, errors = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(vm["seconds"].as<double>() * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int action = static_cast<int>(rng() % 10);
    if (action < 5 && mine.size() < 4) {
      group_request req;
      req.strat = strategies[rng() % strategies.size()];
      for (size_t i = 0, n = 1 + rng() % 3; i < n; ++i) req.bundles.push_back(shapes[rng() % shapes.size()]);
      auto made = client.create_group(req);
      if (!made) {
        ++errors;
        std::cerr << "pg_client: create: " << made.error().message() << "\n";
        continue;
      }
      ++created;
      if (made->state == "infeasible") {
        ++infeasible;
        client.remove_group(made->id);
        continue;
      }
      mine[made->id] = req;
      auto g = client.wait_ready(made->id, std::chrono::milliseconds(rng() % 500));
      if (g) {
        ++ready;
        check(req, *g);
      } else {
        ++not_ready;
      }
    } else if (action < 8 && !mine.empty()) {
      auto it = std::next(mine.begin(), static_cast<long>(rng() % mine.size()));
      if (auto st = client.remove_group(it->first); !st) {
        ++errors;
        std::cerr << "pg_client: remove: " << st.message() << "\n";
      }
      ++removed;
      mine.erase(it);
    } else if (!mine.empty()) {
      auto it = std::next(mine.begin(), static_cast<long>(rng() % mine.size()));
      if (auto g = client.get_group(it->first)) check(it->second, *g);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));
  }
  if (vm.count("crash")) {
    std::cout << "crashing with " << mine.size() << " groups\n" << std::flush;
    ::kill(::getpid(), SIGKILL);
  }
  for (auto& [id, req] : mine) {
    if (auto st = client.remove_group(id); !st) ++errors;
    ++removed;
  }
  nlohmann::json out{{"created", created}, {"ready", ready},         {"removed", removed},
                     {"infeasible", infeasible}, {"not_ready", not_ready}, {"errors", errors},
                     {"violations", violations}};
  std::cout << out.dump() << "\n" << std::flush;
  std::_Exit(violations.empty() ? 0 : 3);
}
