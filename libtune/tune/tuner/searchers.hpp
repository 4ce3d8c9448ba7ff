// libtune's own search algorithms as tune::searcher (hooks.hpp): the same TPE, GP, BOHB
// and random search that tune_config::search runs natively, behind the interface a
// searcher of the user's own implements, so that a tuning script can use them as parts
// of its own: wrap one (log, filter, seed the first trials by hand, switch algorithms
// half-way), or hand it over as it is.
//
//   auto tpe = tune::tpe_searcher({.n_startup_trials = 5});
//   cfg.search = std::make_shared<my_searcher>(tpe);  // which calls tpe->suggest(id), ...
//
// Each takes its options as search.hpp describes them; the experiment gives it the
// space, the mode (and, for TPE, every objective and constraint), num_samples and, when
// the options leave seed at 0, the seed (search_properties). Pending-aware as the
// algorithm is (TPE's constant liar, the GP's fantasies). save() keeps what it was told,
// in order (small: each suggestion and each completed trial's values, BOHB's results per
// budget too), and restore() replays that into a new algorithm over the same space and
// seed, which then continues exactly where the saved one was (a configuration that comes
// out different is an error: the space or seed changed).
//
// Natively (cfg.search = tune::tpe_search{...}) the same algorithm runs on the
// controller's thread with no hooks at all: the fast path when nothing is wrapped.
#pragma once

#include <memory>

#include "tune/tuner/hooks.hpp"
#include "tune/tuner/search.hpp"

namespace tune {

std::shared_ptr<searcher> tpe_searcher(tpe_options options = {});
std::shared_ptr<searcher> gp_searcher(gp_options options = {});
std::shared_ptr<searcher> bohb_searcher(bohb_options options = {});
std::shared_ptr<searcher> random_searcher(random_search_options options = {});

}  // namespace tune
