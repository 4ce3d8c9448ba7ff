#include "tune/trial/sha256.hpp"

#include <openssl/evp.h>

#include <cstring>
#include <fstream>
#include <memory>

namespace tune {

namespace {

struct digest {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), EVP_MD_CTX_free};
  digest() { EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr); }
  void add(const void* p, size_t n) { EVP_DigestUpdate(ctx.get(), p, n); }
  std::string hex() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx.get(), out, &len);
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (unsigned i = 0; i < len; ++i) {
      s += digits[out[i] >> 4];
      s += digits[out[i] & 15];
    }
    return s;
  }
};

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  digest d;
  d.add(bytes.data(), bytes.size());
  return d.hex();
}

expected<std::string> sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return status{errc::not_found, "cannot read " + path + ": " + std::strerror(errno)};
  digest d;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    d.add(buf, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return status{errc::inconsistent, "error reading " + path};
  return d.hex();
}

struct sha256_stream::impl {
  digest d;
};

sha256_stream::sha256_stream() : impl_(std::make_unique<impl>()) {}
sha256_stream::~sha256_stream() = default;
void sha256_stream::add(std::string_view bytes) { impl_->d.add(bytes.data(), bytes.size()); }
std::string sha256_stream::hex() { return impl_->d.hex(); }

}  // namespace tune
