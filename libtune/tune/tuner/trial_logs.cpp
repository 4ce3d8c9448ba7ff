#include "trial_logs.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "tune/core/json_text.hpp"

namespace tune {

namespace {

void flatten_numbers(const nlohmann::json& j, const std::string& prefix, std::vector<std::string>& names,
                     std::vector<double>& values) {
  for (auto& [k, v] : j.items()) {
    auto name = prefix.empty() ? k : prefix + "/" + k;
    if (v.is_object()) {
      flatten_numbers(v, name, names, values);
    } else if (v.is_number()) {
      names.push_back(std::move(name));
      values.push_back(v.get<double>());
    }
  }
}

// The configuration as TensorBoard's hyperparameters: numbers, text and booleans as they
// are, nested settings as "outer/inner", lists as their JSON text.
void flatten_hparams(const nlohmann::json& j, const std::string& prefix, std::vector<tb::hparam>& out) {
  for (auto& [k, v] : j.items()) {
    auto name = prefix.empty() ? k : prefix + "/" + k;
    if (v.is_object())
      flatten_hparams(v, name, out);
    else if (v.is_number())
      out.push_back({name, v.get<double>()});
    else if (v.is_boolean())
      out.push_back({name, v.get<bool>()});
    else if (v.is_string())
      out.push_back({name, v.get<std::string>()});
    else if (!v.is_null())
      out.push_back({name, json_text(v)});
  }
}

void append_double(std::string& out, double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec == std::errc{}) out.append(buf, end);
}

// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break.
void append_csv(std::string& out, std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) {
    out.append(text);
    return;
  }
  out += '"';
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
}

const nlohmann::json* find_flat(const nlohmann::json& j, std::string_view name) {
  if (auto it = j.find(std::string{name}); it != j.end()) return &*it;
  auto slash = name.find('/');
  if (slash == std::string_view::npos) return nullptr;
  auto it = j.find(std::string{name.substr(0, slash)});
  return it != j.end() && it->is_object() ? find_flat(*it, name.substr(slash + 1)) : nullptr;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

constexpr std::string_view auto_columns[] = {"timestamp", "training_iteration", "trial_id"};

}  // namespace

void numbers_of(const nlohmann::json& metrics, std::vector<std::string>& names, std::vector<double>& values) {
  names.clear();
  values.clear();
  if (metrics.is_object()) flatten_numbers(metrics, "", names, values);
}

struct trial_files::open_trial {
  std::string folder;
  std::unique_ptr<tb::event_writer> events;
  std::FILE* csv = nullptr;
  std::FILE* json = nullptr;
  std::vector<std::string> columns;  // the CSV's, from its header (empty: no header yet)
  std::vector<bool> own;             // a column the metrics named (not timestamp & co.)
  std::string id_json;               // the trial's id as a JSON string
  std::string line;                  // reused for each row
  std::vector<std::string_view> tags;
  ~open_trial() {
    if (csv) std::fclose(csv);
    if (json) std::fclose(json);
  }
};

trial_files::trial_files(std::string experiment_dir) : dir_(std::move(experiment_dir)), host_(host_name()) {}

trial_files::~trial_files() { flush(); }

void trial_files::broken(const std::string& trial, const std::string& what) {
  if (failed_.emplace(trial, true).second)
    warn("trial " + trial + "'s files: " + what + "; they stop here (its results are in experiment.db)");
  open_.erase(trial);
}

trial_files::open_trial* trial_files::open(const std::string& trial, double time) {
  if (failed_.count(trial)) return nullptr;
  if (auto it = open_.find(trial); it != open_.end()) return it->second.get();
  std::optional<nlohmann::json> started;  // its configuration, when it has started since
  if (auto it = starts_.find(trial); it != starts_.end()) {
    started = std::move(it->second.first);
    time = it->second.second;
    starts_.erase(it);
  }
  const nlohmann::json* config = started ? &*started : nullptr;
  namespace fs = std::filesystem;
  auto t = std::make_unique<open_trial>();
  t->folder = folder(dir_, trial);
  t->id_json = json_text(nlohmann::json(trial));
  std::error_code ec;
  fs::create_directories(t->folder, ec);
  if (ec) {
    broken(trial, "cannot make " + t->folder + ": " + ec.message());
    return nullptr;
  }
  // Its first start: no event file yet. The HParams view's session starts there once.
  bool first = true;
  for (auto& e : fs::directory_iterator(t->folder, ec))
    if (e.path().filename().string().starts_with("events.out.tfevents.")) first = false;
  auto events = tb::event_writer::open(t->folder, time, host_);
  if (!events) {
    broken(trial, events.error().message());
    return nullptr;
  }
  t->events = std::move(*events);
  if (first) links_.push_back({trial, "tensorboard", "", t->folder});
  if (config && first) {
    std::vector<tb::hparam> hparams;
    if (config->is_object()) flatten_hparams(*config, "", hparams);
    if (auto s = t->events->session_start(hparams, trial, time); !s) {
      broken(trial, s.message());
      return nullptr;
    }
    std::ofstream params(t->folder + "/params.json", std::ios::trunc);
    params << json_text(*config, 2) << "\n";
    if (!params) {
      broken(trial, "cannot write " + t->folder + "/params.json: " + std::strerror(errno));
      return nullptr;
    }
  }
  // progress.csv: its header stays what the first result made it.
  auto csv_path = t->folder + "/progress.csv";
  if (std::ifstream in{csv_path}; in) {
    std::string header;
    std::getline(in, header);
    for (size_t from = 0; !header.empty() && from <= header.size();) {
      auto comma = std::min(header.find(',', from), header.size());
      t->columns.push_back(header.substr(from, comma - from));
      from = comma + 1;
    }
    for (auto& c : t->columns)
      t->own.push_back(std::find(std::begin(auto_columns), std::end(auto_columns), c) == std::end(auto_columns));
  }
  t->csv = std::fopen(csv_path.c_str(), "ab");
  t->json = std::fopen((t->folder + "/result.json").c_str(), "ab");
  if (!t->csv || !t->json) {
    broken(trial, "cannot write in " + t->folder + ": " + std::strerror(errno));
    return nullptr;
  }
  return open_.emplace(trial, std::move(t)).first->second.get();
}

