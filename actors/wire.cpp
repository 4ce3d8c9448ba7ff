#include "wire.hpp"

namespace tune::wire {

wire_host to_wire(const resource_set& host) {
  wire_host w;
  w.cpu_units = host.cpu().units();
  w.memory = host.memory();
  for (auto& [name, q] : host.customs()) {
    w.custom_names.push_back(name);
    w.custom_units.push_back(q.units());
  }
  return w;
}

expected<resource_set> host_from_wire(const wire_host& w) {
  if (w.custom_names.size() != w.custom_units.size())
    return status{errc::invalid_argument, "malformed resources: names and amounts differ in count"};
  if (w.cpu_units < 0 || w.memory < 0)
    return status{errc::invalid_argument, "malformed resources: a negative amount"};
  resource_set r;
  r.set_cpu(quantity::from_units(w.cpu_units)).set_memory(w.memory);
  for (size_t i = 0; i < w.custom_names.size(); ++i) {
    if (auto st = check_resource_name(w.custom_names[i]); !st) return st;
    if (w.custom_units[i] < 0) return status{errc::invalid_argument, "malformed resources: a negative amount"};
    r.set_custom(w.custom_names[i], quantity::from_units(w.custom_units[i]));
  }
  return r;
}

wire_avail to_wire(const node_availability& a) {
  wire_avail w{to_wire(a.host), a.card_free, a.card_memory_free, {}};
  for (auto& o : a.others) w.others.push_back({o.units, o.memory, o.holds_card, o.who});
  return w;
}

expected<node_availability> from_wire(const wire_avail& w) {
  auto host = host_from_wire(w.host);
  if (!host) return host.error();
  node_availability a{*host, w.card_free, w.card_memory_free, {}};
  for (auto& o : w.others) a.others.push_back({o.units, o.memory, o.holds_card, o.who});
  return a;
}

wire_ad make_ad(const std::string& node_id, const std::string& hostname, const std::string& address,
                const node_resources& n) {
  wire_ad ad;
  ad.node_id = node_id;
  ad.hostname = hostname;
  ad.address = address;
  resource_set host = n.total();
  host.set_gpu({}).set_gpu_memory(0);
  ad.total = to_wire(host);
  for (auto& g : n.gpus())
    ad.gpus.push_back({g.index, g.uuid, g.pci_bus_id, g.name, g.memory_total, g.logical, g.simulated});
  ad.free = to_wire(n.availability());
  return ad;
}

expected<node_resources> resources_from_ad(const wire_ad& ad) {
  auto host = host_from_wire(ad.total);
  if (!host) return host.error();
  std::vector<gpu_instance> gpus;
  for (auto& g : ad.gpus)
    gpus.push_back({g.index, g.uuid, g.pci_bus_id, g.name, g.memory_total, g.logical, g.simulated});
  auto n = node_resources::make(*host, std::move(gpus));
  if (!n) return n.error();
  auto free = from_wire(ad.free);
  if (!free) return free.error();
  if (auto st = n->set_availability(*free); !st) return st;
  return n;
}

wire_request to_wire_request(const resource_set& r) {
  wire_request w;
  w.host = to_wire(r);
  w.gpu_units = r.gpu().units();
  w.gpu_memory = r.gpu_memory();
  return w;
}

expected<resource_set> request_from_wire(const wire_request& w) {
  auto host = host_from_wire(w.host);
  if (!host) return host.error();
  if (w.gpu_units < 0 || w.gpu_memory < 0)
    return status{errc::invalid_argument, "malformed request: a negative GPU amount"};
  host->set_gpu(quantity::from_units(w.gpu_units)).set_gpu_memory(w.gpu_memory);
  if (auto st = check_request(*host); !st) return st;
  return host;
}

wire_alloc to_wire(const allocation& a) {
  wire_alloc w;
  w.host = to_wire(a.host);
  for (auto& g : a.gpus) w.gpus.push_back({g.card, g.share.units(), g.memory});
  return w;
}

expected<allocation> alloc_from_wire(const wire_alloc& w, const node_resources& on) {
  auto host = host_from_wire(w.host);
  if (!host) return host.error();
  allocation a;
  a.host = *host;
  for (auto& g : w.gpus) {
    if (g.card >= on.gpus().size())
      return status{errc::invalid_argument, "malformed allocation: card " + std::to_string(g.card) +
                                                " does not exist on a node with " +
                                                std::to_string(on.gpus().size()) + " GPUs"};
    if (g.share_units <= 0 || g.share_units > quantity::whole(1).units() || g.memory < 0)
      return status{errc::invalid_argument, "malformed allocation: a card's share or memory is out of range"};
    a.gpus.push_back({g.card, quantity::from_units(g.share_units), g.memory});
  }
  return a;
}

std::vector<wire_hold> holdings_of(const reservation_table& table) {
  std::vector<wire_hold> out;
  for (auto& h : table.holdings())
    out.push_back({h.key.group, h.key.bundle, h.state == hold_state::committed, to_wire_request(h.request),
                   to_wire(h.alloc)});
  return out;
}

namespace {

// A struct, or a struct and the list of it, under their names.
template <class T>
void add_one(caf::actor_system_config& c, const std::string& name) {
  c.add_message_type<T>("tune::" + name);
}
template <class T>
void add_with_list(caf::actor_system_config& c, const std::string& name) {
  add_one<T>(c, name);
  c.add_message_type<std::vector<T>>("std::vector<tune::" + name + ">");
}

// Every struct of wire_types.hpp that travels in a message.
void add_wire_types(caf::actor_system_config& c) {
  add_with_list<wire_gpu>(c, "wire_gpu");
  add_with_list<wire_others>(c, "wire_others");
  add_with_list<wire_request>(c, "wire_request");
  add_with_list<wire_grant>(c, "wire_grant");
  add_with_list<wire_hold>(c, "wire_hold");
  add_with_list<wire_card_trial>(c, "wire_card_trial");
  add_with_list<wire_card_foreign>(c, "wire_card_foreign");
  add_with_list<wire_card_report>(c, "wire_card_report");
  add_with_list<wire_trial_host>(c, "wire_trial_host");
  add_with_list<wire_count>(c, "wire_count");
  add_with_list<wire_trial_card>(c, "wire_trial_card");
  add_with_list<wire_file>(c, "wire_file");
  add_with_list<wire_user>(c, "wire_user");
  add_with_list<foreign_process>(c, "foreign_process");
  add_one<wire_host>(c, "wire_host");
  add_one<wire_avail>(c, "wire_avail");
  add_one<wire_ad>(c, "wire_ad");
  add_one<wire_alloc>(c, "wire_alloc");
  add_one<wire_group_spec>(c, "wire_group_spec");
  add_one<wire_trial_spec>(c, "wire_trial_spec");
  add_one<wire_results>(c, "wire_results");
  add_one<wire_result>(c, "wire_result");
  add_one<wire_trial_end>(c, "wire_trial_end");
  add_one<wire_gpu_after>(c, "wire_gpu_after");
  add_one<wire_node_report>(c, "wire_node_report");
  add_one<wire_trial_started>(c, "wire_trial_started");
  add_one<wire_checkpoint>(c, "wire_checkpoint");
  add_one<wire_beside>(c, "wire_beside");
  add_one<host_usage>(c, "host_usage");
  c.add_message_type<std::vector<uint32_t>>("std::vector<uint32_t>");
  c.add_message_type<std::vector<std::string>>("std::vector<std::string>");
  c.add_message_type<std::vector<int64_t>>("std::vector<int64_t>");
}

}  // namespace

config::config(bool network) {
  add_wire_types(*this);
  // A refusal reads as its reason wherever CAF renders an error.
  add_error_category(refusal_category, [](uint8_t code, caf::atom_value category, const caf::message& context) {
    return std::string{to_string(static_cast<errc>(code))} + ": " + refusal_reason(caf::error{code, category, context});
  });
  if (network) load<caf::io::middleman>();
  set("middleman.app-identifiers", std::vector<std::string>{"libtune"});
  set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(3)});
  set("scheduler.max-threads", 2);
  // Workers that wait on a shared queue instead of polling for work: a node or head
  // that is idle uses no CPU, which trials on the same machine need. Measured on
  // 2 cores (bench_pg): as fast in one process, about twice as fast across processes.
  set("scheduler.policy", caf::atom("sharing"));
}

