// A trainable for the trial tests: what it does is the configuration's "mode".
//   report       `count` results, `sleep_ms` apart, then done with what it saw:
//                the environment that matters, the cards it holds, its folder and
//                network namespace
//   until-stop   results every 20 ms until asked to stop, then one last result
//   ignore-stop  ignores SIGTERM, says ready, sleeps
//   crash        writes to stderr and aborts
//   spawn-child  starts a child that sleeps, reports its pid, sleeps
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <fstream>
#include <thread>

#include "tune/trial/context.hpp"

using namespace tune;

int main() {
  auto ctx = trial_context::from_environment();
  if (!ctx) {
    std::cerr << ctx.error().message() << "\n";
    return 2;
  }
  auto mode = ctx->text_or("mode", "report").value_or("?");
  if (mode == "report") {
    auto count = ctx->integer_or("count", 3).value_or(3);
    // Lines a careless worker might write on the report channel: ignored by the node.
    for (auto junk : {"not json", "[1,2]", R"({"type": 5})", R"({"type": "result", "metrics": 3})",
                      R"({"type": "result", "iteration": "x", "metrics": {"a": 1}})", R"({"type": "done", "message": 7})"})
      if (ctx->integer_or("junk", 0).value_or(0)) (void)!::write(3, (std::string{junk} + "\n").c_str(), std::strlen(junk) + 1);
    for (int64_t i = 0; i < count; ++i) {
      ctx->report({{"step", static_cast<double>(i)}, {"gpus", static_cast<double>(ctx->gpus().size())}});
      std::this_thread::sleep_for(std::chrono::milliseconds(ctx->integer_or("sleep_ms", 10).value_or(10)));
    }
    nlohmann::json seen;
    for (auto name : {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TUNE_TRIAL_ID", "TUNE_CANARY", "TUNE_GPU_MEMORY_QUOTA"})
      if (const char* v = std::getenv(name)) seen[name] = v;
      else seen[name] = nullptr;
    nlohmann::json gpus = nlohmann::json::array();
    for (auto& g : ctx->gpus()) gpus.push_back({{"local", g.local}, {"uuid", g.uuid}, {"quota", g.memory_quota}});
    seen["gpus"] = gpus;
    char cwd[4096];
    seen["cwd"] = ::getcwd(cwd, sizeof cwd) ? cwd : "";
    char netns[256];  // "net:[inode]": the host it runs on, for the network-namespace tests
    ssize_t n = ::readlink("/proc/self/ns/net", netns, sizeof netns);
    seen["netns"] = n > 0 ? std::string(netns, static_cast<size_t>(n)) : "";
    ctx->done(seen.dump());
    return 0;
  }
  if (mode == "mixed") {  // results of every shape, in one write (so the node reads them together)
    std::string lines =
        R"({"type": "result", "iteration": 1, "metrics": {"a": 1.5, "b": 2}})" "\n"
        R"({"metrics": {"b": 3, "a": 2.5}, "type": "result", "iteration": 2})" "\n"
        R"({"type": "result", "iteration": 3, "metrics": {"a": 3.5, "note": "text"}})" "\n"
        R"({"type": "result", "metrics": {"a": 4.5}})" "\n"
        "not json\n"
        R"({"type": "result", "iteration": 6, "metrics": {"a": 6.5, "a": 7.5}})" "\n"
        R"({"type": "result", "iteration": 7, "metrics": {"a": 7}, "extra": [1]})" "\n"
        R"({"type": "result", "iteration": 8, "metrics": {"a": -0.0, "b": 1e-300}})" "\n";
    if (::write(3, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) return 3;
    return 0;
  }
  if (mode == "checkpoint") {  // two good checkpoints, then one that points outside its folder
    for (int64_t it : {1, 2}) {
      auto dir = ctx->checkpoint_dir(it);
      if (!dir) return 3;
      std::ofstream(*dir + "/model.bin") << std::string(static_cast<size_t>(1000 * it), 'x');
      std::ofstream(*dir + "/state.json") << "{}";
      ctx->report({{"step", static_cast<double>(it)}});
      if (auto st = ctx->report_checkpoint(it); !st) return 4;
    }
    std::string escape = R"({"type": "checkpoint", "iteration": 3, "dir": "../.."})";
    (void)!::write(3, (escape + "\n").c_str(), escape.size() + 1);
    bool refused = !ctx->report_checkpoint(9);  // never written
    ctx->done(refused ? "refused" : "accepted");
    return 0;
  }
  if (mode == "restore") {  // reports the size of the model.bin it starts from
    if (ctx->restore_dir().empty()) return 6;
    std::ifstream in(ctx->restore_dir() + "/model.bin", std::ios::binary | std::ios::ate);
    ctx->report({{"restored_bytes", in ? static_cast<double>(in.tellg()) : -1.0}});
    return 0;
  }
  if (mode == "curve") {  // acc = x * (1 - exp(-t / 3)), a checkpoint every iteration; resumes
    double x = ctx->number_or("x", 0.5).value_or(0.5);
    int64_t iters = ctx->integer_or("iterations", 9).value_or(9), t = 0;
    if (!ctx->restore_dir().empty()) std::ifstream(ctx->restore_dir() + "/t") >> t;
    while (++t <= iters && !trial_context::should_stop()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ctx->integer_or("sleep_ms", 30).value_or(30)));
      auto dir = ctx->checkpoint_dir(t);
      if (!dir) return 3;
      std::ofstream(*dir + "/t") << t;
      ctx->report_checkpoint(t);
      ctx->report({{"acc", x * (1 - std::exp(-static_cast<double>(t) / 3))}, {"t", static_cast<double>(t)}}, t);
    }
    return 0;
  }
  if (mode == "silent") {  // closes its output and report channel, then works on
    ctx->report({{"ready", 1}});
    for (int fd : {1, 2, 3}) ::close(fd);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    return 0;
  }
  if (mode == "until-stop") {
    int i = 0;
    while (!trial_context::should_stop()) {
      ctx->report({{"step", static_cast<double>(i++)}});
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ctx->report({{"step", static_cast<double>(i)}, {"stopped", 1}});
    return 0;
  }
  if (mode == "ignore-stop") {
    ::signal(SIGTERM, SIG_IGN);
    ctx->report({{"ready", 1}});
    for (;;) ::pause();
  }
  if (mode == "crash") {
    std::cerr << "loading data...\nfatal: the trainable broke on purpose" << std::endl;
    std::abort();
  }
  if (mode == "spawn-child") {
    pid_t child = ::fork();
    if (child == 0) {
      ::execl("/bin/sleep", "sleep", "60", nullptr);
      ::_exit(127);
    }
    ctx->report({{"child", static_cast<double>(child)}});
    for (;;) ::pause();
  }
  std::cerr << "unknown mode " << mode << "\n";
  return 2;
}