void trial_files::started(const std::string& trial, const nlohmann::json& config, double time) {
  if (!open_.count(trial)) starts_[trial] = {config, time};
}

void trial_files::result(const std::string& trial, const logged_result& r) {
  auto* t = open(trial, r.time);
  if (!t) return;
  // TensorBoard: the numbers at the iteration.
  t->tags.assign(r.names.begin(), r.names.end());
  if (auto s = t->events->scalars(t->tags, r.values, r.iteration, r.time); !s) return broken(trial, s.message());
  auto seconds = static_cast<int64_t>(std::floor(r.time));
  auto named = [&](std::string_view n) { return std::find(r.names.begin(), r.names.end(), n) != r.names.end() ||
                                                (r.parsed && r.parsed->contains(std::string{n})); };
  // result.json: {"trial_id", "training_iteration", "timestamp"} (unless the trial named
  // them itself) and its metrics.
  auto& line = t->line;
  line = "{";
  if (!named("trial_id")) line += "\"trial_id\":" + t->id_json + ",";
  if (!named("training_iteration")) line += "\"training_iteration\":" + std::to_string(r.iteration) + ",";
  if (!named("timestamp")) line += "\"timestamp\":" + std::to_string(seconds) + ",";
  auto body = r.metrics_json.size() >= 2 ? r.metrics_json.substr(1) : std::string_view{"}"};
  if (body.find_first_not_of(" \t\r\n") == body.find('}')) line.pop_back();  // an empty object
  line.append(body);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), t->json) != line.size())
    return broken(trial, "cannot write " + t->folder + "/result.json: " + std::strerror(errno));
  // progress.csv: the header from the first result.
  line.clear();
  if (t->columns.empty()) {
    if (r.parsed) {
      std::vector<std::string> names;
      std::vector<double> ignored;
      for (auto& [k, v] : r.parsed->items())
        if (!v.is_object()) names.push_back(k);
      numbers_of(*r.parsed, t->columns, ignored);  // nested numbers flattened
      for (auto& n : names)
        if (std::find(t->columns.begin(), t->columns.end(), n) == t->columns.end()) t->columns.push_back(n);
    } else {
      t->columns.assign(r.names.begin(), r.names.end());
    }
    t->own.assign(t->columns.size(), true);
    for (auto c : auto_columns)
      if (std::find(t->columns.begin(), t->columns.end(), c) == t->columns.end()) {
        t->columns.emplace_back(c);
        t->own.push_back(false);
      }
    for (size_t i = 0; i < t->columns.size(); ++i) {
      if (i) line += ',';
      append_csv(line, t->columns[i]);
    }
    line += '\n';
  }
  for (size_t i = 0; i < t->columns.size(); ++i) {
    if (i) line += ',';
    const auto& c = t->columns[i];
    if (!t->own[i]) {
      if (c == "timestamp") line += std::to_string(seconds);
      else if (c == "training_iteration") line += std::to_string(r.iteration);
      else append_csv(line, trial);
      continue;
    }
    if (r.parsed) {
      if (auto* v = find_flat(*r.parsed, c); v && !v->is_null())
        append_csv(line, v->is_string() ? v->get_ref<const std::string&>() : json_text(*v));
      continue;
    }
    for (size_t k = 0; k < r.names.size(); ++k)
      if (r.names[k] == c) {
        append_double(line, r.values[k]);
        break;
      }
  }
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), t->csv) != line.size())
    return broken(trial, "cannot write " + t->folder + "/progress.csv: " + std::strerror(errno));
}

void trial_files::ended(const std::string& trial, trial_state state, const std::string&, double time) {
  // One that never reported: its folder and session only if it is over (the HParams view
  // shows how it ended); one that will start again opens its files when it reports.
  if (!open_.count(trial) && !(finished(state) && starts_.count(trial) && open(trial, time))) {
    starts_.erase(trial);
    return;
  }
  auto it = open_.find(trial);
  if (finished(state)) {
    auto how = state == trial_state::terminated ? tb::session_status::success : tb::session_status::failure;
    if (auto s = it->second->events->session_end(how, time); !s) return broken(trial, s.message());
  }
  close(trial);
}

void trial_files::close(const std::string& trial) {
  auto it = open_.find(trial);
  if (it == open_.end()) return;
  auto& t = *it->second;
  if (auto s = t.events->flush(); !s) return broken(trial, s.message());
  for (auto* f : {&t.csv, &t.json}) {
    int rc = std::fclose(*f);
    *f = nullptr;
    if (rc != 0) return broken(trial, "cannot write in " + t.folder + ": " + std::strerror(errno));
  }
  open_.erase(it);
}

void trial_files::flush() {
  std::vector<std::pair<std::string, std::string>> failed;
  for (auto& [id, t] : open_) {
    if (auto s = t->events->flush(); !s) {
      failed.emplace_back(id, s.message());
      continue;
    }
    if (std::fflush(t->csv) != 0 || std::fflush(t->json) != 0)
      failed.emplace_back(id, "cannot write in " + t->folder + ": " + std::strerror(errno));
  }
  for (auto& [id, why] : failed) broken(id, why);
}

}  // namespace tune
