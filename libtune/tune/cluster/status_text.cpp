#include "tune/cluster/status_text.hpp"

#include <cstdio>
#include <cmath>
#include <map>
#include <vector>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tune/core/json_text.hpp"
#include "tune/core/quantity.hpp"
#include "tune/core/resource_set.hpp"

namespace tune {

namespace {

using nlohmann::json;

std::string seconds_ago(double ms) {
  char buf[32];
  if (ms < 60'000) std::snprintf(buf, sizeof buf, "%.1f s ago", ms / 1000);
  else if (ms < 3'600'000) std::snprintf(buf, sizeof buf, "%.0f min ago", ms / 60'000);
  else std::snprintf(buf, sizeof buf, "%.1f h ago", ms / 3'600'000);
  return buf;
}

std::string duration(double s) {
  char buf[32];
  auto t = static_cast<long>(s);
  if (t < 60) std::snprintf(buf, sizeof buf, "%lds", t);
  else if (t < 3600) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  return buf;
}

std::string bar(double allocated) {
  int filled = static_cast<int>(allocated * 10 + 1e-9);
  if (filled > 10) filled = 10;
  if (filled == 0 && allocated > 0) filled = 1;  // a sliver still shows
  return '[' + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(10 - filled), '.') + ']';
}

std::string number(const json& j) {
  if (j.is_number_integer()) return std::to_string(j.get<long long>());
  auto q = quantity::from_double(j.get<double>(), "amount");
  return q ? q->to_string() : json_text(j);
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s += std::string(width - s.size(), ' ');
  return s;
}

}  // namespace

expected<std::string> render_status_text(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("nodes"))
    return status{errc::invalid_argument, "the head's status is not the JSON this tune expects"};
  std::ostringstream out;
  if (j.contains("head")) {
    const auto& h = j["head"];
    out << "libtune cluster at " << h.value("address", "?") << " (head: libtune " << h.value("version", "?")
        << ", up " << duration(h.value("uptime_s", 0.0)) << ")\n";
    if (h.contains("dashboard") && h["dashboard"].is_string())
      out << "dashboard: " << h["dashboard"].get<std::string>() << " (tune dashboard: a link that signs in)\n";
  }
  int alive = 0, gone = 0;
  for (auto& n : j["nodes"]) (n.value("alive", false) ? alive : gone) += 1;
  out << "\nNodes: " << alive << " alive";
  if (gone) out << ", " << gone << " dead or stopped";
  out << "\n";
  if (!j["nodes"].empty()) {
    out << "  " << pad("STATE", 7) << pad("NODE", 16) << pad("HOST", 26) << pad("GPUS", 6) << pad("CPUS", 6)
        << "LAST HEARD\n";
    for (auto& n : j["nodes"]) {
      std::string host = n.value("host", "");
      if (!n.value("address", "").empty()) host += " (" + n.value("address", "") + ")";
      size_t gpus = n.contains("gpus") ? n["gpus"].size() : 0;
      bool logical = false;
      for (auto& g : n.value("gpus", json::array())) logical |= g.value("logical", false);
      std::string cpus = n["resources"]["total"].contains("cpu") ? number(n["resources"]["total"]["cpu"]) : "0";
      out << "  " << pad(n.value("state", "?"), 7) << pad(n.value("id", "?"), 16) << pad(host, 26)
          << pad(std::to_string(gpus) + (logical ? "L" : ""), 6) << pad(cpus, 6)
          << seconds_ago(n.value("last_heartbeat_ms_ago", 0.0));
      if (n.contains("reason")) out << "  " << n["reason"].get<std::string>();
      out << "\n";
      // How it contains its trials, and what each uses of the host (its cgroup).
      if (n.value("alive", false) && n.contains("containment") && n["containment"].is_object())
        out << "         containment: " << n["containment"].value("description", n["containment"].value("kind", "?")) << "\n";
      if (n.value("alive", false) && n.contains("trial_host") && n["trial_host"].is_object())
        for (auto& [id, u] : n["trial_host"].items()) {
          if (!u.is_object()) continue;
          out << "         trial " << id << ": host memory " << format_bytes(u.value("memory", int64_t{0}));
          if (u.contains("memory_peak")) out << " (peak " << format_bytes(u.value("memory_peak", int64_t{0})) << ")";
          if (u.contains("cpu_seconds")) out << ", " << number(u["cpu_seconds"]) << " CPU-s";
          if (u.contains("pids")) out << ", " << u.value("pids", 0) << " tasks";
          out << "\n";
        }
      // Other users' trials (a user's view): who, and how many.
      if (n.value("alive", false) && n.contains("trials_held_by") && n["trials_held_by"].is_object())
        for (auto& [owner, count] : n["trials_held_by"].items())
          out << "         held by " << owner << " (" << (count.is_number() ? count.get<int>() : 0) << " trial"
              << (count.is_number() && count.get<int>() == 1 ? "" : "s") << ")\n";
    }
  }

