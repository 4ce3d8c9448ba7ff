#include "tune/core/resource_set.hpp"

#include <algorithm>
#include <cassert>
#include <cctype>
#include <nlohmann/json.hpp>

#include "tune/core/json_text.hpp"

namespace tune {

namespace {

bool is_memory_name(std::string_view n) {
  return n == resource_names::memory || n == resource_names::gpu_memory;
}

std::string lower(std::string_view s) {
  std::string out{s};
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Spellings people use for the built-in resources, mapped to ours.
std::string_view builtin_alias(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> aliases[] = {
      {"cpu", "cpu"},          {"cpus", "cpu"},          {"num_cpus", "cpu"},
      {"gpu", "gpu"},          {"gpus", "gpu"},          {"num_gpus", "gpu"},
      {"memory", "memory"},    {"mem", "memory"},        {"ram", "memory"},
      {"gpu_memory", "gpu_memory"}, {"gpu_mem", "gpu_memory"}, {"vram", "gpu_memory"}};
  auto l = lower(name);
  for (auto& [alias, real] : aliases)
    if (l == alias) return real;
  return {};
}

}  // namespace

status check_resource_name(std::string_view name) {
  auto shown = '\'' + std::string{name} + '\'';
  if (name.empty()) return {errc::invalid_argument, "a resource name is empty; name it, e.g. \"tpu\""};
  if (name.size() > 64)
    return {errc::invalid_argument, "the resource name " + shown + " is longer than 64 characters"};
  auto alias = builtin_alias(name);
  if (!alias.empty() && alias != name)
    return {errc::invalid_argument, "unknown resource " + shown + "; did you mean '" +
                                        std::string{alias} + "'?"};
  auto first = static_cast<unsigned char>(name.front());
  if (!(std::isalpha(first) || first == '_'))
    return {errc::invalid_argument, "the resource name " + shown +
                                        " must start with a letter or '_'"};
  for (char ch : name) {
    auto c = static_cast<unsigned char>(ch);
    if (!(std::isalnum(c) || c == '_' || c == '.' || c == ':' || c == '/' || c == '-'))
      return {errc::invalid_argument, "the resource name " + shown +
                                          " may hold only letters, digits and _.:/-"};
  }
  return status::ok();
}

resource_set& resource_set::set_custom(std::string_view name, quantity q) {
  assert(check_resource_name(name).is_ok() && builtin_alias(name).empty());
  auto it = std::lower_bound(custom_.begin(), custom_.end(), name,
                             [](const auto& e, std::string_view n) { return e.first < n; });
  if (it != custom_.end() && it->first == name) {
    if (q.is_zero()) custom_.erase(it);
    else it->second = q;
  } else if (!q.is_zero()) {
    custom_.emplace(it, std::string{name}, q);
  }
  return *this;
}

template <class Bytes, class Amount>
status resource_set::assign(std::string_view name, Bytes bytes, Amount amount) {
  if (auto st = check_resource_name(name); !st) return st;
  if (is_memory_name(name)) {
    auto b = bytes();
    if (!b) return b.error();
    (name == resource_names::memory ? memory_ : gpu_memory_) = *b;
    return status::ok();
  }
  auto q = amount();
  if (!q) return q.error();
  if (name == resource_names::cpu) cpu_ = *q;
  else if (name == resource_names::gpu) gpu_ = *q;
  else set_custom(name, *q);
  return status::ok();
}

status resource_set::set(std::string_view name, double amount) {
  return assign(name, [&] { return bytes_from_double(amount, name); },
                [&] { return quantity::from_double(amount, name); });
}

status resource_set::set(std::string_view name, std::string_view text) {
  return assign(name, [&] { return parse_bytes(text, name); },
                [&] { return quantity::parse(text, name); });
}

expected<resource_set> resource_set::make(
    std::initializer_list<std::pair<std::string_view, double>> amounts) {
  resource_set r;
  for (auto& [name, amount] : amounts)
    if (auto st = r.set(name, amount); !st) return st;
  return r;
}

expected<resource_set> resource_set::from_json(std::string_view text) {
  auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    return status{errc::invalid_argument,
                  "resources are not valid JSON: '" + std::string{text} +
                      "'; write them like {\"cpu\": 4, \"gpu\": 0.5}"};
  if (!doc.is_object())
    return status{errc::invalid_argument,
                  "resources must be a JSON object like {\"cpu\": 4, \"gpu\": 0.5}, not '" +
                      std::string{text} + "'"};
  resource_set r;
  for (auto& [name, value] : doc.items()) {
    status st;
    if (value.is_number()) st = r.set(name, value.get<double>());
    else if (value.is_string()) st = r.set(name, value.get<std::string>());
    else
      st = {errc::invalid_argument, "the amount of " + name + " (" + json_text(value) +
                                        ") is not a number; give a number such as 0.5 or 2"};
    if (!st) return st;
  }
  return r;
}

quantity resource_set::custom(std::string_view name) const {
  auto it = std::lower_bound(custom_.begin(), custom_.end(), name,
                             [](const auto& e, std::string_view n) { return e.first < n; });
  return it != custom_.end() && it->first == name ? it->second : quantity{};
}

bool resource_set::empty() const {
  return cpu_.is_zero() && gpu_.is_zero() && memory_ == 0 && gpu_memory_ == 0 && custom_.empty();
}

std::string resource_set::first_negative() const {
  if (cpu_ < quantity{}) return "cpu";
  if (gpu_ < quantity{}) return "gpu";
  if (memory_ < 0) return "memory";
  if (gpu_memory_ < 0) return "gpu_memory";
  for (auto& [name, q] : custom_)
    if (q < quantity{}) return name;
  return {};
}

bool resource_set::host_fits_in(const resource_set& o) const {
  if (cpu_ > o.cpu_ || memory_ > o.memory_) return false;
  // Both lists are sorted: one merge pass.
  auto it = o.custom_.begin();
  for (auto& [name, q] : custom_) {
    while (it != o.custom_.end() && it->first < name) ++it;
    if (it == o.custom_.end() || it->first != name || q > it->second) return false;
  }
  return true;
}

bool resource_set::fits_in(const resource_set& o) const {
  return gpu_ <= o.gpu_ && gpu_memory_ <= o.gpu_memory_ && host_fits_in(o);
}

namespace {
template <class Op>
void merge_custom(resource_set::custom_list& mine, const resource_set::custom_list& theirs, Op op) {
  resource_set::custom_list out;
  out.reserve(mine.size() + theirs.size());
  auto a = mine.cbegin();
  auto b = theirs.cbegin();
  while (a != mine.cend() || b != theirs.cend()) {
    if (b == theirs.cend() || (a != mine.cend() && a->first < b->first)) {
      out.push_back(*a++);
    } else if (a == mine.cend() || b->first < a->first) {
      out.emplace_back(b->first, op(quantity{}, b->second));
      ++b;
    } else {
      out.emplace_back(a->first, op(a->second, b->second));
      ++a, ++b;
    }
    if (out.back().second.is_zero()) out.pop_back();
  }
  mine = std::move(out);
}
}  // namespace

resource_set& resource_set::operator+=(const resource_set& o) {
  cpu_ += o.cpu_; gpu_ += o.gpu_; memory_ += o.memory_; gpu_memory_ += o.gpu_memory_;
  if (!o.custom_.empty()) merge_custom(custom_, o.custom_, [](quantity a, quantity b) { return a + b; });
  return *this;
}

resource_set& resource_set::operator-=(const resource_set& o) {
  cpu_ -= o.cpu_; gpu_ -= o.gpu_; memory_ -= o.memory_; gpu_memory_ -= o.gpu_memory_;
  if (!o.custom_.empty()) merge_custom(custom_, o.custom_, [](quantity a, quantity b) { return a - b; });
  return *this;
}

std::string resource_set::to_string() const {
  std::string out = "{";
  auto add = [&](std::string_view name, const std::string& v) {
    if (out.size() > 1) out += ", ";
    out += name; out += ": "; out += v;
  };
  if (!cpu_.is_zero()) add("cpu", cpu_.to_string());
  if (!gpu_.is_zero()) add("gpu", gpu_.to_string());
  if (memory_ != 0) add("memory", format_bytes(memory_));
  if (gpu_memory_ != 0) add("gpu_memory", format_bytes(gpu_memory_));
  for (auto& [name, q] : custom_) add(name, q.to_string());
  return out + "}";
}

std::string resource_set::to_json() const {
  std::string out = "{";
  auto add = [&](std::string_view name, const std::string& v) {
    if (out.size() > 1) out += ",";
    out += json_text(nlohmann::json(std::string{name})) + ":" + v;
  };
  if (!cpu_.is_zero()) add("cpu", cpu_.to_string());
  if (!gpu_.is_zero()) add("gpu", gpu_.to_string());
  if (memory_ != 0) add("memory", std::to_string(memory_));
  if (gpu_memory_ != 0) add("gpu_memory", std::to_string(gpu_memory_));
  for (auto& [name, q] : custom_) add(name, q.to_string());
  return out + "}";
}

status check_request(const resource_set& r) {
  if (auto name = r.first_negative(); !name.empty())
    return {errc::invalid_argument, "a request asks for a negative amount of " + name +
                                        "; give a value >= 0"};
  auto g = r.gpu();
  if (!g.is_zero() && g > quantity::whole(1) && !g.is_whole())
    return {errc::invalid_argument,
            "a request of " + g.to_string() +
                " GPUs is neither whole nor a share of one card: ask for a whole number of "
                "GPUs (1, 2, ...) or a share below 1 (e.g. 0.5)"};
  if (r.gpu_memory() > 0 && g.is_zero())
    return {errc::invalid_argument,
            "gpu_memory (" + format_bytes(r.gpu_memory()) +
                ") is memory on the cards a request gets, but it asks for no GPU: add a GPU "
                "amount, e.g. gpu: 0.25"};
  if (r.empty())
    return {errc::invalid_argument,
            "a request asks for nothing: give at least one amount, e.g. {\"cpu\": 1}"};
  return status::ok();
}

}  // namespace tune