wire_user to_wire(const std::string& name, const user_limits& l) {
  return {name,       l.gpus ? l.gpus->units() : -1, l.cpus ? l.cpus->units() : -1, l.max_trials.value_or(-1),
          l.priority, l.weight,                      l.account};
}

user_limits limits_from_wire(const wire_user& w) {
  user_limits l;
  if (w.gpu_units >= 0) l.gpus = quantity::from_units(w.gpu_units);
  if (w.cpu_units >= 0) l.cpus = quantity::from_units(w.cpu_units);
  if (w.max_trials >= 0) l.max_trials = w.max_trials;
  l.priority = w.priority;
  l.weight = w.weight;
  l.account = w.account;
  return l;
}

caf::error refusal(errc code, std::string why) {
  return caf::error{static_cast<uint8_t>(code), refusal_category, caf::make_message(std::move(why))};
}

caf::error refusal(errc code, std::string why, caf::actor running) {
  return caf::error{static_cast<uint8_t>(code), refusal_category, caf::make_message(std::move(why), std::move(running))};
}

bool is_refusal(const caf::error& err) { return err && err.category() == refusal_category; }

errc refusal_code(const caf::error& err) { return is_refusal(err) ? static_cast<errc>(err.code()) : errc::ok; }

std::string refusal_reason(const caf::error& err) {
  if (!is_refusal(err) || err.context().size() == 0 || !err.context().match_element<std::string>(0)) return {};
  return err.context().get_as<std::string>(0);
}

