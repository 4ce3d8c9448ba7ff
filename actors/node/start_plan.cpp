#include "start_plan.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tune/trial/command.hpp"
#include "tune/trial/paths.hpp"
#include "tune/trial/sha256.hpp"

namespace tune {

namespace {

bool file_entry_ok(const nlohmann::json& f) {
  return f.is_object() && f.contains("name") && f["name"].is_string() && f.contains("sha256") && f["sha256"].is_string() &&
         is_sha256_hex(f["sha256"].get<std::string>()) && f.contains("size") && f["size"].is_number_unsigned();
}

bool bad_trial_id(const std::string& id) {
  return id.empty() || id.find_first_of("/\\ \t\n") != std::string::npos || id[0] == '.';
}

// The reason of a refusal without the node's name in front (the node's log is its own).
std::string reason_of(const std::string& answer, const std::string& node) {
  auto prefix = "node " + node + ": ";
  return answer.rfind(prefix, 0) == 0 ? answer.substr(prefix.size()) : answer;
}

// A program trial's own checks: its environment and its working directory.
std::string check_program_trial(const wire::wire_trial_spec& spec, const start_facts& facts) {
  for (auto& kv : spec.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) return "the trial's environment: \"" + kv + "\" is not NAME=VALUE";
    if (auto s = check_env_name(kv.substr(0, eq)); !s) return "the trial's environment: " + s.message();
  }
  if (!spec.workdir_sha256.empty() && !is_sha256_hex(spec.workdir_sha256))
    return "the working directory's SHA-256 is not 64 hex digits";
  if (!spec.workdir_path.empty()) {
    if (!spec.workdir_sha256.empty()) return "a working directory is both shipped and run in place";
    if (!facts.in_place) return facts.in_place.message();
  }
  return "";
}

}  // namespace

expected<restore_set> parse_restore_set(const std::string& text) {
  auto m = nlohmann::json::parse(text, nullptr, false);
  if (!m.is_object() || !m.contains("files") || !m["files"].is_array() || !m.contains("iteration") ||
      !m["iteration"].is_number_integer())
    return status{errc::invalid_argument, "the checkpoint to restore is not a manifest"};
  restore_set out;
  out.iteration = m["iteration"].get<int64_t>();
  for (auto& f : m["files"]) {
    if (!file_entry_ok(f)) return status{errc::invalid_argument, "the checkpoint to restore has a malformed file entry"};
    auto name = f["name"].get<std::string>();
    if (!stays_inside(name)) return status{errc::invalid_argument, "the checkpoint to restore names a file outside it: " + name};
    out.files.push_back({name, f["sha256"].get<std::string>(), f["size"].get<uint64_t>()});
  }
  return out;
}

const char* to_string(start_step s) {
  switch (s) {
    case start_step::fetching: return "fetching";
    case start_step::waiting: return "waiting";
    case start_step::restoring: return "restoring";
    case start_step::spawning: return "spawning";
  }
  return "?";
}

// The checks of a start, in the order the node has always made them: the first that
// fails is the answer (whole: the node's name in front); `running` the trial's actor
// when it runs here already.
std::string start_plan::check(const wire::wire_trial_spec& spec, const bundle_key& key, const start_facts& facts,
                              trial_handle& running) const {
  if (!facts.from_head) return node_says("trials start only through the head this node joined");
  if (!facts.has_work_dir) return node_says("this node runs no trials (it has no work folder)");
  if (bad_trial_id(spec.trial_id)) return node_says("bad trial id \"" + spec.trial_id + "\": no slashes, spaces or leading dot");
  if (auto t = trials_.find(spec.trial_id); t != trials_.end() && !t->second.ending) {
    running = t->second.actor;  // not started again; the answer names the actor that runs it (wire.hpp)
    return node_says("trial " + spec.trial_id + " already runs here");
  }
  if (!facts.account) return facts.account.message();
  auto* hold = table_.find(key);
  if (!hold || hold->state != hold_state::committed)
    return node_says("it holds no committed bundle " + std::to_string(key.bundle) + " of group " + spec.group);
  bool program_trial = !spec.command.empty();
  if (!program_trial && !is_sha256_hex(spec.program_sha256)) return node_says("the program's SHA-256 is not 64 hex digits");
  if (program_trial)
    if (auto why = check_program_trial(spec, facts); !why.empty()) return node_says(why);
  if (!spec.restore_dir.empty() && !facts.restore_local && spec.restore_files.empty())
    return node_says("restore folder " + spec.restore_dir + " is not a trial's checkpoint on this node");
  if (!facts.restore_local && !spec.restore_files.empty()) {
    auto m = parse_restore_set(spec.restore_files);
    if (!m) return node_says(m.error().message());
    if (!facts.has_server) return node_says("the checkpoint to restore is not on this node and nobody serves it");
  }
  return "";
}

start_id start_plan::begin(const wire::wire_trial_spec& spec, const bundle_key& key, const start_facts& facts) {
  auto id = ++next_;
  trial_handle running = 0;
  if (auto answer = check(spec, key, facts, running); !answer.empty()) {
    out_.push_back(starting::refuse{id, answer, running});
    return id;
  }
  // Where it starts from: a checkpoint folder of this node's (restore_dir), else a copy
  // the client serves (restore_files, copied into the trial's folder), else afresh.
  auto& s = starts_[id];
  s.spec = spec;
  s.key = key;
  if (!facts.restore_local) {
    s.spec.restore_dir.clear();
    if (!spec.restore_files.empty()) s.restore = *parse_restore_set(spec.restore_files);
  }
  bool program_trial = !spec.command.empty();
  if (program_trial && spec.workdir_sha256.empty()) {
    go_on(id, s);
  } else if (program_trial) {
    s.fetched = "its working directory";
    out_.push_back(starting::fetch_workdir{id});
  } else {
    s.fetched = "its program";
    out_.push_back(starting::fetch_program{id});
  }
  return id;
}

