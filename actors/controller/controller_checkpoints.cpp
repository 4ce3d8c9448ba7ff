// The controller's checkpoints of each trial: copied into the experiment folder as its
// trial reports them (the two newest kept, and any a start on its way restores from), a
// standby copy of the newest staged on another node, the copy a restart restores from
// picked and checked, and a resumed experiment's copies read back.
#include <filesystem>
#include <fstream>

#include "checkpoint_copy.hpp"
#include "controller_state.hpp"
#include "tune/core/json_text.hpp"

namespace tune {

namespace {

void copy_checkpoint(controller_actor self, const std::string& id);

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

// A copy is done (or failed): kept (the two newest of a trial: the older one is the
// fallback should the newer be found corrupt), and the next one started.
void copied(controller_actor self, const std::string& id, int64_t it, const std::string& dest, bool ok,
            const std::string& text, uint64_t bytes) {
  auto& st = self->state;
  --st.copies;
  auto& r = st.records[id];
  r.copying = false;
  if (!ok) {
    (void)st.setup.store->add_event(id, "checkpoint_copy_failed", {{"iteration", it}, {"error", text}});
  } else {
    auto m = nlohmann::json::parse(text, nullptr, false);
    r.stored[it] = {dest, m};
    for (auto& s : st.sinks) s->checkpoint(id, it, dest);  // a tracker's artifact, when asked for
    // Beyond the two newest, copies go, but not one a start on its way restores from
    // (its node is fetching its files).
    std::error_code ec;
    for (auto k = r.stored.begin(); r.stored.size() > 2 && k != std::prev(r.stored.end(), 2);) {
      if (r.pinned.count(k->first)) {
        ++k;
        continue;
      }
      std::filesystem::remove_all(k->second.dir, ec);
      k = r.stored.erase(k);
    }
    (void)st.setup.store->add_event(id, "checkpoint_stored",
                                    {{"iteration", it}, {"bytes", bytes}, {"files", m.value("files", nlohmann::json::array()).size()},
                                     {"seconds", m.value("seconds", 0.0)}, {"dir", dest}});
    stage_checkpoint(self, id);
  }
  if (st.over) return;
  if (r.copy_next > it) return copy_checkpoint(self, id);
  advance(self);  // the experiment may have waited for this copy
}

// Copies a trial's newest reported checkpoint into the experiment folder (older ones
// not copied yet are skipped), one copy per trial at a time.
void copy_checkpoint(controller_actor self, const std::string& id) {
  auto& st = self->state;
  auto& r = st.records[id];
  auto c = r.checkpoints.find(r.copy_next);
  if (c == r.checkpoints.end() || !c->second.server || r.copying) return;
  r.copying = true;
  ++st.copies;
  int64_t it = c->first;
  auto dest = st.setup.store->checkpoint_dir(id) + "/" + std::to_string(it);
  self->request(st.copier, caf::infinite, ckpt_copy_atom::value, st.on_wire(id), it, c->second.path, c->second.server, dest,
                c->second.access)
      .then([self, id, it, dest](ckpt_copy_atom, const std::string& text,
                                 uint64_t bytes) { copied(self, id, it, dest, true, text, bytes); },
            [self, id, it, dest](caf::error& err) {
              copied(self, id, it, dest, false, words(self->system(), err, ""), 0);
            });
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
  if ((pinned[at] += by) <= 0) pinned.erase(at);
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
  if (r.node_actor && it > r.copy_next) {
    r.copy_next = it;
    copy_checkpoint(self, id);
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
