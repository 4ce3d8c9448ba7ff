#include "client.hpp"

#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include <fstream>

#include "transport/dial.hpp"
#include "tune/core/json_text.hpp"
#include "tune/cluster/version.hpp"
#include "tune/trial/sha256.hpp"

namespace tune {

std::string describe(caf::actor_system& sys, const caf::error& err) {
  if (wire::is_refusal(err)) return wire::refusal_reason(err);
  if (err == caf::sec::request_timeout) return "no answer in time";
  if (err == caf::sec::cannot_connect_to_node) return "cannot connect (nothing listening there, or no route)";
  if (err == caf::sec::incompatible_application_ids) return "not a libtune head (another CAF application)";
  if (err == caf::sec::request_receiver_down) return "the head is gone";
  return sys.render(err);
}

std::string words(caf::actor_system& sys, const caf::error& err, const std::string& context) {
  return wire::is_refusal(err) ? wire::refusal_reason(err) : context + describe(sys, err);
}

status to_status(caf::actor_system& sys, const caf::error& err, const std::string& doing) {
  if (wire::is_refusal(err)) return {wire::refusal_code(err), wire::refusal_reason(err)};
  return {errc::not_found, doing + describe(sys, err)};
}

expected<group_info> parse_group_info(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    group_info g;
    g.id = j.at("id").get<std::string>();
    g.state = j.at("state").get<std::string>();
    g.strategy = j.at("strategy").get<std::string>();
    g.reason = j.value("reason", "");
    g.detached = j.value("detached", false);
    for (auto& b : j.at("bundles")) {
      bundle_info bi;
      bi.index = b.at("index").get<uint32_t>();
      bi.request = b.at("request").get<std::string>();
      bi.state = b.at("state").get<std::string>();
      if (b.at("node").is_string()) bi.node = b["node"].get<std::string>();
      bi.hostname = b.value("hostname", "");
      bi.host = b.value("host", "");
      if (b.contains("gpus"))
        for (auto& c : b["gpus"])
          bi.gpus.push_back({c.at("card").get<uint32_t>(), c.value("index", 0), c.value("uuid", ""),
                             c.value("pci_bus_id", ""), c.at("share").get<double>(), c.at("memory").get<int64_t>(),
                             c.value("logical", false)});
      g.bundles.push_back(std::move(bi));
    }
    return g;
  } catch (const std::exception& e) {
    return status{errc::invalid_argument, std::string{"malformed placement group description: "} + e.what()};
  }
}

expected<std::unique_ptr<cluster_client>> cluster_client::connect(caf::actor_system& sys, const std::string& host,
                                                                  uint16_t port, std::string token, ms timeout) {
  caf::scoped_actor self{sys};
  caf::actor head;
  std::string why;
  std::string where = host + ":" + std::to_string(port);
  auto d = dial(sys, host, port);
  if (!d) return status{errc::not_found, "cannot reach a libtune head at " + where + ": " + d.error().message()};
  self->request(d->to, timeout, std::move(d->msg))
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (ptr) head = caf::actor_cast<caf::actor>(ptr);
            else why = where + " is a CAF node but no libtune head listens there";
          },
          [&](caf::error& err) {
            why = "cannot reach a libtune head at " + where + ": " + connect_failure(sys, d->id, err).why;
          });
  if (!head) return status{errc::not_found, why};
  auto c = std::make_unique<cluster_client>(sys, head, std::move(token), timeout);
  c->host_ = host;
  c->port_ = port;
  return c;
}

cluster_client::cluster_client(caf::actor_system& sys, caf::actor head, std::string token, ms timeout)
    : sys_(sys), self_(sys), head_(std::move(head)), token_(std::move(token)), timeout_(timeout) {}

cluster_client::~cluster_client() {
  if (programs_) caf::anon_send_exit(programs_, caf::exit_reason::user_shutdown);
}

expected<cluster_client::created> cluster_client::create_group(const group_request& req) {
  wire::wire_group_spec spec;
  spec.id = req.id;
  spec.strategy = std::string{to_string(req.strat)};
  spec.detached = req.detached;
  for (auto& b : req.bundles) spec.bundles.push_back(wire::to_wire_request(b));
  expected<created> out = status{errc::invalid_argument, "no answer"};
  self_->request(head_, timeout_, wire::pg_create_atom::value, token_, version(), spec)
      .receive(
          [&](wire::pg_create_atom, std::string& id, std::string& state, std::string& reason) {
            out = created{std::move(id), std::move(state), std::move(reason)};
          },
          [&](caf::error& err) { out = to_status(sys_, err, "create placement group: "); });
  return out;
}

