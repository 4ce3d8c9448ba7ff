// tune rebalance, tune drain: the head moves trials between nodes (paused, and started
// again from their checkpoints by their experiments).
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "connect.hpp"

namespace tune::cli {

// `tune rebalance`: the head evens the GPU load across nodes.
int cmd_rebalance(const args& a) {
  po::options_description desc("tune rebalance options");
  desc.add_options()("help,h", "show this help")("json", "print the plan as one JSON object");
  add_client_options(desc);
  po::variables_map vm;
  if (int rc = parse("rebalance", a, desc, "tune rebalance --address HOST:PORT [--json]", vm); rc >= 0) return rc;
  auto c = connect_head("rebalance", vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& conn = std::get<connected>(c);
  auto text = conn.client->rebalance();
  if (!text) finish(fail("rebalance", "the head at " + conn.where + ": " + text.error().message()));
  if (vm.count("json")) {
    std::cout << *text << "\n";
    finish(0);
  }
  auto j = nlohmann::json::parse(*text);
  if (j["moves"].empty()) std::cout << "tune rebalance: the load is even (within one trial's share); nothing to move\n";
  for (auto& m : j["moves"])
    std::cout << "moving placement group " << m["group"].get<std::string>() << " (" << m["gpu"].get<double>()
              << " GPU) from " << m["from"].get<std::string>() << " to " << m["to"].get<std::string>() << "\n";
  for (auto& [n, l] : j["load"].items()) std::cout << "  " << n << ": " << static_cast<int>(l.get<double>() * 100 + 0.5) << "% of its GPUs allocated before\n";
  finish(0);
}

// `tune drain NODE`: nothing new goes to the node and the trials on it move elsewhere;
// `--undo` lets it take work again.
int cmd_drain(const args& a) {
  po::options_description desc("tune drain options");
  desc.add_options()("help,h", "show this help")("node", po::value<std::string>(), "the node's id (tune status shows it)")(
      "undo", "let the node take new work again")("json", "print the answer as one JSON object");
  add_client_options(desc);
  po::positional_options_description pos;
  pos.add("node", 1);
  po::variables_map vm;
  if (int rc = parse("drain", a, desc, "tune drain NODE --address HOST:PORT [--undo]", vm, &pos); rc >= 0) return rc;
  if (!vm.count("node")) return fail("drain", "say which node: tune drain NODE --address HOST:PORT", 2);
  auto node = vm["node"].as<std::string>();
  auto c = connect_head("drain", vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& conn = std::get<connected>(c);
  bool on = !vm.count("undo");
  auto text = conn.client->drain(node, on);
  if (!text) finish(fail("drain", "the head at " + conn.where + ": " + text.error().message()));
  if (vm.count("json")) {
    std::cout << *text << "\n";
    finish(0);
  }
  auto j = nlohmann::json::parse(*text);
  if (!on) {
    std::cout << "tune drain: node " << node << " takes new work again\n";
    finish(0);
  }
  std::cout << "tune drain: node " << node << " takes no new work; " << j["moves"].size()
            << " placement group(s) asked to move off it\n";
  for (auto& s : j["stays"])
    std::cout << "  stays: " << s["group"].get<std::string>() << " (" << s["why"].get<std::string>() << ")\n";
  finish(0);
}

}  // namespace tune::cli
