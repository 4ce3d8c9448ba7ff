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

// A CSV column: 1 for a metric's, else which of auto_columns it is ('t', 'i', 'n').
char column_kind(std::string_view c) {
  return c == "timestamp" ? 't' : c == "training_iteration" ? 'i' : c == "trial_id" ? 'n' : 1;
}

// Appends `line` to a file's buffer, written out a buffer at a time (false: it failed).
bool buffered(std::FILE* f, std::string& out, std::string_view line) {
  out.append(line);
  if (out.size() < (size_t{1} << 16)) return true;
  bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  out.clear();
  return ok;
}

bool write_out(std::FILE* f, std::string& out) {
  bool ok = out.empty() || std::fwrite(out.data(), 1, out.size(), f) == out.size();
  out.clear();
  return ok;
}

}  // namespace

void numbers_of(const nlohmann::json& metrics, std::vector<std::string>& names, std::vector<double>& values) {
  names.clear();
  values.clear();
  if (metrics.is_object()) flatten_numbers(metrics, "", names, values);
}

struct trial_files::open_trial {
  std::string folder;
  std::unique_ptr<tb::event_writer> events;
  std::FILE* csv = nullptr;   // unbuffered: written a buffer at a time
  std::FILE* json = nullptr;
  std::string csv_out, json_out;  // lines not written yet
  std::vector<std::string> columns;  // the CSV's, from its header (empty: no header yet)
  std::vector<char> own;            // a column the metrics named (1), else which of auto_columns: t(imestamp), i(teration), n(ame)
  std::string id_json;               // the trial's id as a JSON string
  std::string line;                  // reused for each row
  struct {
    bool valid = false;
    std::vector<std::string> names;     // the names it was worked out for
    std::vector<std::string> prefixes;  // TensorBoard's bytes of each before its value
    std::string head;                   // result.json's "trial_id": ..., unless the trial's own
    bool own_iteration = false, own_timestamp = false;
    std::vector<int> column_of;         // the CSV's columns: the value's index (-1: none)
  } layout;
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

// A CSV line's fields (RFC 4180: a quoted field may hold commas and doubled quotes).
static std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

trial_files::open_trial* trial_files::open(const std::string& trial, double time) {
  if (failed_.count(trial)) return nullptr;
  if (auto it = open_.find(trial); it != open_.end()) return it->second.get();
  std::optional<nlohmann::json> config;  // its configuration, when it has started since
  if (auto it = starts_.find(trial); it != starts_.end()) {
    config = std::move(it->second.first);
    time = it->second.second;
    starts_.erase(it);
  }
  auto t = std::make_unique<open_trial>();
  t->folder = folder(dir_, trial);
  t->id_json = json_text(nlohmann::json(trial));
  if (auto s = open_files(*t, trial, config ? &*config : nullptr, time); !s) {
    broken(trial, s.message());
    return nullptr;
  }
  return open_.emplace(trial, std::move(t)).first->second.get();
}

// Its folder, a new event file (the HParams view's session and params.json at its first
// start: no event file yet), and its CSV (the header it has kept) and JSON lines.
status trial_files::open_files(open_trial& t, const std::string& trial, const nlohmann::json* config, double time) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(t.folder, ec);
  if (ec) return {errc::invalid_argument, "cannot make " + t.folder + ": " + ec.message()};
  bool first = true;
  for (auto& e : fs::directory_iterator(t.folder, ec))
    if (e.path().filename().string().starts_with("events.out.tfevents.")) first = false;
  auto events = tb::event_writer::open(t.folder, time, host_);
  if (!events) return events.error();
  t.events = std::move(*events);
  if (first) links_.push_back({trial, "tensorboard", "", t.folder});
  if (config && first) {
    std::vector<tb::hparam> hparams;
    if (config->is_object()) flatten_hparams(*config, "", hparams);
    if (auto s = t.events->session_start(hparams, trial, time); !s) return s;
    std::ofstream params(t.folder + "/params.json", std::ios::trunc);
    params << json_text(*config, 2) << "\n";
    if (!params) return {errc::invalid_argument, "cannot write " + t.folder + "/params.json: " + std::strerror(errno)};
  }
  auto csv_path = t.folder + "/progress.csv";
  if (std::ifstream in{csv_path}; in) {
    std::string header;
    if (std::getline(in, header) && !header.empty()) t.columns = csv_fields(header);
    for (auto& c : t.columns) t.own.push_back(column_kind(c));
  }
  t.csv = std::fopen(csv_path.c_str(), "ab");
  t.json = std::fopen((t.folder + "/result.json").c_str(), "ab");
  if (!t.csv || !t.json) return {errc::invalid_argument, "cannot write in " + t.folder + ": " + std::strerror(errno)};
  for (auto* f : {t.csv, t.json}) std::setvbuf(f, nullptr, _IONBF, 0);
  return status::ok();
}

