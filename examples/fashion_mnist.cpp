// Tunes the Fashion-MNIST MLP or CNN with libtune: ASHA over learning rate, momentum,
// weight decay, batch size and width, on an embedded cluster (this machine's GPUs at a
// fraction each, or its CPUs when it has none) or on a cluster at --address. Prints
// the progress on stderr and, last, one JSON line on stdout:
//   {"best_config": {...}, "best_val_acc": 0.89, "test_acc": 0.88, "trials": 16, "wall_s": 212.4, ...}
#include <boost/program_options.hpp>

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tune/train/trial_train.hpp"
#include "tune/tune.hpp"

namespace po = boost::program_options;

// The trainable: the trial's configuration goes to the trainer as it is; it reports
// val_acc (and more) every epoch, test_acc after its last one.
void fashion_mnist(tune::trial_context& ctx) {
  auto summary = tune::train::train_trial(ctx);
  if (!summary) throw std::runtime_error(summary.error().message());
}
TUNE_TRAINABLE(fashion_mnist);

int main(int argc, char** argv) {
  auto cluster = tune::init(argc, argv);  // first: in a trial's process this runs the trainable
  po::options_description desc{"fashion_mnist: tunes a Fashion-MNIST model with ASHA\n\nOptions"};
  desc.add_options()("help,h", "this text")
      ("model", po::value<std::string>()->default_value("mlp"), "mlp or cnn")
      ("samples", po::value<int>()->default_value(20), "trials")
      ("epochs", po::value<int>()->default_value(8), "epochs of a trial that is never stopped (ASHA's max_t)")
      ("gpus-per-trial", po::value<std::string>(),
       "GPU share per trial, or auto: measured on a probe trial, then the smallest share that holds its peak "
       "memory plus --auto-margin (default 0.25 where there are GPUs, else 0)")
      ("auto-margin", po::value<double>()->default_value(0.25), "with --gpus-per-trial auto: room above the measured peak")
      ("auto-min-share", po::value<double>()->default_value(1.0 / 16),
       "with --gpus-per-trial auto: the least share a trial gets (1/16: at most 16 trials per card)")
      ("cpus-per-trial", po::value<double>()->default_value(1), "CPUs per trial")
      ("reuse-workers", po::value<bool>()->default_value(true),
       "a worker whose trial ended well runs the next trial placed on its cards (no new process, "
       "CUDA context or cuDNN set-up); 0 or false: a new worker per trial")
      ("max-concurrent", po::value<int>()->default_value(0), "trials at once (0: as many as fit)")
      ("scheduler", po::value<std::string>()->default_value("asha"), "asha, hyperband, median or fifo")
      ("search", po::value<std::string>()->default_value("random"), "random or tpe")
      ("seed", po::value<uint64_t>()->default_value(1), "the search's seed")
      ("experiment-dir", po::value<std::string>()->default_value(""),
       "where the experiment is stored (default: tune_results/fashion_mnist-<time>)")
      ("progress", po::value<std::string>()->default_value("auto"), "auto, table, lines or none");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "fashion_mnist: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << "\n" << tune::init_help();
    return 0;
  }
  if (!cluster) {
    std::cerr << "fashion_mnist: " << cluster.error().message() << "\n";
    return 2;
  }
  auto fail = [](const std::string& why) {
    std::cerr << "fashion_mnist: " << why << "\n";
    return 2;
  };
  auto model = vm["model"].as<std::string>();
  if (model != "mlp" && model != "cnn") return fail("--model must be mlp or cnn, not " + model);
  int epochs = vm["epochs"].as<int>(), samples = vm["samples"].as<int>();
  if (epochs < 1 || epochs > 1000) return fail("--epochs must be between 1 and 1000");
  if (samples < 1) return fail("--samples must be at least 1");
  auto capacity = cluster->capacity();
  if (!capacity) return fail(capacity.error().message());
  bool gpu_auto = vm.count("gpus-per-trial") && vm["gpus-per-trial"].as<std::string>() == "auto";
  double gpus = capacity->real_gpus ? 0.25 : 0.0;
  if (vm.count("gpus-per-trial") && !gpu_auto) {
    auto text = vm["gpus-per-trial"].as<std::string>();
    char* end = nullptr;
    gpus = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(gpus >= 0))
      return fail("--gpus-per-trial must be a share such as 0.25, 1 or 2, or auto; not " + text);
  }
  double cpus = vm["cpus-per-trial"].as<double>();

  tune::tune_config cfg;
  cfg.name = "fashion_mnist";
  cfg.metric = "val_acc";
  cfg.mode = tune::mode::max;
  cfg.num_samples = samples;
  cfg.max_concurrent_trials = vm["max-concurrent"].as<int>();
  cfg.resources_per_trial = gpu_auto   ? tune::resources{{"cpu", cpus}, {"gpu", "auto"}}
                            : gpus > 0 ? tune::resources{{"cpu", cpus}, {"gpu", gpus}}
                                       : tune::resources{{"cpu", cpus}};
  cfg.reuse_workers = vm["reuse-workers"].as<bool>();
  cfg.auto_packing.margin = vm["auto-margin"].as<double>();
  cfg.auto_packing.min_share = vm["auto-min-share"].as<double>();
  cfg.seed = vm["seed"].as<uint64_t>();
  cfg.experiment_dir = vm["experiment-dir"].as<std::string>();
  auto sched = vm["scheduler"].as<std::string>();
  if (sched == "asha") cfg.scheduler = tune::asha{.max_t = epochs, .grace_period = 1, .reduction_factor = 3};
  else if (sched == "hyperband") cfg.scheduler = tune::hyperband{.max_t = epochs, .reduction_factor = 3};
  else if (sched == "median") cfg.scheduler = tune::median_stopping{.grace_period = 1};
  else if (sched == "fifo") cfg.scheduler = tune::fifo{};
  else return fail("--scheduler must be asha, hyperband, median or fifo, not " + sched);
  auto search = vm["search"].as<std::string>();
  if (search == "tpe") cfg.search = tune::tpe_search{.n_startup_trials = std::max(2, samples / 4)};
  else if (search != "random") return fail("--search must be random or tpe, not " + search);
  auto progress = vm["progress"].as<std::string>();
  if (progress == "auto") cfg.progress = tune::progress_style::automatic;
  else if (progress == "table") cfg.progress = tune::progress_style::table;
  else if (progress == "lines") cfg.progress = tune::progress_style::lines;
  else if (progress == "none") cfg.progress = tune::progress_style::none;
  else return fail("--progress must be auto, table, lines or none");

  tune::search_space space{{"model", model},
                           {"epochs", epochs},
                           {"lr", tune::loguniform(0.005, model == "mlp" ? 0.15 : 0.1)},
                           {"momentum", tune::uniform(0.8, 0.95)},
                           {"weight_decay", tune::loguniform(1e-5, 1e-3)},
                           {"batch_size", tune::choice({64, 128, 256})},
                           {"width", model == "mlp" ? tune::choice({128, 256, 512}) : tune::choice({64, 128, 256})}};
  std::cerr << "fashion_mnist: " << samples << " trials of the " << model << " on " << cluster->description() << ", "
            << (gpu_auto ? std::string{"an auto-packed GPU share and "} : gpus > 0 ? std::to_string(gpus) + " GPU and " : std::string{})
            << cpus << " CPU per trial\n";
  tune::tuner tuner{*cluster, "fashion_mnist", space, cfg};
  auto results = tuner.fit();
  if (!results) {
    std::cerr << "fashion_mnist: " << results.error().message() << "\n";
    return 1;
  }
  auto best = results->best();
  if (!best) return fail(best.error().message());
  if (!*best) {
    std::cerr << "fashion_mnist: no trial reported val_acc (" << results->errors() << " errors; see "
              << results->dir() << ")\n";
    return 1;
  }
  // The best trial's test accuracy: measured after its last epoch (a trial that ASHA
  // stopped was never tested).
  nlohmann::json test_acc = nullptr;
  if (auto history = results->history((*best)->id); history && !history->empty())
    if (auto& m = history->back().metrics; m.contains("test_acc")) test_acc = m["test_acc"];
  auto trials = results->trials();
  int stopped_early = 0;
  if (trials)
    for (auto& t : *trials)
      if (auto h = results->history(t.id); h && !h->empty() && h->back().iteration < epochs) ++stopped_early;
  nlohmann::json out{{"best_config", (*best)->config},
                     {"best_trial", (*best)->id},
                     {"best_val_acc", (*best)->value},
                     {"test_acc", test_acc},
                     {"trials", trials ? trials->size() : 0},
                     {"stopped_early", stopped_early},
                     {"errors", results->errors()},
                     {"results", results->results},
                     {"wall_s", results->wall_s},
                     {"experiment_dir", results->dir()}};
  std::cout << out.dump() << std::endl;
  return 0;
}
