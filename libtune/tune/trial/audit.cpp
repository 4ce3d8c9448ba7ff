#include "tune/trial/audit.hpp"

#include "tune/trial/cgroup.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace tune {

std::optional<process_lineage> read_lineage(int pid) {
  process_lineage l;
  int ppid = 0;
  if (pid <= 0 || !read_proc_stat(pid, ppid, l.pgid, &l.name)) return std::nullopt;
  l.cgroup = cgroup_of(pid);
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0) l.uid = st.st_uid;
  for (int hops = 0; ppid > 1 && hops < 64; ++hops) {
    l.ancestors.push_back(ppid);
    int pg = 0;
    if (!read_proc_stat(ppid, ppid, pg, nullptr)) break;
  }
  return l;
}

gpu_audit::gpu_audit(std::set<std::string> cards, std::set<int> self, lineage_fn lineage)
    : cards_(std::move(cards)), self_(std::move(self)), lineage_(std::move(lineage)) {}

void gpu_audit::add(audited_trial t) {
  auto id = t.id;
  trials_[id] = entry{std::move(t)};
}

void gpu_audit::remove(const std::string& id) { trials_.erase(id); }

const gpu_audit::entry* gpu_audit::owner(int pid, const process_lineage* lineage) const {
  for (auto& [id, e] : trials_) {
    if (e.trial.pid == pid) return &e;
    if (!lineage) continue;
    auto& cg = e.trial.cgroup;
    if (!cg.empty() && lineage->cgroup.compare(0, cg.size(), cg) == 0 &&
        (lineage->cgroup.size() == cg.size() || lineage->cgroup[cg.size()] == '/'))
      return &e;
    if (e.trial.group > 0 && lineage->pgid == e.trial.group) return &e;
    for (int a : lineage->ancestors)
      if (a == e.trial.pid || (e.trial.group > 0 && a == e.trial.group)) return &e;
  }
  return nullptr;
}

audit_result gpu_audit::check(const std::vector<gpu_card_sample>& cards) {
  audit_result r;
  for (auto& [id, e] : trials_) r.trials[id];
  std::map<std::string, std::string> wrong_card;  // trial -> the first such finding
  for (auto& card : cards) {
    for (auto& p : card.processes) {
      if (self_.count(p.pid)) continue;
      auto lineage = lineage_(p.pid);
      const entry* e = owner(p.pid, lineage ? &*lineage : nullptr);
      if (!e) {
        // The node's own helpers (its MPS daemon's server) are not someone else's.
        bool ours = lineage && std::any_of(lineage->ancestors.begin(), lineage->ancestors.end(),
                                           [&](int a) { return self_.count(a) > 0; });
        if (!ours && cards_.count(card.uuid)) {
          foreign_process f{card.uuid, card.index, p.pid, p.memory};
          if (lineage) f.name = lineage->name, f.uid = lineage->uid, f.cgroup = lineage->cgroup, f.ancestors = lineage->ancestors;
          r.foreign.push_back(std::move(f));
        }
        continue;
      }
      auto& use = r.trials[e->trial.id];
      use.pids.push_back(p.pid);
      if (p.memory > 0) {
        use.memory[card.uuid] += p.memory;
        use.total += p.memory;
      }
      if (p.sm_util >= 0) use.sm_util = std::max(0, use.sm_util) + p.sm_util;
      if (!e->trial.quota.count(card.uuid) && !wrong_card.count(e->trial.id)) {
        std::string given;
        for (auto& [uuid, q] : e->trial.quota) given += (given.empty() ? "" : ", ") + uuid;
        wrong_card[e->trial.id] = "the GPU audit found its process " + std::to_string(p.pid) +
                                  (lineage ? " (" + lineage->name + ")" : "") + " on GPU " +
                                  std::to_string(card.index) + " (" + card.uuid + "), a card it was not given (it holds " +
                                  (given.empty() ? "no card" : given) + "): killed";
      }
    }
  }
  for (auto& [id, e] : trials_) {
    auto& use = r.trials[id];
    e.peak = std::max(e.peak, use.total);
    use.peak = e.peak;
    if (e.reported) continue;
    std::string why;
    bool over_quota = false;
    if (auto w = wrong_card.find(id); w != wrong_card.end()) {
      why = w->second;
    } else {
      for (auto& [uuid, bytes] : use.memory) {
        auto q = e.trial.quota.find(uuid);
        if (q != e.trial.quota.end() && q->second > 0 && bytes > q->second) {
          why = "the GPU audit found it using " + format_bytes(bytes) + " on GPU " + uuid + ", over its quota of " +
                format_bytes(q->second) + ": killed";
          over_quota = true;
          break;
        }
      }
    }
    if (!why.empty()) {
      e.reported = true;
      r.violations.push_back({id, why, over_quota});
    }
  }
  return r;
}

}  // namespace tune
