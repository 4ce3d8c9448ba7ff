// A client process for the trial network-namespace test: it serves a program that
// only it has, reserves bundles and starts trials in them, and prints what happened
// as one JSON object (its last line).
//
//   trial_client --address HOST:PORT --token-file F --program PATH --scenario ship|fail
//                [--trials N] [--prefix P] [--group ID]
//
// ship: a group of --trials bundles of one GPU; one trial of the program after the
//       other in them (mode "report", ids P0, P1, ...), each watched until it ends.
// fail: a group of one bundle; a start with a SHA-256 nobody serves, a start of a
//       program whose file vanished after it was served, one whose file changed after
//       it was served, then a start of the program itself (the node is not stuck).
#include <boost/program_options.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "client/client.hpp"
#include "client_connect.hpp"
#include "tune/cluster/token.hpp"

namespace po = boost::program_options;
using namespace tune;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

int64_t ms_since(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t).count();
}

nlohmann::json to_json(const program_ref& p) { return {{"name", p.name}, {"sha256", p.sha256}, {"size", p.size}}; }

// Starts a trial and, when it started, collects its events until it ends (15 s at most).
nlohmann::json run_trial(cluster_client& client, const trial_request& req) {
  nlohmann::json out{{"id", req.trial_id}};
  auto t0 = clock_type::now();
  auto started = client.start_trial(req);
  out["start_ms"] = ms_since(t0);
  out["ok"] = static_cast<bool>(started);
  if (!started) {
    out["error"] = started.error().message();
    return out;
  }
  out["started"] = nlohmann::json::parse(*started, nullptr, false);
  out["events"] = nlohmann::json::array();
  auto end = clock_type::now() + 15s;
  while (clock_type::now() < end) {
    auto e = client.next_trial_event(100ms);
    if (!e || e->trial_id != req.trial_id) continue;
    out["events"].push_back({{"kind", e->kind}, {"body", nlohmann::json::parse(e->json, nullptr, false)}});
    if (e->kind == "ended") break;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc("trial_client options");
  desc.add_options()("address", po::value<std::string>()->required(), "HOST:PORT of the head")(
      "token-file", po::value<std::string>()->required(), "the cluster token")(
      "program", po::value<std::string>()->required(), "the program to serve")(
      "scenario", po::value<std::string>()->default_value("ship"), "ship or fail")(
      "trials", po::value<uint32_t>()->default_value(2), "ship: how many trials, one after the other")(
      "prefix", po::value<std::string>()->default_value("t-"), "ship: trial ids are this and a number")(
      "group", po::value<std::string>()->default_value(""), "the placement group's id (empty: the head names it)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "trial_client: " << e.what() << "\n" << desc;
    return 2;
  }
  auto scenario = vm["scenario"].as<std::string>();
  if (scenario != "ship" && scenario != "fail") {
    std::cerr << "trial_client: --scenario is ship or fail, not " << scenario << "\n";
    return 2;
  }
  wire::config cfg;
  caf::actor_system sys{cfg};
  auto c = test::connect_client(sys, vm["address"].as<std::string>(), vm["token-file"].as<std::string>());
  if (!c) {
    std::cerr << "trial_client: " << c.error().message() << "\n";
    return 1;
  }
  auto& client = **c;
  auto path = vm["program"].as<std::string>();
  auto program = client.serve_program(path);
  if (!program) {
    std::cerr << "trial_client: serve " << path << ": " << program.error().message() << "\n";
    return 1;
  }
  uint32_t bundles = scenario == "ship" ? vm["trials"].as<uint32_t>() : 1;
  group_request req{vm["group"].as<std::string>(), strategy::pack, {}, false};
  for (uint32_t i = 0; i < bundles; ++i) req.bundles.push_back(*resource_set::make({{"gpu", 1}}));
  auto made = client.create_group(req);
  if (!made) {
    std::cerr << "trial_client: create group: " << made.error().message() << "\n";
    return 1;
  }
  auto ready = client.wait_ready(made->id, 10s);
  auto where = client.get_group_json(made->id);
  if (!ready || !where) {
    std::cerr << "trial_client: group " << made->id << " not ready: "
              << (ready ? where.error().message() : ready.error().message()) << "\n";
    return 1;
  }
  nlohmann::json out{{"program", to_json(*program)}, {"group", nlohmann::json::parse(*where)}};
  const std::string report = R"({"mode": "report", "count": 3})";
  if (scenario == "ship") {
    out["trials"] = nlohmann::json::array();
    for (uint32_t i = 0; i < bundles; ++i)
      out["trials"].push_back(
          run_trial(client, {vm["prefix"].as<std::string>() + std::to_string(i), made->id, i, *program, {}, report}));
  } else {
    // A well-formed SHA-256 that this client does not serve.
    program_ref unknown = *program;
    unknown.sha256 = std::string(64, 'e');
    out["unknown"] = run_trial(client, {"t-unknown", made->id, 0, unknown, {}, report});
    // A program served, then gone from the client's disk before the node asks for it.
    std::string copy = path + ".vanishing";
    std::error_code ec;
    std::filesystem::copy_file(path, copy, ec);
    std::ofstream(copy, std::ios::app) << "another program";
    auto vanishing = client.serve_program(copy);
    std::filesystem::remove(copy, ec);
    if (!vanishing) {
      std::cerr << "trial_client: serve " << copy << ": " << vanishing.error().message() << "\n";
      return 1;
    }
    out["vanished"] = run_trial(client, {"t-vanished", made->id, 0, *vanishing, {}, report});
    out["vanished"]["program"] = to_json(*vanishing);
    // A program served, then changed on the client's disk (same size, one byte off):
    // the node gets all of it, and its hash does not match.
    std::string changing = path + ".changing";
    std::filesystem::copy_file(path, changing, ec);
    std::ofstream(changing, std::ios::app) << "a third program";
    auto changed = client.serve_program(changing);
    if (!changed) {
      std::cerr << "trial_client: serve " << changing << ": " << changed.error().message() << "\n";
      return 1;
    }
    {
      std::fstream f(changing, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(changed->size / 2));
      f.put('\x5a');
    }
    out["changed"] = run_trial(client, {"t-changed", made->id, 0, *changed, {}, report});
    out["changed"]["program"] = to_json(*changed);
    out["after"] = run_trial(client, {"t-after", made->id, 0, *program, {}, report});
  }
  client.remove_group(made->id);
  std::cout << out.dump() << "\n" << std::flush;
  return 0;
}