void trial_files::started(const std::string& trial, const nlohmann::json& config, double time) {
  if (!open_.count(trial)) starts_[trial] = {config, time};
}

// What a result's names make of its lines, worked out once per set of names (a trial's
// results name the same metrics, result after result).
void trial_files::layout_for(open_trial& t, const logged_result& r) {
  auto& l = t.layout;
  if (!r.parsed && l.valid && std::equal(l.names.begin(), l.names.end(), r.names.begin(), r.names.end())) return;
  l.names.assign(r.names.begin(), r.names.end());
  l.prefixes = tb::scalar_prefixes(l.names);
  auto named = [&](std::string_view n) {
    return std::find(r.names.begin(), r.names.end(), n) != r.names.end() || (r.parsed && r.parsed->contains(std::string{n}));
  };
  l.head.clear();  // result.json's fields before the metrics: those the trial did not name itself
  if (!named("trial_id")) l.head += "\"trial_id\":" + t.id_json + ",";
  l.own_iteration = named("training_iteration");
  l.own_timestamp = named("timestamp");
  l.column_of.clear();
  for (const auto& c : t.columns) {
    auto at = std::find(l.names.begin(), l.names.end(), c);
    l.column_of.push_back(at == l.names.end() ? -1 : static_cast<int>(at - l.names.begin()));
  }
  l.valid = !r.parsed;  // a parsed result's text values change: worked out each time
}

void trial_files::result(const std::string& trial, const logged_result& r) {
  auto* t = open(trial, r.time);
  if (!t) return;
  if (t->columns.empty()) {
    start_csv(*t, r);
    t->layout.valid = false;
  }
  layout_for(*t, r);
  auto& l = t->layout;
  // TensorBoard: the numbers at the iteration.
  if (auto s = t->events->scalars(l.prefixes, r.values, r.iteration, r.time); !s) return broken(trial, s.message());
  auto seconds = static_cast<int64_t>(std::floor(r.time));
  char num[24];
  auto whole = [&](int64_t v) { return std::string_view{num, static_cast<size_t>(std::to_chars(num, num + sizeof num, v).ptr - num)}; };
  // result.json: {"trial_id", "training_iteration", "timestamp"} (unless the trial named
  // them itself) and its metrics.
  auto& line = t->line;
  line = "{";
  line += l.head;
  if (!l.own_iteration) line.append("\"training_iteration\":").append(whole(r.iteration)) += ',';
  if (!l.own_timestamp) line.append("\"timestamp\":").append(whole(seconds)) += ',';
  auto body = r.metrics_json.size() >= 2 ? r.metrics_json.substr(1) : std::string_view{"}"};
  if (body.find_first_not_of(" \t\r\n") == body.find('}')) line.pop_back();  // an empty object
  line.append(body);
  line += '\n';
  if (!buffered(t->json, t->json_out, line))
    return broken(trial, "cannot write " + t->folder + "/result.json: " + std::strerror(errno));
  // progress.csv: a row under the header.
  line.clear();
  for (size_t i = 0; i < t->columns.size(); ++i) {
    if (i) line += ',';
    switch (t->own[i]) {
      case 't': line.append(whole(seconds)); continue;
      case 'i': line.append(whole(r.iteration)); continue;
      case 'n': append_csv(line, trial); continue;
      default: break;
    }
    if (r.parsed) {
      if (auto* v = find_flat(*r.parsed, t->columns[i]); v && !v->is_null())
        append_csv(line, v->is_string() ? v->get_ref<const std::string&>() : json_text(*v));
    } else if (l.column_of[i] >= 0) {
      append_double(line, r.values[static_cast<size_t>(l.column_of[i])]);
    }
  }
  line += '\n';
  if (!buffered(t->csv, t->csv_out, line))
    return broken(trial, "cannot write " + t->folder + "/progress.csv: " + std::strerror(errno));
}

