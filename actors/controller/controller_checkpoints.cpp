// The controller's checkpoints of each trial: copied into the experiment folder as its
// trial reports them (every one, kept by the experiment's checkpoint rule, and any a start
// on its way restores from; one that cannot be stored is said at once), a
// standby copy of the newest staged on another node, the copy a restart restores from
// picked and checked, and a resumed experiment's copies read back.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "checkpoint_copy.hpp"
#include "tune/tuner/checkpoint_keep.hpp"
#include "controller_state.hpp"
#include "tune/core/json_text.hpp"

namespace tune {

namespace {

bool copy_checkpoint(controller_actor self, const std::string& id);

// The iterations that are always kept: the newest reported, the newest stored, and any
// a start on its way restores from.
std::set<int64_t> always_kept(const trial_record& r) {
  std::set<int64_t> out;
  if (!r.checkpoints.empty()) out.insert(std::prev(r.checkpoints.end())->first);
  if (!r.stored.empty()) out.insert(std::prev(r.stored.end())->first);
  for (auto& [at, n] : r.pinned) out.insert(at);
  return out;
}

std::vector<int64_t> stored_iterations(const trial_record& r) {
  std::vector<int64_t> out;
  for (auto& [at, c] : r.stored) out.push_back(at);
  return out;
}

}  // namespace

// The experiment's checkpoint rule applied (controller_state.hpp).
void keep_by_rule(controller_actor self, const std::string& id) {
  auto& st = self->state;
  auto& r = st.records[id];
  auto kept = checkpoints_kept(st.setup.options.checkpoints, stored_iterations(r), r.scores, always_kept(r));
  std::error_code ec;
  for (auto k = r.stored.begin(); k != r.stored.end();) {
    if (kept.count(k->first)) {
      ++k;
      continue;
    }
    std::filesystem::remove_all(k->second.dir, ec);
    r.scores.erase(k->first);
    k = r.stored.erase(k);
  }
}

namespace {

// The manifest that drops a standby copy (no files).
const std::string drop_manifest = R"({"iteration":0,"files":[]})";

// Asks `node` to drop the trial's standby copy (its answer, or a refusal, changes nothing).
void send_drop(controller_actor self, const std::string& id, const std::string& node) {
  auto& st = self->state;
  self->request(st.setup.head, st.setup.request_timeout, wire::stage_atom::value, st.setup.token, std::string{}, node,
                st.on_wire(id), drop_manifest, std::string{}, uint64_t{0}, st.setup.programs)
      .then([](wire::stage_atom, const std::string&) {}, [](caf::error&) {});
}

// A standby copy is in (or not): recorded, and the next staged should a newer copy
// have come meanwhile.
void staged(controller_actor self, const std::string& id, int64_t it, bool ok, const std::string& text) {
  auto& st = self->state;
  auto& r = st.records[id];
  r.staging = false;
  pin(self, id, it, -1);
  if (st.over) return;
  if (ok) {
    if (!r.standby_node.empty() && r.standby_node != text) send_drop(self, id, r.standby_node);  // the one before
    r.standby_node = text;
    r.standby_iteration = it;
    r.standby_why.clear();
    (void)st.setup.store->add_event(id, "standby", {{"iteration", it}, {"node", text}});
  } else {
    r.standby_tried = it;  // not this copy again: the next one is tried
    if (text != r.standby_why) {
      r.standby_why = text;
      (void)st.setup.store->add_event(id, "standby_failed", {{"iteration", it}, {"error", text}});
    }
  }
  stage_checkpoint(self, id);
}

// A copy that could not be stored: said on the terminal and in the store at once; the
// trial's error (at its end) when it leaves the trial with no stored checkpoint at all.
void store_failed(controller_actor self, const std::string& id, int64_t it, const std::string& dest,
                  const std::string& why) {
  auto& st = self->state;
  auto& r = st.records[id];
  (void)st.setup.store->add_event(id, "checkpoint_copy_failed", {{"iteration", it}, {"dir", dest}, {"error", why}});
  std::string left = r.stored.empty() ? "it has no stored checkpoint"
                                      : "its newest stored checkpoint is iteration " +
                                            std::to_string(std::prev(r.stored.end())->first);
  if (why != r.store_failed)
    std::cerr << "tune: warning: " << id << ": its checkpoint of iteration " << it << " could not be stored in "
              << dest << ": " << why << " (" << left << ")\n";
  r.store_failed = why;
  // Judged once no copy of its is waiting: a newer one reported meanwhile may be stored.
  if (!r.stored.empty() || !r.lost_all.empty() || !r.to_copy.empty() || st.over) return;
  auto why_all = "its checkpoint of iteration " + std::to_string(it) + " could not be stored (" + why +
                 ") and it has no other: free space or fix the permissions of " + dest;
  r.lost_all = why_all;
  // Running: stopped now, its end is its error; ended already: its error now.
  auto& engine = *st.setup.engine;
  auto t = engine.trials().find(id);
  if (t == engine.trials().end()) return;
  if (t->second.state == trial_state::running) {
    auto more = engine.on_decision(id, engine_action::kind::stop, why_all);
    if (!more) return finish(self, more.error());
    return act(self, std::move(*more));
  }
  if (engine.fail_ended(id, why_all)) {
    (void)st.setup.store->update_trial(id, trial_state::error, why_all);
    std::cerr << "tune: " << id << ": error: " << why_all << "\n";
  }
}

// A copy is done (or failed): kept by the checkpoint rule, and the next one started.
void copied(controller_actor self, const std::string& id, int64_t it, const std::string& dest, bool ok,
            const std::string& text, uint64_t bytes) {
  auto& st = self->state;
  --st.copies;
  auto& r = st.records[id];
  r.copying = false;
  if (!ok) {
    store_failed(self, id, it, dest, text);
  } else {
    auto m = nlohmann::json::parse(text, nullptr, false);
    r.stored[it] = {dest, m};
    r.store_failed.clear();
    r.lost_all.clear();  // it has a checkpoint now
    for (auto& s : st.sinks) s->checkpoint(id, it, dest);  // a tracker's artifact, when asked for
    keep_by_rule(self, id);
    (void)st.setup.store->add_event(id, "checkpoint_stored",
                                    {{"iteration", it}, {"bytes", bytes}, {"files", m.value("files", nlohmann::json::array()).size()},
                                     {"seconds", m.value("seconds", 0.0)}, {"dir", dest}});
    stage_checkpoint(self, id);
  }
  if (st.over) return;
  if (copy_checkpoint(self, id)) return;
  advance(self);  // the experiment may have waited for this copy
}

// Copies a trial's reported checkpoints into the experiment folder, one per trial at a
// time, the newest first (a restart restores from it); none is skipped, but one the
// checkpoint rule would remove at once beside those stored is not copied.
bool copy_checkpoint(controller_actor self, const std::string& id) {
  auto& st = self->state;
  auto& r = st.records[id];
  if (r.copying) return true;
  while (!r.to_copy.empty()) {
    int64_t it = *std::prev(r.to_copy.end());
    r.to_copy.erase(it);
    auto c = r.checkpoints.find(it);
    if (c == r.checkpoints.end() || !c->second.server) continue;
    if (checkpoint_needless(st.setup.options.checkpoints, it, stored_iterations(r), r.scores, always_kept(r))) {
      r.scores.erase(it);
      continue;
    }
    r.copying = true;
    ++st.copies;
    auto dest = st.setup.store->checkpoint_dir(id) + "/" + std::to_string(it);
    self->request(st.copier, caf::infinite, ckpt_copy_atom::value, st.on_wire(id), it, c->second.path, c->second.server,
                  dest, c->second.access)
        .then([self, id, it, dest](ckpt_copy_atom, const std::string& text,
                                   uint64_t bytes) { copied(self, id, it, dest, true, text, bytes); },
              [self, id, it, dest](caf::error& err) {
                copied(self, id, it, dest, false, words(self->system(), err, ""), 0);
              });
    return true;
  }
  return false;
}

}  // namespace

void stage_checkpoint(controller_actor self, const std::string& id) {
  auto& st = self->state;
  auto& r = st.records[id];
  auto* t = st.table.find(id);
  if (st.over || !st.setup.options.standby_copies || r.staging || r.stored.empty() || !t || t->group.empty()) return;
  auto newest = std::prev(r.stored.end());
  int64_t it = newest->first;
  if ((it <= r.standby_iteration && !r.standby_node.empty()) || it <= r.standby_tried) return;
  auto files = newest->second.manifest.value("files", nlohmann::json::array());
  std::vector<std::string> paths, shas;
  std::vector<uint64_t> sizes;
  for (auto& f : files) {
    if (!f.is_object() || !f.contains("name") || !f.contains("sha256") || !f.contains("size")) return;
    paths.push_back(newest->second.dir + "/" + f["name"].get<std::string>());
    shas.push_back(f["sha256"].get<std::string>());
    sizes.push_back(f["size"].get<uint64_t>());
  }
  r.staging = true;
  pin(self, id, it, +1);  // kept while the node fetches it
  auto manifest = json_text(nlohmann::json{{"iteration", it}, {"files", files}});
  auto& opt = st.setup.options;
  auto program = opt.command.empty() ? opt.program : program_ref{};
  auto group = t->group;
  // Its files as this process wrote and hashed them (the node checks each as it comes).
  self->request(st.setup.programs, st.setup.request_timeout, wire::program_add_atom::value, paths, shas, sizes)
      .then(
          [self, id, it, manifest, program, group](wire::program_add_atom) {
            auto& st = self->state;
            if (st.over) return staged(self, id, it, false, "the experiment is over");
            self->request(st.setup.head, std::chrono::minutes(2), wire::stage_atom::value, st.setup.token, group,
                          std::string{}, st.on_wire(id), manifest, program.sha256, program.size, st.setup.programs)
                .then([self, id, it](wire::stage_atom, const std::string& node) { staged(self, id, it, true, node); },
                      [self, id, it](caf::error& err) { staged(self, id, it, false, describe(self->system(), err)); });
          },
          [self, id, it](caf::error& err) { staged(self, id, it, false, describe(self->system(), err)); });
}

void drop_standby(controller_actor self, const std::string& id) {
  auto& st = self->state;
  auto r = st.records.find(id);
  if (r == st.records.end() || r->second.standby_node.empty()) return;
  send_drop(self, id, r->second.standby_node);
  r->second.standby_node.clear();
  r->second.standby_iteration = -1;
}

void pin(controller_actor self, const std::string& trial, int64_t at, int by) {
  if (at < 0) return;
  auto& pinned = self->state.records[trial].pinned;
  if ((pinned[at] += by) > 0) return;
  pinned.erase(at);
  keep_by_rule(self, trial);  // what the pin kept may go now
}

void pick_copy(controller_actor self, std::string trial, int64_t iteration,
               std::function<void(std::string, int64_t)> then) {
  auto& stored = self->state.records[trial].stored;
  auto it = stored.upper_bound(iteration);
  if (it == stored.begin()) return then("", -1);
  --it;
  int64_t at = it->first;
  pin(self, trial, at, +1);  // kept while it is checked and while the start fetches it
  nlohmann::json m{{"iteration", at}, {"files", it->second.manifest.value("files", nlohmann::json::array())}};
  auto text = json_text(m);
  auto stat = json_text(it->second.manifest.value("stat", nlohmann::json::object()));
  self->request(self->state.copier, caf::infinite, ckpt_check_atom::value, it->second.dir, text, stat)
      .then(
          [text, at, then](ckpt_check_atom) { then(text, at); },
          [self, trial, at, then](caf::error& err) {
            auto& st = self->state;
            pin(self, trial, at, -1);
            if (!wire::is_refusal(err)) return then("", -1);
            auto why = wire::refusal_reason(err);
            (void)st.setup.store->add_event(trial, "checkpoint_corrupt", {{"iteration", at}, {"error", why}});
            st.records[trial].stored.erase(at);
            pick_copy(self, trial, at - 1, then);  // the one before it
          });
}

void on_checkpoint(controller_actor self, const std::string& id, const wire::wire_checkpoint& c) {
  auto& st = self->state;
  auto& r = st.records[id];
  int64_t it = c.iteration;
  r.checkpoints[it] = {c.path, r.node_actor, r.access};
  st.setup.engine->on_checkpoint(id, it);
  (void)st.setup.store->add_event(id, "checkpoint", wire::to_json(c));
  if (r.node_actor) {
    r.to_copy.insert(it);
    (void)copy_checkpoint(self, id);
  }
}

void load_copies(controller_actor self) {
  namespace fs = std::filesystem;
  auto& st = self->state;
  std::error_code ec;
  for (auto& [id, t] : st.setup.engine->trials()) {
    auto dir = st.setup.store->checkpoint_dir(id);
    for (auto& c : fs::directory_iterator(dir, ec)) {
      if (c.path().extension() == ".part") {
        fs::remove_all(c.path(), ec);
        continue;
      }
      std::ifstream in(c.path() / "MANIFEST.json");
      auto m = nlohmann::json::parse(in, nullptr, false);
      if (!m.is_object() || !m.contains("iteration") || !m["iteration"].is_number_integer() || !m.contains("files")) continue;
      st.records[id].stored[m["iteration"].get<int64_t>()] = {c.path().string(), m};
    }
  }
}

}  // namespace tune
