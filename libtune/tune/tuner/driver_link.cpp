#include "tune/tuner/driver_link.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tune/core/json_text.hpp"

namespace tune {

namespace driver_protocol {

namespace {

void quoted(std::string& out, const std::string& s) { out += json_text(nlohmann::json(s)); }

nlohmann::json trial_json(const trial_info& t) {
  return {{"id", t.id},           {"config", t.cfg},   {"state", std::string{to_string(t.state)}},
          {"iteration", t.iteration}, {"error", t.error}, {"checkpoint", t.checkpoint}};
}

// One event as the protocol's object; a result's metrics are the trial's text as it is.
void append_event(std::string& out, const hook::event& e) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, hook::result>) {
          out += R"({"e":"result","trial":)";
          quoted(out, x.trial);
          out += ",\"iteration\":" + std::to_string(x.iteration) + ",\"time\":" + json_text(nlohmann::json(x.time)) +
                 ",\"metrics\":";
          out += x.metrics.empty() ? std::string{"{}"} : x.metrics;
          out += '}';
          return;
        }
        nlohmann::json j;
        if constexpr (std::is_same_v<T, hook::setup>) {
          const auto& ex = x.experiment;
          j = {{"e", "setup"},
               {"experiment",
                {{"name", ex.name}, {"dir", ex.dir}, {"metric", ex.metric}, {"mode", ex.mode == mode::max ? "max" : "min"},
                 {"num_samples", ex.num_samples}, {"resumed", ex.resumed}}},
               {"trials", nlohmann::json::array()}};
          for (auto& t : x.trials) j["trials"].push_back(trial_json(t));
        } else if constexpr (std::is_same_v<T, hook::suggest>) {
          j = {{"e", "suggest"}, {"trial", x.trial}};
        } else if constexpr (std::is_same_v<T, hook::prepare>) {
          j = {{"e", "prepare"}, {"trial", x.trial}, {"config", x.cfg}};
        } else if constexpr (std::is_same_v<T, hook::explore>) {
          j = {{"e", "explore"}, {"trial", x.trial}, {"donor", x.donor}, {"config", x.cfg}, {"resample", x.resample}};
        } else if constexpr (std::is_same_v<T, hook::trial_start>) {
          j = {{"e", "start"}, {"trial", x.trial}, {"config", x.cfg}, {"restored_from", x.restored_from}};
        } else if constexpr (std::is_same_v<T, hook::checkpoint>) {
          j = {{"e", "checkpoint"}, {"trial", x.trial}, {"iteration", x.iteration}, {"dir", x.dir}};
        } else if constexpr (std::is_same_v<T, hook::trial_end>) {
          j = {{"e", "end"},
               {"trial", x.trial},
               {"state", std::string{to_string(x.state)}},
               {"recovering", x.recovering},
               {"error", x.error}};
        } else if constexpr (std::is_same_v<T, hook::save>) {
          j = {{"e", "save"}};
        } else if constexpr (std::is_same_v<T, hook::end>) {
          j = {{"e", "experiment_end"}};
        }
        out += json_text(j);
      },
      e);
}

std::string text_of(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

expected<hook::answer> answer_of(const nlohmann::json& a) {
  if (!a.is_object() || !a.contains("a") || !a["a"].is_string())
    return status{errc::invalid_argument, "an answer is not an object with \"a\": " + json_text(a).substr(0, 200)};
  auto kind = a["a"].get<std::string>();
  auto trial = text_of(a, "trial");
  if (kind == "suggestion") {
    hook::suggestion s{trial, hook::suggestion::kind::wait, {}};
    if (a.contains("config") && !a["config"].is_null()) {
      s.what = hook::suggestion::kind::config;
      s.cfg = a["config"];
    } else if (a.value("finished", false)) {
      s.what = hook::suggestion::kind::finished;
    }
    return hook::answer{std::move(s)};
  }
  if (kind == "prepared") {
    hook::prepared p{trial, a.value("config", config::object()), a.value("resources", nlohmann::json()), text_of(a, "error")};
    return hook::answer{std::move(p)};
  }
  if (kind == "explored") return hook::answer{hook::explored{trial, a.value("config", config::object())}};
  using k = hook::decided::kind;
  for (auto [name, what] : {std::pair{"stop", k::stop}, {"pause", k::pause}, {"resume", k::resume}, {"checkpoint", k::checkpoint}})
    if (kind == name) return hook::answer{hook::decided{trial, what, text_of(a, "reason")}};
  if (kind == "stop_all") return hook::answer{hook::stop_all{text_of(a, "reason")}};
  if (kind == "failure")
    return hook::answer{hook::failure{text_of(a, "hook"), trial, text_of(a, "message"), text_of(a, "traceback")}};
  if (kind == "done") return hook::answer{hook::done{}};
  return status{errc::invalid_argument, "an answer of an unknown kind: " + kind};
}

}  // namespace

std::string events_line(const std::vector<hook::event>& events) {
  std::string out = R"({"events":[)";
  for (size_t i = 0; i < events.size(); ++i) {
    if (i) out += ',';
    append_event(out, events[i]);
  }
  out += "]}\n";
  return out;
}