caf::actor refusal_running(const caf::error& err) {
  if (!is_refusal(err) || err.context().size() < 2 || !err.context().match_element<caf::actor>(1)) return {};
  return err.context().get_as<caf::actor>(1);
}

caf::error relayed(const caf::error& err, const std::string& prefix) {
  if (!is_refusal(err)) return refusal(errc::invalid_argument, prefix + to_string(err));
  if (auto running = refusal_running(err)) return refusal(refusal_code(err), prefix + refusal_reason(err), running);
  return refusal(refusal_code(err), prefix + refusal_reason(err));
}

nlohmann::json to_json(const wire_trial_end& e) {
  nlohmann::json j{{"ok", e.ok},
                   {"exit", e.exit},
                   {"error", e.error},
                   {"stderr_tail", e.stderr_tail},
                   {"results", e.results},
                   {"stopped", e.stopped},
                   {"killed", e.killed},
                   {"gpu_audited", e.gpu_audited},
                   {"checkpoint", nullptr},
                   {"gpu_memory_peak", e.gpu_memory_peak}};
  if (e.checkpoint >= 0)
    j["checkpoint"] = {{"iteration", e.checkpoint}, {"path", e.checkpoint_path}, {"bytes", e.checkpoint_bytes},
                       {"files", e.checkpoint_files}};
  if (e.gpu_memory_quota > 0) j["gpu_memory_quota"] = e.gpu_memory_quota;
  if (e.gpu_util >= 0) j["gpu_util"] = e.gpu_util;
  if (e.over_quota) j["over_quota"] = true;
  if (!e.containment.empty()) j["containment"] = e.containment;
  if (!e.containment_error.empty()) j["containment_error"] = e.containment_error;
  if (e.host_memory >= 0) j["host_memory"] = e.host_memory;
  if (e.host_memory_peak >= 0) j["host_memory_peak"] = e.host_memory_peak;
  if (e.cpu_seconds >= 0) j["cpu_seconds"] = e.cpu_seconds;
  if (e.pids >= 0) j["pids"] = e.pids;
  if (e.oom_kills > 0) j["oom_kills"] = e.oom_kills;
  if (e.pids_refused > 0) j["pids_refused"] = e.pids_refused;
  if (e.left_behind_count > 0) j["left_behind_count"] = e.left_behind_count;
  if (!e.left_behind.empty()) j["left_behind"] = e.left_behind;
  if (auto& g = e.gpu_after_end; g.looked) {
    j["gpu_after_end"] = {{"freed", g.freed}, {"killed", g.killed}, {"waited_ms", g.waited_ms}};
    if (!g.still.empty()) j["gpu_after_end"]["still"] = g.still;
    if (!g.error.empty()) j["gpu_after_end"]["error"] = g.error;
  }
  if (e.worker_reused) j["worker_reused"] = true;
  if (e.worker_kept) j["worker_kept"] = true;
  if (e.ignored_lines > 0) {
    j["ignored_lines"] = e.ignored_lines;
    j["ignored_example"] = e.ignored_example;
  }
  return j;
}