// progress.csv's header, from its first result: its names (nested numbers flattened, then
// its other values), then timestamp, training_iteration and trial_id unless it named them.
void trial_files::start_csv(open_trial& t, const logged_result& r) {
  if (r.parsed) {
    std::vector<double> ignored;
    numbers_of(*r.parsed, t.columns, ignored);
    for (auto& [k, v] : r.parsed->items())
      if (!v.is_object() && std::find(t.columns.begin(), t.columns.end(), k) == t.columns.end()) t.columns.push_back(k);
  } else {
    t.columns.assign(r.names.begin(), r.names.end());
  }
  t.own.assign(t.columns.size(), 1);
  for (auto c : auto_columns)
    if (std::find(t.columns.begin(), t.columns.end(), c) == t.columns.end()) {
      t.columns.emplace_back(c);
      t.own.push_back(column_kind(c));
    }
  std::string header;
  for (size_t i = 0; i < t.columns.size(); ++i) {
    if (i) header += ',';
    append_csv(header, t.columns[i]);
  }
  header += '\n';
  t.csv_out += header;
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
  if (!write_out(t.csv, t.csv_out) || !write_out(t.json, t.json_out))
    return broken(trial, "cannot write in " + t.folder + ": " + std::strerror(errno));
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
    if (!write_out(t->csv, t->csv_out) || !write_out(t->json, t->json_out))
      failed.emplace_back(id, "cannot write in " + t->folder + ": " + std::strerror(errno));
  }
  for (auto& [id, why] : failed) broken(id, why);
}

// --- background_sink -------------------------------------------------------------------

struct background_sink::batch {
  enum class kind : uint8_t { start, result, end, checkpoint };
  struct op {
    kind what = kind::start;
    uint32_t trial = 0;         // index into trials
    int64_t iteration = 0;
    double time = 0;
    size_t text = 0, text_size = 0;  // into texts: metrics, config, error, folder
    size_t values = 0;               // into numbers
    trial_state state = trial_state::pending;
    std::shared_ptr<const std::vector<std::string>> names;
    std::shared_ptr<const nlohmann::json> parsed;
  };
  std::vector<op> ops;
  std::vector<std::string> trials;
  std::map<std::string, uint32_t, std::less<>> trial_index;
  std::string texts;
  std::vector<double> numbers;
  bool closing = false;
  std::string best;
  double best_time = 0;

  uint32_t trial(const std::string& id) {
    auto it = trial_index.find(id);
    if (it != trial_index.end()) return it->second;
    trials.push_back(id);
    return trial_index.emplace(id, static_cast<uint32_t>(trials.size() - 1)).first->second;
  }
  // A new op about `id`, with `t` in the texts' pool.
  op& add(kind what, const std::string& id, std::string_view t, double time = 0, int64_t iteration = 0) {
    op o;
    o.what = what;
    o.trial = trial(id);
    o.time = time;
    o.iteration = iteration;
    o.text = texts.size();
    o.text_size = t.size();
    texts.append(t);
    return ops.emplace_back(std::move(o));
  }
  size_t bytes() const { return texts.size() + numbers.size() * 8 + ops.size() * sizeof(op); }
  void clear() {
    ops.clear();
    trials.clear();
    trial_index.clear();
    texts.clear();
    numbers.clear();
  }
};

background_sink::background_sink(std::unique_ptr<trial_sink> inner)
    : inner_(std::move(inner)), filling_(std::make_unique<batch>()) {
  worker_ = std::thread([this] { run(); });
}