expected<group_info> cluster_client::wait_ready(const std::string& id, ms timeout) {
  std::optional<status> failed;
  // The head answers by the timeout itself; allow for the trip there and back.
  self_->request(head_, timeout + timeout_, wire::pg_wait_atom::value, token_, id, int64_t{timeout.count()})
      .receive(
          [&](wire::pg_wait_atom, bool ready, const std::string& state, const std::string& reason) {
            if (!ready)
              failed = status{state == "infeasible" ? errc::infeasible : errc::insufficient,
                              "placement group " + id + " is " + state + (reason.empty() ? "" : ": " + reason)};
          },
          [&](caf::error& err) {
            failed = to_status(sys_, err, "wait for " + id + ": ");
            if (wire::refusal_code(err) == errc::not_found)
              failed = status{errc::not_found, "placement group " + id + " is unknown: " + failed->message()};
          });
  if (failed) return *failed;
  return get_group(id);
}

status cluster_client::remove_group(const std::string& id) {
  status out{errc::not_found, "no answer"};
  self_->request(head_, timeout_, wire::pg_remove_atom::value, token_, id)
      .receive(
          [&](wire::pg_remove_atom, std::string&) { out = status::ok(); },
          [&](caf::error& err) { out = to_status(sys_, err, "remove " + id + ": "); });
  return out;
}

expected<std::string> cluster_client::get_group_json(const std::string& id) {
  expected<std::string> out = status{errc::not_found, "no answer"};
  self_->request(head_, timeout_, wire::pg_get_atom::value, token_, id)
      .receive(
          [&](wire::pg_get_atom, std::string& text) { out = std::move(text); },
          [&](caf::error& err) { out = to_status(sys_, err, "get " + id + ": "); });
  return out;
}

expected<group_info> cluster_client::get_group(const std::string& id) {
  auto text = get_group_json(id);
  if (!text) return text.error();
  return parse_group_info(*text);
}

expected<std::string> cluster_client::status_json() {
  expected<std::string> out = status{errc::not_found, "no answer"};
  self_->request(head_, timeout_, wire::status_atom::value, token_, version())
      .receive(
          [&](wire::status_atom, std::string& text) { out = std::move(text); },
          [&](caf::error& err) {
            out = wire::is_refusal(err) ? status{wire::refusal_code(err), "the head refused: " + wire::refusal_reason(err)}
                                        : to_status(sys_, err, "the head did not answer: ");
          });
  return out;
}

expected<std::string> cluster_client::rebalance() {
  expected<std::string> out = status{errc::not_found, "no answer"};
  self_->request(head_, timeout_, wire::rebalance_atom::value, token_)
      .receive(
          [&](wire::rebalance_atom, std::string& text) { out = std::move(text); },
          [&](caf::error& err) { out = to_status(sys_, err, "the head did not answer: "); });
  return out;
}

expected<std::string> cluster_client::manage_users(const std::string& op, const std::string& json) {
  expected<std::string> out = status{errc::not_found, "no answer"};
  self_->request(head_, timeout_, wire::user_atom::value, token_, op, json)
      .receive(
          [&](wire::user_atom, std::string& text) { out = std::move(text); },
          [&](caf::error& err) { out = to_status(sys_, err, "the head did not answer: "); });
  return out;
}

expected<std::string> cluster_client::drain(const std::string& node, bool on) {
  expected<std::string> out = status{errc::not_found, "no answer"};
  self_->request(head_, timeout_, wire::drain_atom::value, token_, node, on)
      .receive(
          [&](wire::drain_atom, std::string& text) { out = std::move(text); },
          [&](caf::error& err) { out = to_status(sys_, err, "the head did not answer: "); });
  return out;
}

std::vector<std::pair<std::string, std::vector<uint32_t>>> cluster_client::take_moved() {
  std::vector<std::pair<std::string, std::vector<uint32_t>>> out;
  bool more = true;
  while (more) {
    more = false;
    self_->receive(
        [&](wire::pg_moved_atom, std::string& id, std::vector<uint32_t>& bundles) {
          out.emplace_back(std::move(id), std::move(bundles));
          more = true;
        },
        caf::after(std::chrono::seconds(0)) >> [] {});
  }
  return out;
}

}  // namespace tune