// A start goes on after a wait: the earlier process of its trial still ending (it waits
// again), its bundle gone or its trial started meanwhile (refused), a checkpoint file to
// copy, or its process to start.
void start_plan::go_on(start_id id, start& s) {
  auto& trial = s.spec.trial_id;
  auto old = trials_.find(trial);
  if (old != trials_.end() && old->second.ending) {
    s.step = start_step::waiting;
    out_.push_back(starting::say{"trial " + trial + " starts once its earlier process, being killed, has ended"});
    return;
  }
  auto* now = table_.find(s.key);
  if (!now || now->state != hold_state::committed) {
    auto waited = s.fetched.empty() ? std::string{"it waited for its earlier process to end"} : s.fetched + " was fetched";
    // Its trial may run here through another start: the answer names it, unless the
    // bundle is only prepared again (another group's attempt).
    bool runs = old != trials_.end() && !now;
    return refuse(id, node_says("bundle " + std::to_string(s.key.bundle) + " of group " + s.spec.group + " was released while " + waited),
                  runs ? old->second.actor : 0, true);
  }
  if (old != trials_.end()) return refuse(id, node_says("trial " + trial + " already runs here"), old->second.actor, true);
  // Two starts of one trial (a head's start made again) never copy into one folder.
  if (starting_elsewhere(id, trial)) return refuse(id, node_says("trial " + trial + " is being started here already"), 0, true);
  if (!s.restore.files.empty()) {
    auto file = s.restore.files.back();
    s.restore.files.pop_back();
    s.step = start_step::restoring;
    s.spec.restore_dir = work_dir_ + "/trials/" + trial + "/restore/" + std::to_string(s.restore.iteration);
    out_.push_back(starting::restore{id, s.spec.restore_dir, std::move(file)});
    return;
  }
  s.step = start_step::spawning;
  out_.push_back(starting::spawn{id});
}

void start_plan::refuse(start_id id, const std::string& answer, trial_handle running, bool logged) {
  auto it = starts_.find(id);
  if (it == starts_.end()) return;
  if (logged) out_.push_back(starting::say{"trial " + it->second.spec.trial_id + " not started: " + reason_of(answer, node_)});
  out_.push_back(starting::refuse{id, answer, running});
  starts_.erase(it);
}

void start_plan::on_fetched(start_id id, const status& got) {
  auto it = starts_.find(id);
  if (it == starts_.end() || it->second.step != start_step::fetching) return;
  if (!got) return refuse(id, got.message(), 0, true);
  go_on(id, it->second);
}

void start_plan::on_restored(start_id id, const status& got) {
  auto it = starts_.find(id);
  if (it == starts_.end() || it->second.step != start_step::restoring) return;
  if (!got) return refuse(id, got.message(), 0, true);
  it->second.fetched = "its checkpoint";
  go_on(id, it->second);
}

void start_plan::on_spawned(start_id id, trial_handle actor) {
  auto it = starts_.find(id);
  if (it == starts_.end() || it->second.step != start_step::spawning) return;
  trials_[it->second.spec.trial_id] = {actor, it->second.key, false};
  starts_.erase(it);
}

void start_plan::on_failed(start_id id, const std::string& answer) {
  auto it = starts_.find(id);
  if (it == starts_.end() || it->second.step != start_step::spawning) return;
  refuse(id, answer, 0, true);
}

void start_plan::on_released(const bundle_key& key) {
  for (auto& [id, t] : trials_)
    if (t.key == key && !t.ending) {
      t.ending = true;
      out_.push_back(starting::say{"trial " + id + " killed: the head released its bundle " + key.to_string()});
      out_.push_back(starting::release{t.actor, "killed on node " + node_ + ": the head released its bundle " + key.to_string() +
                                                    " (its placement group was removed or placed elsewhere)"});
    }
}

bool start_plan::starting_elsewhere(start_id id, const std::string& trial) const {
  return std::any_of(starts_.begin(), starts_.end(), [&](const auto& s) {
    return s.first != id && s.second.spec.trial_id == trial &&
           (s.second.step == start_step::restoring || s.second.step == start_step::spawning);
  });
}

std::optional<std::string> start_plan::on_ended(trial_handle actor) {
  auto it = std::find_if(trials_.begin(), trials_.end(), [&](const auto& t) { return t.second.actor == actor; });
  if (it == trials_.end()) return std::nullopt;
  auto trial = it->first;
  trials_.erase(it);
  std::vector<start_id> waiting;
  for (auto& [id, s] : starts_)
    if (s.step == start_step::waiting && s.spec.trial_id == trial) waiting.push_back(id);
  for (auto id : waiting)
    if (auto s = starts_.find(id); s != starts_.end()) go_on(id, s->second);
  return trial;
}

const start_plan::start* start_plan::find(start_id id) const {
  auto it = starts_.find(id);
  return it == starts_.end() ? nullptr : &it->second;
}

const start_plan::running* start_plan::trial(const std::string& id) const {
  auto it = trials_.find(id);
  return it == trials_.end() ? nullptr : &it->second;
}

}  // namespace tune
