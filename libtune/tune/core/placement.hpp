// Placement policies: where a group of bundles goes, as a pure function over a
// cluster_view. Nothing is changed to try; `commit` applies a decision.
//
//   PACK           as few nodes as possible: the whole group on one node when some
//                  node has room, else bundle by bundle, on nodes the group already
//                  uses first (best fit: the fullest card, the fewest free cards),
//                  opening the roomiest node next. A single bundle goes best fit: the fullest
//                  card of the cluster that fits, or the busiest node that fits.
//   SPREAD         bundle by bundle on nodes the group does not use yet, least
//                  loaded first; nodes are shared only when no other has room.
//   STRICT_PACK    every bundle on one node, or not at all.
//   STRICT_SPREAD  every bundle on a different node, or not at all.
//
// Within a node the allocation rules of node_resources apply (whole cards for
// requests >= 1 GPU, best-fit card for a share). Ties go to the lower slot.
//
// The outcome is placed, not_now (the group would fit the cluster if it were empty:
// retry when resources are freed), or infeasible (it would not fit even then: it
// can never be placed on these nodes, and the reason says what is missing). Other
// programs' holdings on the cards (card_others) count as taken now, never as missing:
// a group they keep out waits, and its reason names the card and the holder
// ("waiting: GPU 0 (GPU-...) is in use by another program: pid 4711 python3 ...").
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tune/core/cluster_view.hpp"
#include "tune/core/resource_set.hpp"
#include "tune/core/status.hpp"

namespace tune {

enum class strategy { pack, spread, strict_pack, strict_spread };
std::string_view to_string(strategy s);
// "PACK", "spread", "STRICT_SPREAD", ... (any case).
expected<strategy> parse_strategy(std::string_view text);

enum class outcome { placed, not_now, infeasible };
std::string_view to_string(outcome o);

struct bundle_placement {
  node_id node;
  allocation alloc;  // what the bundle takes there, GPU cards included
};

struct placement {
  outcome result = outcome::not_now;
  std::vector<bundle_placement> bundles;  // when placed: one per bundle, in bundle order
  std::string reason;                     // when not placed: why, for people
};

// Decides where `bundles` go, on any node but those in `avoid` (nodes being drained,
// or holding a STRICT_SPREAD group's other bundles). Bad input (no bundles, a bundle
// that breaks the request rules of check_request) is an error naming the bundle;
// everything else is a placement, infeasible meaning: not on the nodes allowed.
expected<placement> place(const cluster_view& view, std::span<const resource_set> bundles,
                          strategy s, std::span<const node_id> avoid = {});

// As place(), but on the nodes in `prefer` alone when the group fits there now (a
// restarted trial goes where its checkpoint waits, staged); else as place() on every
// node allowed. Nodes in `avoid` are never used, preferred or not.
expected<placement> place_preferring(const cluster_view& view, std::span<const resource_set> bundles, strategy s,
                                     std::span<const node_id> avoid, std::span<const node_id> prefer);

// Takes every bundle of a placed decision, or (changing nothing) fails when one no
// longer fits or its node is gone.
status commit(cluster_view& view, const placement& p);
// Gives back every bundle of a committed decision, all or nothing.
status release(cluster_view& view, const placement& p);

}  // namespace tune