namespace tune {

namespace {

// What it serves, by SHA-256: every file added with that content (the newest last).
// Files with equal content are one entry with several paths (checkpoint copies of two
// trials, or of two iterations, often hold equal files): should the newest be gone
// (a copy removed as newer ones came), the others still serve it.
struct program_server_state {
  std::map<std::string, std::vector<std::pair<std::string, uint64_t>>> files;  // sha256 -> (path, size)...
  void add(const std::string& sha, const std::string& path, uint64_t size) {
    auto& paths = files[sha];
    std::erase_if(paths, [&](const auto& p) { return p.first == path; });
    paths.emplace_back(path, size);
    if (paths.size() > 16) paths.erase(paths.begin());
  }
  static inline const char* name = "tune.programs";
};

// `length` bytes at `offset` of the newest of `paths` that still has them (the others
// are dropped); empty when none has.
std::optional<std::string> read_any(std::vector<std::pair<std::string, uint64_t>>& paths, uint64_t offset,
                                    uint32_t length) {
  while (!paths.empty()) {
    auto& [path, size] = paths.back();
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(offset));
    std::string bytes(length, '\0');
    in.read(bytes.data(), length);
    if (in && static_cast<uint32_t>(in.gcount()) == length) return bytes;
    paths.pop_back();
  }
  return std::nullopt;
}

caf::behavior program_server(caf::stateful_actor<program_server_state>* self) {
  return {
      [self](wire::program_add_atom, const std::string& path) -> caf::result<wire::program_add_atom, std::string, uint64_t> {
        auto sha = sha256_file(path);
        if (!sha) return wire::refusal(errc::not_found, sha.error().message());
        std::ifstream in(path, std::ios::binary | std::ios::ate);
        auto size = static_cast<uint64_t>(in.tellg());
        self->state.add(*sha, path, size);
        return {wire::program_add_atom::value, *sha, size};
      },
      // Files whose hashes the caller took (a working directory it scanned): served as
      // they are; a node checks each file's hash as it arrives.
      [self](wire::program_add_atom, const std::vector<std::string>& paths, const std::vector<std::string>& shas,
             const std::vector<uint64_t>& sizes) -> caf::result<wire::program_add_atom> {
        if (paths.size() != shas.size() || paths.size() != sizes.size())
          return wire::refusal(errc::invalid_argument, "paths, hashes and sizes differ in number");
        for (size_t i = 0; i < paths.size(); ++i) self->state.add(shas[i], paths[i], sizes[i]);
        return wire::program_add_atom::value;
      },
      [self](wire::program_get_atom, const std::string& sha, uint64_t offset, uint32_t length) -> caf::result<caf::message> {
        auto it = self->state.files.find(sha);
        if (it == self->state.files.end() || it->second.empty())
          return wire::refusal(errc::not_found, "no such program here");
        uint64_t size = it->second.back().second;
        if (offset > size || length > size - offset || length > (64u << 20))
          return wire::refusal(errc::invalid_argument, "range outside the program");
        auto bytes = read_any(it->second, offset, length);
        if (!bytes) {
          self->state.files.erase(it);
          return wire::refusal(errc::not_found, "the program changed on disk");
        }
        return caf::make_message(wire::program_get_atom::value, std::move(*bytes));
      },
  };
}

}  // namespace

caf::actor spawn_program_server(caf::actor_system& sys) { return sys.spawn(program_server); }

expected<program_ref> cluster_client::serve_program(const std::string& path) {
  if (!programs_) programs_ = spawn_program_server(sys_);
  expected<program_ref> out = status{errc::not_found, "no answer"};
  self_->request(programs_, timeout_, wire::program_add_atom::value, path)
      .receive(
          [&](wire::program_add_atom, std::string& sha, uint64_t size) {
            out = program_ref{std::filesystem::path(path).filename().string(), std::move(sha), size};
          },
          [&](caf::error& err) { out = to_status(sys_, err, ""); });
  return out;
}

status cluster_client::serve_files(const std::vector<std::string>& paths, const std::vector<std::string>& sha256,
                                   const std::vector<uint64_t>& sizes) {
  if (!programs_) programs_ = spawn_program_server(sys_);
  status out{errc::not_found, "no answer"};
  self_->request(programs_, timeout_, wire::program_add_atom::value, paths, sha256, sizes)
      .receive([&](wire::program_add_atom) { out = status::ok(); }, [&](caf::error& err) { out = to_status(sys_, err, ""); });
  return out;
}

