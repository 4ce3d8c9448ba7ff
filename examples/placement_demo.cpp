// A dry run of libtune's placement on a cluster described in a JSON file, plus this
// machine with the GPUs it really has: each request is placed, made to wait or
// refused with its reason, and the per-GPU map shows who holds each card.
//
//   placement_demo --cluster examples/clusters/demo.json [--no-local]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tune/core/placement.hpp"
#include "tune/host/detect.hpp"

using namespace tune;
using json = nlohmann::json;

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "placement_demo: " << msg << "\n";
  std::exit(1);
}

template <class T>
T must(expected<T> e, const std::string& context) {
  if (!e) die(context + ": " + e.error().message());
  return std::move(e).value();
}

resource_set resources_of(const json& j, const std::string& context) {
  return must(resource_set::from_json(j.dump()), context);
}

node_resources node_of(const json& n, const std::string& id) {
  resource_set host = n.contains("resources") ? resources_of(n["resources"], "node " + id) : resource_set{};
  std::vector<gpu_instance> cards;
  if (n.contains("gpus")) {
    const auto& g = n["gpus"];
    int count = g.value("count", 0);
    if (count < 0 || count > 64) die("node " + id + ": gpus.count must be between 0 and 64");
    auto mem = must(parse_bytes(g.value("memory", "16GiB"), "gpus.memory"), "node " + id);
    for (int i = 0; i < count; ++i) {
      char bus[32];
      std::snprintf(bus, sizeof bus, "00000000:%02x:00.0", 0x10 + i);
      cards.push_back({i, "GPU-" + id + "-" + std::to_string(i), bus, g.value("name", "GPU"), mem, true});
    }
  }
  return must(node_resources::make(host, cards), "node " + id);
}

// "[#####-----]" for a card's allocated share.
std::string bar(quantity used) {
  int filled = static_cast<int>(used.units() * 10 / quantity::scale);
  return '[' + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(10 - filled), '.') + ']';
}

struct group {
  std::string label;
  placement where;
};

}  // namespace

