#include "tune/core/json_text.hpp"

#include "tune/core/utf8.hpp"

namespace tune {

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json parse_json(std::string_view text) {
  try {
    return nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  } catch (const std::exception&) {  // allow_exceptions = false: not expected, but never across a layer
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
}

nlohmann::json exact_name(std::string_view bytes) {
  if (valid_utf8(bytes)) return std::string{bytes};
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  return nlohmann::json{{"hex", hex}};
}

std::optional<std::string> exact_name_from(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (!j.is_object() || j.size() != 1 || !j.contains("hex") || !j["hex"].is_string()) return std::nullopt;
  auto& hex = j["hex"].get_ref<const std::string&>();
  if (hex.size() % 2 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = value(hex[i]), lo = value(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

}  // namespace tune
