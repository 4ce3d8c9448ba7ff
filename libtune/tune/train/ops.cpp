#include "tune/train/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tune::train {

void bias_act(float* z, const float* b, int n, int m, bool relu) {
  for (int i = 0; i < n; ++i) {
    float* row = z + size_t(i) * m;
    if (relu)
      for (int j = 0; j < m; ++j) row[j] = std::max(row[j] + b[j], 0.0f);
    else
      for (int j = 0; j < m; ++j) row[j] += b[j];
  }
}

void relu_backward_bias_grad(float* d, const float* a, int n, int m, bool relu, float* db) {
  std::fill(db, db + m, 0.0f);
  for (int i = 0; i < n; ++i) {
    float* row = d + size_t(i) * m;
    if (relu) {
      const float* arow = a + size_t(i) * m;
      for (int j = 0; j < m; ++j) row[j] = arow[j] > 0.0f ? row[j] : 0.0f;
    }
    for (int j = 0; j < m; ++j) db[j] += row[j];
  }
}

sums softmax_cross_entropy(const float* logits, const int32_t* labels, int n, int classes, float* dlogits) {
  sums s;
  s.count = n;
  for (int i = 0; i < n; ++i) {
    const float* z = logits + size_t(i) * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c)
      if (z[c] > z[best]) best = c;
    const float mx = z[best];
    float total = 0.0f;
    for (int c = 0; c < classes; ++c) total += std::exp(z[c] - mx);
    const float lse = mx + std::log(total);
    s.loss += lse - z[labels[i]];
    s.correct += best == labels[i];
    if (dlogits) {
      float* d = dlogits + size_t(i) * classes;
      for (int c = 0; c < classes; ++c) d[c] = (std::exp(z[c] - lse) - (c == labels[i] ? 1.0f : 0.0f)) / n;
    }
  }
  return s;
}

void im2col3x3(const float* in, int n, int c, int h, int w, float* col) {
  const size_t hw = size_t(h) * w, cols = size_t(n) * hw;
  for (int ch = 0; ch < c; ++ch)
    for (int r = 0; r < 3; ++r)
      for (int s = 0; s < 3; ++s) {
        float* dst = col + (size_t(ch) * 9 + r * 3 + s) * cols;
        for (int i = 0; i < n; ++i) {
          const float* src = in + (size_t(i) * c + ch) * hw;
          float* d = dst + i * hw;
          for (int y = 0; y < h; ++y) {
            const int sy = y + r - 1;
            float* drow = d + size_t(y) * w;
            if (sy < 0 || sy >= h) {
              std::memset(drow, 0, sizeof(float) * w);
              continue;
            }
            const float* srow = src + size_t(sy) * w;
            for (int x = 0; x < w; ++x) {
              const int sx = x + s - 1;
              drow[x] = (sx >= 0 && sx < w) ? srow[sx] : 0.0f;
            }
          }
        }
      }
}

void col2im3x3(const float* col, int n, int c, int h, int w, float* out) {
  const size_t hw = size_t(h) * w, cols = size_t(n) * hw;
  std::fill(out, out + size_t(n) * c * hw, 0.0f);
  for (int ch = 0; ch < c; ++ch)
    for (int r = 0; r < 3; ++r)
      for (int s = 0; s < 3; ++s) {
        const float* src = col + (size_t(ch) * 9 + r * 3 + s) * cols;
        for (int i = 0; i < n; ++i) {
          float* dst = out + (size_t(i) * c + ch) * hw;
          const float* sv = src + i * hw;
          for (int y = 0; y < h; ++y) {
            const int sy = y + r - 1;
            if (sy < 0 || sy >= h) continue;
            const float* srow = sv + size_t(y) * w;
            float* drow = dst + size_t(sy) * w;
            for (int x = 0; x < w; ++x) {
              const int sx = x + s - 1;
              if (sx >= 0 && sx < w) drow[sx] += srow[x];
            }
          }
        }
      }
}

void pool_bias_relu_kmajor(const float* z, const float* b, int n, int k, int h, int w, float* out, uint8_t* arg) {
  const int h2 = h / 2, w2 = w / 2;
  const size_t hw = size_t(h) * w;
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < k; ++ch) {
      const float* zc = z + (size_t(ch) * n + i) * hw;
      float* o = out + (size_t(i) * k + ch) * h2 * w2;
      uint8_t* a = arg + (size_t(i) * k + ch) * h2 * w2;
      for (int y = 0; y < h2; ++y)
        for (int x = 0; x < w2; ++x) {
          const float* p = zc + size_t(2 * y) * w + 2 * x;
          float v[4] = {p[0], p[1], p[w], p[w + 1]};
          int best = 0;
          for (int q = 1; q < 4; ++q)
            if (v[q] > v[best]) best = q;
          o[y * w2 + x] = std::max(v[best] + b[ch], 0.0f);
          a[y * w2 + x] = static_cast<uint8_t>(best);
        }
    }
}

void unpool_relu_kmajor(const float* dout, const float* out, const uint8_t* arg, int n, int k, int h, int w,
                        float* dz, float* db) {
  const int h2 = h / 2, w2 = w / 2;
  const size_t hw = size_t(h) * w;
  std::fill(dz, dz + size_t(k) * n * hw, 0.0f);
  std::fill(db, db + k, 0.0f);
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < k; ++ch) {
      float* zc = dz + (size_t(ch) * n + i) * hw;
      const size_t base = (size_t(i) * k + ch) * h2 * w2;
      float sum = 0.0f;
      for (int y = 0; y < h2; ++y)
        for (int x = 0; x < w2; ++x) {
          const size_t j = base + size_t(y) * w2 + x;
          if (!(out[j] > 0.0f)) continue;
          const float g = dout[j];
          const int q = arg[j];
          zc[size_t(2 * y + (q >> 1)) * w + 2 * x + (q & 1)] = g;
          sum += g;
        }
      db[ch] += sum;
    }
}

void sgd_momentum_update(float* w, const float* g, float* v, size_t count, float lr, float momentum, float wd) {
  for (size_t i = 0; i < count; ++i) {
    const float gi = g[i] + wd * w[i];
    v[i] = momentum * v[i] + gi;
    w[i] -= lr * v[i];
  }
}

}  // namespace tune::train