nlohmann::json cards_json(const std::vector<wire_card_report>& cards) {
  nlohmann::json out = nlohmann::json::array();
  for (auto& c : cards) {
    nlohmann::json trials = nlohmann::json::array(), foreign = nlohmann::json::array();
    for (auto& t : c.trials) trials.push_back({{"trial", t.trial}, {"memory", t.memory}, {"owner", t.owner}});
    for (auto& f : c.foreign)
      foreign.push_back({{"pid", f.pid}, {"name", f.name}, {"memory", f.memory}, {"user", f.user}, {"beside", f.beside}});
    out.push_back({{"index", c.index},
                   {"uuid", c.uuid},
                   {"memory_used", c.memory_used},
                   {"memory_total", c.memory_total},
                   {"util", c.util},
                   {"trials", std::move(trials)},
                   {"foreign", std::move(foreign)}});
  }
  return out;
}

nlohmann::json containment_json(const wire_node_report& r) {
  return {{"kind", r.containment_kind}, {"description", r.containment_description}, {"memory", r.limits_memory},
          {"cpu", r.limits_cpu}, {"pids", r.limits_pids}};
}

nlohmann::json trial_host_json(const std::vector<wire_trial_host>& trials) {
  nlohmann::json out = nlohmann::json::object();
  for (auto& t : trials) {
    auto& j = out[t.trial] = nlohmann::json::object();
    if (t.memory >= 0) j["memory"] = t.memory;
    if (t.memory_peak >= 0) j["memory_peak"] = t.memory_peak;
    if (t.cpu_seconds >= 0) j["cpu_seconds"] = t.cpu_seconds;
    if (t.pids >= 0) j["pids"] = t.pids;
    j["owner"] = t.owner;
  }
  return out;
}

nlohmann::json to_json(const wire_trial_card& c) {
  return {{"local", c.local},          {"index", c.index}, {"uuid", c.uuid},         {"pci_bus_id", c.pci_bus_id},
          {"share", c.share},          {"memory_quota", c.memory_quota}, {"logical", c.logical}};
}

nlohmann::json to_json(const wire_gang& g) {
  return {{"rank", g.rank},           {"world_size", g.world_size}, {"local_rank", g.local_rank},
          {"local_world_size", g.local_world_size}, {"node_rank", g.node_rank}, {"nodes", g.nodes},
          {"master_addr", g.master_addr}, {"master_port", g.master_port}};
}

nlohmann::json to_json(const wire_trial_started& s) {
  nlohmann::json gpus = nlohmann::json::array();
  for (auto& c : s.gpus) gpus.push_back(to_json(c));
  nlohmann::json j{{"trial_id", s.trial_id}, {"pid", s.pid}, {"node", s.node}, {"gpus", std::move(gpus)},
                   {"trial_dir", s.trial_dir}};
  if (!s.restore_dir.empty()) j["restore_dir"] = s.restore_dir;
  if (s.gang.world_size > 0) j["worker"] = to_json(s.gang);
  return j;
}

nlohmann::json to_json(const wire_checkpoint& c) {
  return {{"iteration", c.iteration}, {"path", c.path}, {"bytes", c.bytes}, {"files", c.files}};
}

nlohmann::json to_json(const wire_beside& b) {
  return {{"pid", b.pid}, {"name", b.name}, {"memory", b.memory}, {"gpu", b.gpu},
          {"uuid", b.uuid}, {"what", b.what}, {"user", b.user}};
}

nlohmann::json to_json(const wire_result& r) {
  auto metrics = nlohmann::json::parse(r.metrics_json, nullptr, false);
  if (metrics.is_discarded()) metrics = nlohmann::json::object();
  return {{"iteration", r.iteration}, {"metrics", std::move(metrics)}, {"gpu_memory", r.gpu_memory}};
}

}  // namespace tune::wire