  out << "\nResources (alive nodes): used / total\n";
  const auto& total = j["resources"]["total"];
  const auto& avail = j["resources"]["available"];
  if (total.empty()) out << "  none\n";
  for (auto& [name, t] : total.items()) {
    std::string used;
    if (name == "memory" || name == "gpu_memory") {
      int64_t tb = t.get<int64_t>(), ab = avail.value(name, int64_t{0});
      used = format_bytes(tb - ab) + " / " + format_bytes(tb);
    } else {
      auto tq = quantity::from_double(t.get<double>(), name);
      auto aq = quantity::from_double(avail.value(name, 0.0), name);
      used = tq && aq ? (*tq - *aq).to_string() + " / " + tq->to_string() : "?";
    }
    out << "  " << pad(name, 12) << used << "\n";
  }

  bool any_gpu = false;
  for (auto& n : j["nodes"]) any_gpu |= n.value("alive", false) && !n.value("gpus", json::array()).empty();
  if (any_gpu) {
    out << "\nGPUs (# = a tenth of the card allocated; L = logical, declared with --num-gpus)\n";
    for (auto& n : j["nodes"]) {
      if (!n.value("alive", false) || n.value("gpus", json::array()).empty()) continue;
      out << "  " << n.value("id", "?") << "\n";
      for (auto& g : n["gpus"]) {
        double a = g.value("allocated", 0.0);
        std::string uuid = g.value("uuid", "");
        out << "    gpu " << g.value("index", 0) << "  " << pad(g.value("name", ""), 20) << pad(uuid, 42)
            << bar(a) << " " << pad(number(g["allocated"]), 6)
            << format_bytes(g.value("memory_free", int64_t{0})) << " free of "
            << format_bytes(g.value("memory_total", int64_t{0})) << (g.value("logical", false) ? "  L" : "") << "\n";
        // Kept clear of: what other programs hold there (another cluster, a notebook).
        if (g.contains("others") && g["others"].is_object()) {
          auto& o = g["others"];
          out << "      in use by another program: " << o.value("who", std::string{"?"}) << "; kept clear: "
              << format_bytes(o.value("memory", int64_t{0}));
          if (o.value("share", 0.0) > 0) out << " and " << number(o["share"]) << " of the card";
          out << (o.value("holds_card", false) ? " (not given whole)" : "") << "\n";
        }
        // What really runs there, from the node's GPU audit (NVML).
        for (auto& a : n.value("gpu_audit", json::array())) {
          if (a.value("uuid", "") != uuid) continue;
          out << "      in use " << format_bytes(a.value("memory_used", int64_t{0})) << " of "
              << format_bytes(a.value("memory_total", int64_t{0}));
          for (auto& t : a.value("trials", json::array())) {
            if (t.contains("held_by"))
              out << "; held by " << t.value("held_by", "?") << " " << format_bytes(t.value("memory", int64_t{0}));
            else
              out << "; trial " << t.value("trial", "?") << " " << format_bytes(t.value("memory", int64_t{0}));
          }
          out << "\n";
          for (auto& f : a.value("foreign", json::array())) {
            std::string name = f.value("name", ""), user = f.value("user", "");
            int64_t mem = f.value("memory", int64_t{-1});
            std::string beside;
            for (auto& t : f.value("beside", json::array()))
              if (t.is_string()) beside += (beside.empty() ? "" : ", ") + t.get<std::string>();
            out << "      not this cluster's: pid " << f.value("pid", 0) << (name.empty() ? "" : " (" + name + ")")
                << (user.empty() ? "" : " of " + user) << (mem >= 0 ? ' ' + format_bytes(mem) : "")
                << (beside.empty() ? "" : "; beside trial " + beside + " (left alone)") << "\n";
          }
        }
      }
    }
  }
  // Placement groups: the live ones one per line with their bundles, the ended ones
  // (removed, infeasible) counted, except infeasible ones that say why.
  if (j.contains("placement_groups")) {
    const auto& groups = j["placement_groups"];
    std::map<std::string, int> by_state;
    for (auto& g : groups) by_state[g.value("state", "?")] += 1;
    out << "\nPlacement groups: ";
    if (groups.empty()) out << "none";
    bool first = true;
    for (auto& [state, n] : by_state) {
      out << (first ? "" : ", ") << n << " " << state;
      first = false;
    }
    out << "\n";
    for (auto& g : groups) {
      auto state = g.value("state", "?");
      if (state == "removed") continue;
      out << "  " << pad(g.value("id", "?"), 22) << pad(state, 13) << pad(g.value("strategy", "?"), 14);
      std::vector<std::string> sites;
      for (auto& b : g.value("bundles", json::array())) {
        std::string site = b.value("request", "?") + " @ ";
        if (b["node"].is_string()) {
          site += b["node"].get<std::string>();
          std::string cards;
          for (auto& c : b.value("gpus", json::array())) {
            if (!cards.empty()) cards += ',';
            cards += std::to_string(c.value("index", 0));
          }
          if (!cards.empty()) site += " gpu " + cards;
          if (b.value("state", "") == "preparing") site += " (preparing)";
        } else {
          site += "-";
        }
        sites.push_back(site);
      }
      for (size_t i = 0; i < sites.size(); ++i) out << (i ? "; " : "") << sites[i];
      if (g.contains("held_by") && g["held_by"].is_string()) out << "  (held by " << g["held_by"].get<std::string>() << ")";
      else if (!g.value("owner", "").empty()) out << "  (" << g["owner"].get<std::string>() << "'s)";
      out << "\n";
      if (!g.value("reason", "").empty()) out << "  " << pad("", 22) << g["reason"].get<std::string>() << "\n";
    }
  }
  if (j.contains("orphaned_bundles") && !j["orphaned_bundles"].empty()) {
    out << "\nBundles held for groups this head does not know (from before a head restart; released\n"
           "unless their owner creates the group again):\n";
    for (auto& o : j["orphaned_bundles"])
      out << "  " << o.value("key", "?") << "#" << o.value("bundle", 0) << " on " << o.value("node", "?") << ": "
          << o.value("request", "?") << "\n";
  }
  // Running experiments (the head's board), with auto-packing's share where it sizes one.
  if (j.contains("experiments") && j["experiments"].is_array()) {
    std::vector<const json*> running;
    for (auto& e : j["experiments"])
      if (e.value("state", "") == "running") running.push_back(&e);
    if (!running.empty()) out << "\nExperiments running: " << running.size() << "\n";
    for (auto* e : running) {
      std::string counts;
      if (e->contains("trials_by_state") && (*e)["trials_by_state"].is_object())
        for (auto& [state, n] : (*e)["trials_by_state"].items())
          counts += (counts.empty() ? "" : ", ") + std::to_string(n.is_number() ? n.get<int64_t>() : 0) + " " + state;
      out << "  " << pad(e->value("name", e->value("owner", "?")), 22) << counts;
      if (!e->value("owner", "").empty()) out << "  (" << (*e)["owner"].get<std::string>() << "'s)";
      out << "\n";
      if (!e->contains("auto_packing") || !(*e)["auto_packing"].is_object()) continue;
      const auto& a = (*e)["auto_packing"];
      out << "    auto-packing: ";
      if (a.value("phase", "") == "sized") {
        out << "share " << number(a.value("share", json(0))) << " of a GPU (" << a.value("trials_per_card", 0)
            << " per card) for a peak of " << format_bytes(a.value("peak", int64_t{0})) << " + "
            << std::lround(a.value("margin", 0.0) * 100) << "%";
        if (a.contains("util")) out << ", probe SM utilisation " << a.value("util", 0) << "%";
        if (a.value("outgrown", 0) > 0) out << ", " << a.value("outgrown", 0) << " restarted on a bigger share";
      } else {
        out << "probing on " << number(a.value("probe_share", json(0))) << " of a GPU";
      }
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace tune
