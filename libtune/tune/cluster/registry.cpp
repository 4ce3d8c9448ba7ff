#include "tune/cluster/registry.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tune/core/json_text.hpp"

namespace tune {

std::string_view to_string(node_state s) {
  switch (s) {
    case node_state::alive: return "alive";
    case node_state::dead: return "dead";
    case node_state::left: return "left";
  }
  return "?";
}

status node_registry::join(node_info info, node_resources resources, time_point now) {
  if (info.id.empty()) return {errc::invalid_argument, "a node without an id cannot join"};
  auto id = info.id;
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.state == node_state::alive) {
    // The same node joining twice (a reconnect the head has not noticed yet):
    // take the new advertisement.
    (void)view_.remove_node(id);
  }
  if (auto st = view_.add_node(id, std::move(resources)); !st) return st;
  entry& e = entries_[id];
  e.info = std::move(info);
  e.state = node_state::alive;
  e.reason.clear();
  e.joined = e.last_heard = e.state_since = now;
  e.last_known = {};
  return status::ok();
}

node_registry::heard node_registry::heartbeat(const node_id& id, const node_availability& free,
                                              time_point now, bool* others_changed) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return heard::unknown;
  entry& e = it->second;
  if (e.state != node_state::alive) return heard::not_alive;
  e.last_heard = now;
  ++e.heartbeats;
  auto* known = view_.find(id);
  if (others_changed) *others_changed = known->others() != free.others;
  if (known->availability() == free) return heard::ok;  // nothing changed: no re-sync
  return view_.set_availability(id, free) ? heard::ok : heard::bad_report;
}

bool node_registry::end(const node_id& id, node_state state, std::string reason, time_point now) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state != node_state::alive) return false;
  it->second.state = state;
  it->second.reason = std::move(reason);
  it->second.state_since = now;
  it->second.last_known = *view_.find(id);
  (void)view_.remove_node(id);
  return true;
}

bool node_registry::mark_dead(const node_id& id, std::string reason, time_point now) {
  return end(id, node_state::dead, std::move(reason), now);
}

bool node_registry::mark_left(const node_id& id, time_point now) {
  return end(id, node_state::left, "stopped by its owner (tune stop)", now);
}

std::vector<node_id> node_registry::sweep(time_point now, std::chrono::milliseconds timeout) {
  std::vector<node_id> silent;
  for (auto& [id, e] : entries_)
    if (e.state == node_state::alive && now - e.last_heard > timeout) silent.push_back(id);
  for (auto& id : silent) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - entries_[id].last_heard);
    mark_dead(id, "no heartbeat for " + std::to_string(ms.count()) + " ms (frozen or cut off)", now);
  }
  return silent;
}

void node_registry::forget_gone(time_point now, std::chrono::seconds keep, size_t max_gone) {
  std::vector<std::pair<time_point, node_id>> gone;
  for (auto& [id, e] : entries_)
    if (e.state != node_state::alive) gone.emplace_back(e.state_since, id);
  std::sort(gone.begin(), gone.end());
  size_t excess = gone.size() > max_gone ? gone.size() - max_gone : 0;
  for (size_t i = 0; i < gone.size(); ++i)
    if (i < excess || now - gone[i].first > keep) entries_.erase(gone[i].second);
}

const node_registry::entry* node_registry::find(const node_id& id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second;
}

const node_resources& node_registry::resources(const entry& e) const {
  const auto* alive = e.state == node_state::alive ? view_.find(e.info.id) : nullptr;
  return alive ? *alive : e.last_known;
}

namespace {

nlohmann::json amounts(const resource_set& r) { return nlohmann::json::parse(r.to_json()); }

double ms_between(node_registry::time_point a, node_registry::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

std::string node_registry::status_json(time_point now) const {
  using nlohmann::json;
  json nodes = json::array();
  resource_set total, available;
  for (auto& [id, e] : entries_) {
    const auto& r = resources(e);
    json gpus = json::array();
    for (size_t c = 0; c < r.gpus().size(); ++c) {
      const auto& g = r.gpus()[c];
      json card = {{"index", g.index},
                   {"uuid", g.uuid},
                   {"pci_bus_id", g.pci_bus_id},
                   {"name", g.name},
                   {"logical", g.logical},
                   {"memory_total", g.memory_total},
                   {"memory_free", r.card_memory_free(c)},
                   {"allocated", (quantity::whole(1) - r.card_free(c)).to_double()}};
      if (g.simulated) card["simulated"] = true;
      // What other programs hold there (docs/gpu-sharing.md): kept clear of.
      if (auto* o = r.others_on(c); o && o->any())
        card["others"] = {{"share", quantity::from_units(o->units).to_double()},
                          {"memory", o->memory},
                          {"holds_card", o->holds_card},
                          {"who", o->who}};
      gpus.push_back(std::move(card));
    }
    bool alive = e.state == node_state::alive;
    if (alive) {
      total += r.total();
      available += r.available();
    }
    json n = {{"id", id},
              {"host", e.info.hostname},
              {"address", e.info.address},
              {"version", e.info.version},
              {"alive", alive},
              {"state", std::string{to_string(e.state)}},
              {"last_heartbeat_ms_ago", ms_between(e.last_heard, now)},
              {"state_since_ms_ago", ms_between(e.state_since, now)},
              {"heartbeats", e.heartbeats},
              {"gpus", gpus},
              {"resources", {{"total", amounts(r.total())}, {"available", amounts(r.available())}}}};
    if (!e.reason.empty()) n["reason"] = e.reason;
    nodes.push_back(std::move(n));
  }
  json out = {{"nodes", nodes},
              {"resources", {{"total", amounts(total)}, {"available", amounts(available)}}},
              {"alive_nodes", alive()}};
  return json_text(out);
}

}  // namespace tune
