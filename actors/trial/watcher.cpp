#include "watcher.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "log.hpp"
#include "tune/core/trace.hpp"

namespace tune {

expected<std::shared_ptr<control_channel>> control_channel::make() {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return status{errc::insufficient, std::string{"cannot make the trial's control channel: "} + std::strerror(errno)};
  return std::make_shared<control_channel>(fd);
}

control_channel::~control_channel() {
  if (fd_ >= 0) ::close(fd_);
}

void control_channel::wake() {
  uint64_t one = 1;
  while (::write(fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void control_channel::post(kind what, int64_t value, bool wake_it) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back({what, value});
  if (wake_it) wake();
}

void control_channel::lines_sent(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_ += n;
}

void control_channel::lines_handled(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  bool stalled = in_flight_ > max_lines_in_flight;
  in_flight_ -= n;
  if (stalled && in_flight_ <= max_lines_in_flight) wake();
}

bool control_channel::too_many_lines() {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_ > max_lines_in_flight;
}

std::vector<control_channel::command> control_channel::take() {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t count = 0;
  while (::read(fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
  std::vector<command> out(queue_.begin(), queue_.end());
  queue_.clear();
  return out;
}

namespace {

constexpr int last_word_rounds = 64;  // reads of its pipes after its end, each at most worker_process::max_read_per_poll
constexpr auto usage_period = std::chrono::seconds(1);  // how often its cgroup's usage goes to the actor
constexpr auto longest_wait = std::chrono::milliseconds(1000);  // a look at least this often, whatever happens

using clock = std::chrono::steady_clock;

class watcher {
 public:
  watcher(trial_iface self, launch l, std::shared_ptr<control_channel> ctl, std::shared_ptr<spawner> via)
      : self_(std::move(self)), l_(std::move(l)), ctl_(std::move(ctl)), via_(std::move(via)) {}

  void run() {
    if (!start()) return;
    auto& w = *owned_;
    w.forward_output(l_.forward_output);
    caf::anon_send(self_, worker_started_atom::value, w.pid(), w.group(), std::string{}, cg_ ? cg_->path() : std::string{});
    next_sample_ = clock::now() + std::chrono::milliseconds(200);
    if (watch_until_end()) return;  // kept for the experiment's next trial
    last_words();
    finish();
  }

 private:
  void failed(const std::string& why) { caf::anon_send(self_, worker_started_atom::value, 0, 0, why, std::string{}); }

  // An idle worker of the experiment's takes the trial (false: there is none, it did
  // not take it, or the trial's files could not be made: `gave_up`).
  bool take_idle(bool& gave_up) {
    auto w = l_.idle->take(l_.reuse_key);
    if (!w) return false;
    if (auto s = prepare_files(l_, metrics_); !s) {
      reuse::idle_pool::end(*w);
      failed("node " + l_.node_id + ": " + s.message());
      gave_up = true;
      return false;
    }
    auto spec = l_.spec;
    reuse_environment(spec, w->dir, l_.idle->linger());
    trace_step("hand_over", l_.trial_id);
    if (!adopt(*w, spec, l_.account, lines_)) return false;
    trace_step("handed_over", l_.trial_id);
    owned_ = std::move(w->process);
    cg_ = std::move(w->cgroup);
    reuse_dir_ = w->dir;
    before_ = w->used;
    reused_ = true;
    owned_->clear_tails();
    return true;
  }

  // A worker of its own, from a warm spawner when there is one for it.
  bool start_new() {
    before_ = {};
    trace_step("prepare", l_.trial_id);
    auto prepared = prepare(l_, metrics_);
    trace_step("prepared", l_.trial_id);
    if (!prepared) {
      failed("node " + l_.node_id + ": " + prepared.error().message());
      return false;
    }
    cg_ = std::move(*prepared);
    // A Python command starts as a fork of a warm interpreter (no start-up of its own);
    // a libtune program's own worker as a fork of that program, started once.
    auto warm = l_.find_program && l_.pythons ? l_.pythons->for_program(l_.spec.argv[0]) : nullptr;
    if (!warm && !l_.find_program && l_.programs) warm = l_.programs->for_spec(l_.spec);
    if (warm && warm->gone()) warm = nullptr;
    spawner* from = warm ? warm.get() : via_.get();
    // Reusable: in a cgroup, and its keeper not a child of this thread (which ends with
    // the trial).
    if (l_.reuse && l_.idle && cg_ && from) {
      reuse_dir_ = hand_over_folder(l_);
      if (!reuse_dir_.empty()) reuse_environment(l_.spec, reuse_dir_, l_.idle->linger());
    }
    auto p = worker_process::start(l_.spec, from);
    trace_step("spawned", l_.trial_id);
    if (!p) {
      remove_hand_over_folder();
      failed(p.error().message());
      return false;
    }
    owned_ = std::move(*p);
    return true;
  }

  bool start() {
    if (l_.idle) {
      bool gave_up = false;
      if (l_.reuse && take_idle(gave_up)) return true;
      if (gave_up) return false;
      // Idle workers of anything else on its cards end before it starts.
      l_.idle->evict(l_.reuse ? l_.reuse_key : std::string{}, l_.cards);
    }
    return start_new();
  }

  void remove_hand_over_folder() {
    if (reuse_dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(reuse_dir_, ec);
    reuse_dir_.clear();
  }

  // Its output's lines to the actor, to forward (log_to_driver): at most
  // forward_per_second a second (a burst as big); what is over is counted and said once
  // the rate allows again, so a trial that prints without end cannot flood its owner.
  void forward() {
    auto lines = owned_->take_forwarded();
    auto now = clock::now();
    budget_ = std::min<double>(forward_per_second,
                               budget_ + forward_per_second * std::chrono::duration<double>(now - refilled_).count());
    refilled_ = now;
    std::vector<std::string> out;
    for (auto& line : lines) {
      if (budget_ < 1) {
        ++not_forwarded_;
        continue;
      }
      if (not_forwarded_ > 0) {
        out.push_back("(" + std::to_string(not_forwarded_) + " lines of its output not shown: more than " +
                      std::to_string(forward_per_second) + " a second; the end of its standard error is kept in "
                      "its trial folder when it fails)");
        not_forwarded_ = 0;
        budget_ -= 1;
      }
      out.push_back(std::move(line));
      budget_ -= 1;
    }
    if (!out.empty()) caf::anon_send(self_, worker_output_atom::value, std::move(out));
  }

  // What one read gave, to the actor (output lines that are metrics become reports).
  void hand_over() {
    if (l_.forward_output) forward();
    for (auto& o : output_)
      if (auto r = metrics_->report_line(o)) lines_.push_back(std::move(*r));
    output_.clear();
    if (lines_.empty()) return;
    ctl_->lines_sent(static_cast<int64_t>(lines_.size()));
    caf::anon_send(self_, worker_lines_atom::value, std::move(lines_));  // one message per read
    lines_.clear();
  }

  // How long it may block: until the SIGKILL of a stop's grace, the next look at its
  // cgroup, or longest_wait.
  std::chrono::milliseconds timeout() const {
    auto now = clock::now();
    auto until = now + longest_wait;
    if (kill_at_) until = std::min(until, *kill_at_);
    if (cg_ && !cg_->path().empty()) until = std::min(until, next_sample_);
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::ceil<std::chrono::milliseconds>(until - now));
  }

  // Blocks until the worker writes (when it may read on), ends, the actor asks
  // something, or a deadline comes. While the owner or the actor is behind it reads
  // nothing (the worker's writes block once its pipes are full).
  void wait() {
    auto& w = *owned_;
    bool reading = !held_ && !ctl_->too_many_lines();
    auto* output_lines = metrics_ ? &output_ : nullptr;
    // poll() is false at once when the worker has closed its pipes (it may still run):
    // then the keeper's news of its end is what it waits for.
    auto until = timeout();
    if (!reading || !w.poll(until, lines_, output_lines, ctl_->fd())) w.wait_for_end(until, ctl_->fd());
  }

  // What the actor asked (stop after a grace, kill, pause, resume, flow control), and a
  // stop's grace that is over, carried out.
  void apply_controls() {
    auto& w = *owned_;
    for (auto& c : ctl_->take()) switch (c.what) {
        case control_channel::kind::stop:
          w.terminate();
          kill_at_ = clock::now() + std::chrono::milliseconds(c.value);
          break;
        case control_channel::kind::kill: kill_asked_ = true; break;
        case control_channel::kind::pause:  // its process group stopped; in a cgroup, everything in it frozen
          w.pause();
          if (cg_) cg_->freeze(true);
          break;
        case control_channel::kind::resume:
          if (cg_) cg_->freeze(false);
          w.resume();
          break;
        case control_channel::kind::save: w.ask_checkpoint(); break;
        case control_channel::kind::hold: held_ = c.value != 0; break;
      }
    if (kill_at_ && clock::now() >= *kill_at_) {
      graced_out_ = true;
      kill_at_.reset();
    }
    if (kill_asked_ || graced_out_) w.kill();
  }

  // Its trial done, a reusable worker waits for the next one: kept when nothing else is
  // in its cgroup and nobody asked for it to be killed (true; the actor hears of the
  // trial's end). Else its hand-over folder goes and it exits (0) by itself.
  bool keep_idle() {
    auto& w = *owned_;
    auto pids = cg_ ? cg_->pids() : std::vector<int>{};
    std::vector<int> own{w.group(), w.pid()};
    std::sort(pids.begin(), pids.end());
    std::sort(own.begin(), own.end());
    if (kill_asked_ || pids != own || w.try_wait()) {
      remove_hand_over_folder();
      return false;
    }
    wire::wire_trial_end end;
    auto used = cgroup_usage(l_, *cg_, before_, end);
    end.worker_reused = reused_;
    end.worker_kept = true;
    auto tail = w.stderr_tail();
    auto overlong = static_cast<int64_t>(w.overlong_lines());
    reuse::idle_worker keep;
    keep.key = l_.reuse_key;
    keep.cards = l_.cards;
    keep.dir = reuse_dir_;
    keep.trial_id = l_.trial_id;
    keep.used = used;
    keep.process = std::move(owned_);
    keep.cgroup = std::move(cg_);
    trace_step("went_idle", l_.trial_id);
    l_.idle->keep(std::move(keep));
    caf::anon_send(self_, worker_ended_atom::value, true, 0, exit_info{true, 0}.describe(), tail, overlong, std::move(end));
    return true;
  }

  // Until the worker ends (false) or is kept idle (true).
  bool watch_until_end() {
    while (!done_) {
      wait();
      apply_controls();
      // Its trial done, the worker waits for the next one (nothing comes after "idle"
      // until the next trial is handed over).
      bool idle_now = !reuse_dir_.empty() && take_line(lines_, reuse::idle_line, true);
      hand_over();
      if (idle_now && keep_idle()) return true;
      done_ = owned_->try_wait();
      // What its cgroup uses (host memory, CPU), about once a second.
      if (cg_ && !cg_->path().empty() && clock::now() >= next_sample_) {
        next_sample_ = clock::now() + usage_period;
        caf::anon_send(self_, worker_host_atom::value, cg_->usage());
      }
    }
    return false;
  }

  // The last words: what is left in its pipes, read in bounded rounds (a helper it left
  // behind may still be writing: at most last_word_rounds of them, then its end goes on).
  void last_words() {
    auto* output_lines = metrics_ ? &output_ : nullptr;
    for (int round = 0; round < last_word_rounds; ++round) {
      bool open = owned_->poll(std::chrono::milliseconds(0), lines_, output_lines);
      bool got = !lines_.empty() || !output_.empty() || owned_->has_forwarded();
      if (!reuse_dir_.empty()) take_line(lines_, reuse::idle_line);
      hand_over();
      if (!open || !got) break;
    }
  }

  void finish() {
    auto& w = *owned_;
    remove_hand_over_folder();
    trace_step("exited", l_.trial_id);
    auto host = end_cgroup(l_, cg_.get(), w, before_);
    trace_step("cgroup_ended", l_.trial_id);
    host.worker_reused = reused_;
    caf::anon_send(self_, worker_ended_atom::value, done_->exited, done_->code, done_->describe(), w.stderr_tail(),
                   static_cast<int64_t>(w.overlong_lines()), std::move(host));
  }

  trial_iface self_;
  launch l_;
  std::shared_ptr<control_channel> ctl_;
  std::shared_ptr<spawner> via_;
  std::optional<output_metrics> metrics_;
  std::unique_ptr<worker_process> owned_;
  std::unique_ptr<trial_cgroup> cg_;
  std::vector<std::string> lines_, output_;
  static constexpr int forward_per_second = 2000;
  double budget_ = forward_per_second;
  clock::time_point refilled_ = clock::now();
  int64_t not_forwarded_ = 0;
  host_usage before_;
  std::string reuse_dir_;  // its hand-over folder (empty: not reusable)
  bool reused_ = false;
  std::optional<exit_info> done_;
  clock::time_point next_sample_;
  std::optional<clock::time_point> kill_at_;  // a stop's SIGKILL
  bool kill_asked_ = false, graced_out_ = false;
  bool held_ = false;  // the owner is behind: read nothing
};

}  // namespace

void watch(trial_iface self, launch l, std::shared_ptr<control_channel> ctl, std::shared_ptr<spawner> via) {
  watcher{std::move(self), std::move(l), std::move(ctl), std::move(via)}.run();
}

}  // namespace tune