int main(int argc, char** argv) {
  std::string cluster_file;
  bool local = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cluster" && i + 1 < argc) cluster_file = argv[++i];
    else if (a == "--no-local") local = false;
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: placement_demo --cluster FILE [--no-local]\n"
                   "Places the requests of FILE (see examples/clusters/demo.json) on its nodes and,\n"
                   "unless --no-local, on this machine with the GPUs it really has.\n";
      return 0;
    } else {
      die("unknown option '" + a + "' (try --help)");
    }
  }
  if (cluster_file.empty()) die("give the cluster file: --cluster examples/clusters/demo.json");
  std::ifstream in{cluster_file};
  if (!in) die("cannot read " + cluster_file + ": " + std::strerror(errno));
  json doc = json::parse(in, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) die(cluster_file + " is not a JSON object");

  cluster_view view;
  for (auto& n : doc.value("nodes", json::array())) {
    std::string id = n.value("id", "");
    auto st = view.add_node(id, node_of(n, id));
    if (!st) die(st.message());
  }
  if (local) {
    auto host = detect_host();
    auto me = must(local_node_resources(host), "this machine");
    std::cout << "this machine: " << host.hostname << ", " << host.cpus.to_string() << " CPUs, "
              << format_bytes(host.memory) << ", ";
    if (host.gpu.gpus.empty()) std::cout << "no GPU (" << host.gpu.note << ")\n";
    else std::cout << host.gpu.gpus.size() << (host.gpu.gpus.size() == 1 ? " GPU:\n" : " GPUs:\n");
    for (auto& g : host.gpu.gpus)
      std::cout << "  gpu " << g.index << ": " << g.name << ", " << format_bytes(g.memory_total) << ", "
                << g.uuid << ", " << g.pci_bus_id << "\n";
    auto st = view.add_node("local:" + host.hostname, me);
    if (!st) die(st.message());
  }
  std::cout << "cluster: " << view.size() << " nodes\n\n";

  std::vector<group> held;
  std::vector<std::pair<std::string, std::pair<std::vector<resource_set>, strategy>>> waiting;
  int decisions = 0;
  std::chrono::nanoseconds deciding{0};
  auto decide = [&](const std::vector<resource_set>& bundles, strategy s) {
    auto t0 = std::chrono::steady_clock::now();
    auto p = place(view, bundles, s);
    deciding += std::chrono::steady_clock::now() - t0;
    ++decisions;
    return p;
  };
  auto describe = [](const placement& p) {
    std::map<std::string, int> per_node;
    for (auto& b : p.bundles) per_node[b.node] += 1;
    std::string out;
    for (auto& [node, k] : per_node) out += (out.empty() ? "" : ", ") + node + (k > 1 ? " x" + std::to_string(k) : "");
    return out;
  };

  auto show_map = [&] {
    // Who holds each card.
    std::map<std::pair<std::string, uint32_t>, std::vector<std::string>> holders;
    for (auto& g : held)
      for (auto& b : g.where.bundles)
        for (auto& card : b.alloc.gpus)
          holders[{b.node, card.card}].push_back(g.label + (card.share < quantity::whole(1) ? ' ' + card.share.to_string() : ""));
    std::cout << "\nGPU map (# = a tenth of the card allocated)\n";
    for (size_t s = 0; s < view.size(); ++s) {
      const auto& n = view.node(s);
      std::cout << view.id(s) << ": cpu " << (n.total().cpu() - n.available().cpu()).to_string() << "/"
                << n.total().cpu().to_string() << ", gpu " << (n.total().gpu() - n.available().gpu()).to_string()
                << "/" << n.total().gpu().to_string() << "\n";
      for (size_t c = 0; c < n.gpus().size(); ++c) {
        auto used = quantity::whole(1) - n.card_free(c);
        std::cout << "  gpu " << c << " " << bar(used) << " " << used.to_string();
        auto it = holders.find({view.id(s), static_cast<uint32_t>(c)});
        if (it != holders.end()) {
          std::cout << "  ";
          for (size_t i = 0; i < it->second.size(); ++i) std::cout << (i ? ", " : "") << it->second[i];
        }
        std::cout << "\n";
      }
    }
  };

  for (auto& step : doc.value("steps", json::array())) {
    if (step.contains("show")) {
      show_map();
      continue;
    }
    if (step.contains("release")) {
      std::string label = step["release"];
      int freed = 0;
      for (auto it = held.begin(); it != held.end();) {
        if (it->label.rfind(label, 0) == 0) {
          auto st = release(view, it->where);
          if (!st) die(st.message());
          it = held.erase(it);
          ++freed;
        } else {
          ++it;
        }
      }
      std::cout << "\nrelease  " << label << ": " << freed << (freed == 1 ? " group" : " groups") << " freed\n";
      for (auto it = waiting.begin(); it != waiting.end();) {
        auto p = must(decide(it->second.first, it->second.second), it->first);
        if (p.result == outcome::placed) {
          if (auto st = commit(view, p); !st) die(st.message());
          std::cout << "  placed " << it->first << " (was waiting) -> " << describe(p) << "\n";
          held.push_back({it->first, p});
          it = waiting.erase(it);
        } else {
          ++it;
        }
      }
      continue;
    }
    std::string label = step.value("label", "step"), what = step.value("what", label);
    auto s = must(parse_strategy(step.value("strategy", "PACK")), label);
    std::vector<resource_set> bundles;
    int count = step.value("count", 1), repeat = step.value("repeat", 1);
    for (auto& b : step.value("bundles", json::array()))
      for (int i = 0; i < count; ++i) bundles.push_back(resources_of(b, label));
    int placed = 0;
    std::map<std::string, int> where;
    for (int r = 0; r < repeat; ++r) {
      auto p = decide(bundles, s);
      if (!p) {
        std::cout << "refused  " << what << ": " << p.error().message() << "\n";
        break;
      }
      if (p->result == outcome::placed) {
        if (auto st = commit(view, *p); !st) die(st.message());
        for (auto& b : p->bundles) where[b.node] += 1;
        held.push_back({repeat > 1 ? label + "." + std::to_string(r) : label, *p});
        ++placed;
        continue;
      }
      std::cout << (p->result == outcome::not_now ? "waiting  " : "never    ") << what << " ("
                << to_string(s) << "): " << p->reason << "\n";
      if (p->result == outcome::not_now) waiting.push_back({label, {bundles, s}});
      break;
    }
    if (placed > 0) {
      std::string nodes;
      for (auto& [n, k] : where) nodes += (nodes.empty() ? "" : ", ") + n + " x" + std::to_string(k);
      std::cout << "placed   " << what << " (" << to_string(s) << "): " << nodes << "\n";
    }
  }

  show_map();
  std::printf("\n%d placement decisions in %.3f ms\n", decisions,
              std::chrono::duration<double, std::milli>(deciding).count());
  return 0;
}