background_sink::~background_sink() {
  if (!filling_->ops.empty()) hand_over(true);  // what was queued is written, even without the end
  {
    std::lock_guard lock{m_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void background_sink::started(const std::string& trial, const nlohmann::json& config, double time) {
  filling_->add(batch::kind::start, trial, json_text(config), time);
}

void background_sink::result(const std::string& trial, const logged_result& r) {
  auto& b = *filling_;
  // The names, shared while a trial's results keep naming the same metrics.
  std::shared_ptr<const std::vector<std::string>> names;
  for (auto it = names_.rbegin(); it != names_.rend() && !names; ++it)
    if (std::equal((*it)->begin(), (*it)->end(), r.names.begin(), r.names.end())) names = *it;
  if (!names) {
    names = std::make_shared<const std::vector<std::string>>(r.names.begin(), r.names.end());
    if (names_.size() >= 8) names_.erase(names_.begin());
    names_.push_back(names);
  }
  auto& op = b.add(batch::kind::result, trial, r.metrics_json, r.time, r.iteration);
  op.values = b.numbers.size();
  b.numbers.insert(b.numbers.end(), r.values.begin(), r.values.end());
  op.names = std::move(names);
  if (r.parsed) op.parsed = std::make_shared<const nlohmann::json>(*r.parsed);
  if (b.bytes() > (size_t{64} << 20)) hand_over(true);
}

void background_sink::ended(const std::string& trial, trial_state state, const std::string& error, double time) {
  filling_->add(batch::kind::end, trial, error, time).state = state;
}

void background_sink::checkpoint(const std::string& trial, int64_t iteration, const std::string& folder) {
  filling_->add(batch::kind::checkpoint, trial, folder, 0, iteration);
}

// Gives the worker the filling batch, unless it has one waiting (then the batch keeps
// filling; `wait`: until it can be handed over).
void background_sink::hand_over(bool wait) {
  std::unique_lock lock{m_};
  if (handed_ && !wait) return;
  cv_.wait(lock, [&] { return !handed_; });
  handed_ = std::move(filling_);
  filling_ = std::make_unique<batch>();
  cv_.notify_all();
}

void background_sink::flush() {
  if (!filling_->ops.empty()) hand_over(false);
  std::vector<std::string> heard;
  {
    std::lock_guard lock{m_};
    heard.swap(heard_);
  }
  for (auto& w : heard) warn(std::move(w));
}

std::vector<trial_link> background_sink::take_links() {
  std::lock_guard lock{m_};
  return std::exchange(links_, {});
}

void background_sink::experiment_ended(const std::string& best, double time) {
  filling_->closing = true;
  filling_->best = best;
  filling_->best_time = time;
  hand_over(true);
  std::unique_lock lock{m_};
  cv_.wait(lock, [&] { return !handed_ && !busy_; });
  lock.unlock();
  flush();
}

void background_sink::run() {
  while (true) {
    std::unique_ptr<batch> b;
    {
      std::unique_lock lock{m_};
      cv_.wait(lock, [&] { return handed_ || stopping_; });
      if (!handed_) return;
      b = std::move(handed_);
      busy_ = true;
      cv_.notify_all();  // room for the next batch
    }
    for (auto& op : b->ops) {
      const auto& trial = b->trials[op.trial];
      std::string_view text{b->texts.data() + op.text, op.text_size};
      switch (op.what) {
        case batch::kind::start: inner_->started(trial, parse_json(text), op.time); break;
        case batch::kind::end: inner_->ended(trial, op.state, std::string{text}, op.time); break;
        case batch::kind::checkpoint: inner_->checkpoint(trial, op.iteration, std::string{text}); break;
        case batch::kind::result: {
          logged_result r;
          r.iteration = op.iteration;
          r.time = op.time;
          r.metrics_json = text;
          r.names = *op.names;
          r.values = std::span<const double>{b->numbers.data() + op.values, op.names->size()};
          r.parsed = op.parsed.get();
          inner_->result(trial, r);
          break;
        }
      }
    }
    inner_->flush();
    if (b->closing) inner_->experiment_ended(b->best, b->best_time);
    auto warnings = inner_->take_warnings();
    auto links = inner_->take_links();
    std::lock_guard lock{m_};
    for (auto& w : warnings) heard_.push_back(std::move(w));
    for (auto& l : links) links_.push_back(std::move(l));
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace tune
