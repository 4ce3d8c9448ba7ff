// A tuning script written from docs/api.md alone: random search over a quadratic, on
// an embedded cluster (or --address HOST:PORT). Its last line is one JSON object.
#include <tune/tune.hpp>
#include <tune/version.hpp>

#include <cmath>
#include <iostream>

void quadratic(tune::trial_context& ctx) {
  const double x = ctx.number("x").value();
  const double y = ctx.number("y").value();
  for (int step = 1; step <= 3; ++step) {
    const double loss = (x - 1) * (x - 1) + (y + 2) * (y + 2) + 1.0 / step;
    if (!ctx.report({{"loss", loss}}) || tune::trial_context::should_stop()) return;
  }
}
TUNE_TRAINABLE(quadratic);

int main(int argc, char** argv) {
#ifndef MY_TUNER_NO_INIT
  auto cluster = tune::init(argc, argv);
#else
  // Forgets tune::init: starts its cluster from code without run_if_trial_worker first.
  tune::cluster_options options;
  options.local = true;
  auto cluster = tune::cluster::start(options);
#endif
  if (!cluster) {
    std::cerr << cluster.error().message() << "\n";
    return 2;
  }
  tune::search_space space{{"x", tune::uniform(-4, 4)}, {"y", tune::uniform(-4, 4)}};
  tune::tune_config cfg;
  cfg.name = "my_tuner";
  cfg.metric = "loss";
  cfg.mode = tune::mode::min;
  cfg.num_samples = 6;
  cfg.resources_per_trial = tune::resources{{"cpu", 1}};
  auto results = tune::tuner{*cluster, "quadratic", space, cfg}.fit();
  if (!results) {
    std::cerr << results.error().message() << "\n";
    return 1;
  }
  auto best = results->best();
  auto trials = results->trials();
  if (!best || !*best || !trials) {
    std::cerr << "no trial reported loss\n";
    return 1;
  }
  std::cout << nlohmann::json{{"library_version", tune::library_version()},
                              {"header_version", LIBTUNE_VERSION_STRING},
                              {"cluster", cluster->description()},
                              {"trials", trials->size()},
                              {"errors", results->errors()},
                              {"best_config", (*best)->config},
                              {"best_loss", (*best)->value}}
                   .dump()
            << "\n";
}