expected<std::string> cluster_client::start_trial(const trial_request& req) {
  wire::wire_trial_spec spec{req.trial_id, req.group, req.bundle, req.program.name, req.program.sha256,
                             req.program.size, req.args, req.config_json, req.restore_dir, req.restore_files,
                             req.command, req.workdir.sha256, req.workdir.size, {}, req.env, req.output_patterns, req.metric};
  expected<std::string> out = status{errc::not_found, "no answer"};
  // Fetching a large program and starting the worker take longer than a plain request.
  self_->request(head_, timeout_ * 6, wire::trial_start_atom::value, token_, spec, programs_)
      .receive(
          [&](wire::trial_start_atom, wire::wire_trial_started& started, caf::actor& trial) {
            if (trial) self_->send(trial, wire::route_atom::value, uint64_t{0});  // its events come after this
            out = json_text(wire::to_json(started));
          },
          [&](caf::error& err) {
            out = wire::is_refusal(err) ? status{errc::invalid_argument, wire::refusal_reason(err)}
                                        : to_status(sys_, err, "start trial " + req.trial_id + ": ");
          });
  return out;
}

std::optional<trial_event> cluster_client::next_trial_event(ms timeout) {
  // Every message from a trial counts; every ack_every of them is acknowledged, or the
  // trial stops reading its worker (flow control, wire.hpp).
  auto counted = [&] {
    auto from = caf::actor_cast<caf::actor>(self_->current_sender());
    if (!from) return;
    auto& n = received_[from.address()];
    if (++n % wire::ack_every == 0) self_->send(from, wire::trial_ack_atom::value, n);
    if (received_.size() > 4096) received_.erase(received_.begin());  // old trials' counts
  };
  // One event from the trial that sent it, in the words of cluster_client's events.
  auto take = [&](std::string& id, const char* kind, const nlohmann::json& body) {
    counted();
    unpacked_.push_back({std::move(id), kind, json_text(body), caf::actor_cast<caf::actor>(self_->current_sender())});
  };
  if (unpacked_.empty()) {
    self_->receive(
        [&](wire::trial_started_atom, std::string& id, wire::wire_trial_started& s) { take(id, "started", wire::to_json(s)); },
        [&](wire::trial_checkpoint_atom, std::string& id, wire::wire_checkpoint& c) { take(id, "checkpoint", wire::to_json(c)); },
        [&](wire::trial_done_atom, std::string& id, std::string& message) { take(id, "done", {{"message", message}}); },
        [&](wire::trial_joined_atom, std::string& id) { take(id, "joined", nlohmann::json::object()); },
        [&](wire::trial_beside_atom, std::string& id, wire::wire_beside& b) { take(id, "foreign", wire::to_json(b)); },
        [&](wire::trial_output_atom, std::string&, std::vector<std::string>&) { counted(); },  // not asked for here
        [&](wire::trial_result_atom, std::string& id, wire::wire_result& r) { take(id, "result", wire::to_json(r)); },
        [&](wire::trial_ended_atom, std::string& id, wire::wire_trial_end& e) { take(id, "ended", wire::to_json(e)); },
        [&](wire::trial_node_atom, std::string&, caf::actor&, std::string&) { counted(); },  // checkpoints are the controller's
        // Results as columns: one "result" event each, as the trial's JSON path writes it.
        [&](wire::trial_results_atom, std::string& id, wire::wire_results& r) {
          counted();
          auto from = caf::actor_cast<caf::actor>(self_->current_sender());
          size_t k = r.names.size();
          if (!r.well_formed()) return;
          for (size_t row = 0; row < r.rows(); ++row) {
            nlohmann::json metrics = nlohmann::json::object();
            for (size_t i = 0; i < k; ++i) metrics[r.names[i]] = r.value(row * k + i);
            nlohmann::json body{{"iteration", r.iterations[row]}, {"metrics", std::move(metrics)}, {"gpu_memory", r.gpu_memory}};
            unpacked_.push_back({id, "result", json_text(body), from});
          }
        },
        caf::after(timeout) >> [] {});
  }
  if (unpacked_.empty()) return std::nullopt;
  auto out = std::move(unpacked_.front());
  unpacked_.pop_front();
  return out;
}

void cluster_client::stop_trial(const caf::actor& trial, ms grace) {
  self_->send(trial, wire::trial_stop_atom::value, int64_t{grace.count()});
}
void cluster_client::kill_trial(const caf::actor& trial) { self_->send(trial, wire::trial_kill_atom::value); }
void cluster_client::pause_trial(const caf::actor& trial) { self_->send(trial, wire::trial_pause_atom::value); }
void cluster_client::resume_trial(const caf::actor& trial) { self_->send(trial, wire::trial_resume_atom::value); }

}  // namespace tune
