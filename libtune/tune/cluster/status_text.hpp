// `tune status` for people: the head's status JSON rendered as text, in the spirit
// of `ray status`, plus the per-GPU map.
#pragma once

#include <string>
#include <string_view>

#include "tune/core/status.hpp"

namespace tune {

// Renders the JSON of `tune status --json`. An error when it is not that JSON.
expected<std::string> render_status_text(std::string_view status_json);

}  // namespace tune