expected<from_driver> read_line(const std::string& line) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) return status{errc::invalid_argument, "a line that is not a JSON object: " + line.substr(0, 200)};
  from_driver out;
  if (auto ack = j.find("ack"); ack != j.end()) {
    if (!ack->is_number_unsigned()) return status{errc::invalid_argument, "\"ack\" is not a count: " + line.substr(0, 200)};
    out.acked = ack->get<uint64_t>();
  }
  if (auto a = j.find("answers"); a != j.end()) {
    if (!a->is_array()) return status{errc::invalid_argument, "\"answers\" is not a list: " + line.substr(0, 200)};
    for (auto& x : *a) {
      auto one = answer_of(x);
      if (!one) return one.error();
      out.answers.push_back(std::move(*one));
    }
  }
  return out;
}

}  // namespace driver_protocol

driver_link::driver_link(int fd, hook::interest serves, std::chrono::milliseconds timeout)
    : fd_(fd), wants_(serves), timeout_(timeout) {
  // Nothing this process starts (a tracker's bridge, an MPS daemon) may hold the
  // driver's socket: its end must close when this process ends.
  if (fd_ >= 0) ::fcntl(fd_, F_SETFD, FD_CLOEXEC);
}

driver_link::~driver_link() {
  {
    std::lock_guard lock{mu_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);  // the reader's blocking read ends
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) ::close(fd_);
}

status driver_link::start(std::function<void()> wake) {
  if (fd_ < 0) return status{errc::invalid_argument, "no socket to the driver (--driver-fd)"};
  int type = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd_, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
    return status{errc::invalid_argument, "descriptor " + std::to_string(fd_) +
                                              " (--driver-fd) is not a stream socket: the driver passes its end of a "
                                              "socketpair"};
  wake_ = std::move(wake);
  writer_ = std::thread([this] { write_loop(); });
  reader_ = std::thread([this] { read_loop(); });
  return {};
}

void driver_link::post(hook::event e) {
  {
    std::lock_guard lock{mu_};
    if (!broken_.empty()) return;
    queue_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::vector<hook::answer> driver_link::take() {
  std::lock_guard lock{mu_};
  return std::exchange(answers_, {});
}

std::string driver_link::broken() const {
  std::lock_guard lock{mu_};
  if (!broken_.empty()) return broken_;
  if (lines_acked_ < lines_sent_ && std::chrono::steady_clock::now() - waiting_since_ > timeout_)
    return "has not answered for " + std::to_string(timeout_.count() / 1000) +
           " s: a hook of the user's (a callback, stopper, searcher or scheduler) hangs, or the driver is stuck";
  return {};
}

void driver_link::drain(std::chrono::milliseconds timeout) {
  std::unique_lock lock{mu_};
  cv_.wait_for(lock, timeout, [&] { return !broken_.empty() || done_; });
}

void driver_link::lost(std::string why) {
  {
    std::lock_guard lock{mu_};
    if (broken_.empty()) broken_ = std::move(why);
    queue_.clear();
  }
  cv_.notify_all();
  if (wake_) wake_();
}

void driver_link::write_loop() {
  for (;;) {
    std::vector<hook::event> batch;
    {
      std::unique_lock lock{mu_};
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !broken_.empty(); });
      if (!broken_.empty() || (stopping_ && queue_.empty())) return;
      batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
      queue_.clear();
      if (lines_acked_ == lines_sent_) waiting_since_ = std::chrono::steady_clock::now();
      ++lines_sent_;
    }
    auto line = driver_protocol::events_line(batch);
    for (size_t off = 0; off < line.size();) {
      ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return lost("is gone (its end of the socket closed: " + std::string{std::strerror(errno)} + ")");
      off += static_cast<size_t>(n);
    }
  }
}

void driver_link::read_loop() {
  std::string buf, line;
  char chunk[65536];
  for (;;) {
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      bool ending;
      {
        std::lock_guard lock{mu_};
        ending = done_ || stopping_;
      }
      if (!ending) lost("is gone (its end of the socket closed: the driver ended or was killed)");
      return;
    }
    buf.append(chunk, static_cast<size_t>(n));
    size_t start = 0;
    bool any = false;
    for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      line.assign(buf, start, nl - start);
      auto got = driver_protocol::read_line(line);
      if (!got) return lost("spoke out of protocol (" + got.error().message() + ")");
      std::lock_guard lock{mu_};
      if (got->acked) {
        lines_acked_ = std::max(lines_acked_, *got->acked);
        waiting_since_ = std::chrono::steady_clock::now();
      }
      for (auto& a : got->answers) {
        if (std::holds_alternative<hook::done>(a)) done_ = true;
        answers_.push_back(std::move(a));
        any = true;
      }
    }
    buf.erase(0, start);
    if (buf.size() > (64u << 20)) return lost("sent a line longer than 64 MiB");
    cv_.notify_all();
    if (any && wake_) wake_();
  }
}

}  // namespace tune
