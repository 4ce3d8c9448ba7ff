// JSON in and out of text, for JSON that can hold outside text (a program's output, a
// file's name, an environment value, an error, a configuration): never throws on bytes
// that are not UTF-8.
//
// nlohmann::json holds any bytes in a string, but its dump() throws type_error 316 on
// one that is not UTF-8: an actor that met such a string died. Dump with json_text;
// read text from elsewhere with parse_json. A name that must stay exactly as it is (a
// file's, to be made again elsewhere) goes through exact_name, which loses nothing.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tune {

// `j` as JSON text (indent as nlohmann::json::dump's: -1 one line, n spaces a level);
// each ill-formed UTF-8 sequence in a string or a key becomes U+FFFD.
std::string json_text(const nlohmann::json& j, int indent = -1);

// JSON read from text that came from elsewhere (a store, the wire, a file): a discarded
// value (is_discarded()) when it is not JSON, ill-formed UTF-8 in a string included.
nlohmann::json parse_json(std::string_view text);

// A name kept byte for byte: a JSON string when it is UTF-8, else {"hex": "<its bytes
// as lowercase hex>"}; exact_name_from reads either back (nullopt for anything else).
nlohmann::json exact_name(std::string_view bytes);
std::optional<std::string> exact_name_from(const nlohmann::json& j);

}  // namespace tune
