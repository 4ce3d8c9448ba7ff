// The network on the CPU: OpenBLAS for every matrix product, im2col for the
// convolutions (one GEMM per layer over the whole batch, which OpenBLAS runs far
// better than one small GEMM per image), plain loops for the rest. It is the reference
// the GPU is checked against, and what CI trains on.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "tune/train/backend.hpp"
#include "tune/train/ops.hpp"

namespace tune::train {

namespace {

class cpu_backend final : public backend {
 public:
  cpu_backend(const hyperparameters& hp, const network& net) : hp_(hp), net_(net), max_n_(hp.batch_size) {
    for (int i = 0; i < 256; ++i) table_[i] = normalise(static_cast<uint8_t>(i));
    w_.assign(net.parameter_count, 0.0f);
    g_.assign(net.parameter_count, 0.0f);
    v_.assign(net.parameter_count, 0.0f);
    const size_t n = static_cast<size_t>(max_n_);
    x_.resize(n * net.input_features);
    y_.resize(n);
    for (const auto& l : net.layers) {
      act_.emplace_back(n * l.out_features());
      dact_.emplace_back(n * l.out_features());
      if (l.kind == layer_kind::conv_block) {
        const size_t hw = size_t(l.height) * l.width;
        z_.emplace_back(n * l.out * hw);
        col_.emplace_back(n * l.in * 9 * hw);
        arg_.emplace_back(n * l.out_features());
      } else {
        z_.emplace_back();
        col_.emplace_back();
        arg_.emplace_back();
      }
    }
  }

  std::string name() const override { return "cpu"; }

  status set_parameters(std::span<const float> p) override {
    if (p.size() != w_.size())
      return {errc::invalid_argument, "set_parameters: " + std::to_string(p.size()) + " values for a network of " +
                                          std::to_string(w_.size()) + " parameters"};
    std::copy(p.begin(), p.end(), w_.begin());
    std::fill(v_.begin(), v_.end(), 0.0f);
    return status::ok();
  }

  expected<std::vector<float>> parameters() override { return w_; }

  status load(split_id which, const image_set& d) override {
    if (d.features() != net_.input_features)
      return {errc::invalid_argument, "images of " + std::to_string(d.features()) + " pixels for a network of " +
                                          std::to_string(net_.input_features) + " inputs"};
    data_[static_cast<int>(which)] = d;
    return status::ok();
  }

  status begin_epoch(std::span<const int32_t> order, float lr) override {
    const auto& t = data_[0];
    if (static_cast<int64_t>(order.size()) != t.count)
      return {errc::invalid_argument, "begin_epoch: an order of " + std::to_string(order.size()) +
                                          " rows for a train split of " + std::to_string(t.count) + " (load it first)"};
    order_.assign(order.begin(), order.end());
    lr_ = lr;
    epoch_ = {};
    return status::ok();
  }

  status step(int64_t first, int count) override {
    if (count <= 0 || count > max_n_ || first < 0 || first + count > static_cast<int64_t>(order_.size()))
      return {errc::invalid_argument, "step: rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                          ") do not fit a batch of " + std::to_string(max_n_) + " in this epoch"};
    gather(data_[0], order_.data() + first, 0, count);
    forward(count);
    epoch_ = epoch_ + softmax_xent(count, true);
    backward(count);
    sgd_momentum_update(w_.data(), g_.data(), v_.data(), w_.size(), lr_,
                        static_cast<float>(hp_.momentum), static_cast<float>(hp_.weight_decay));
    return status::ok();
  }

  expected<sums> end_epoch() override { return epoch_; }

  expected<sums> evaluate(split_id which) override {
    const auto& d = data_[static_cast<int>(which)];
    sums s;
    for (int64_t first = 0; first < d.count; first += max_n_) {
      int n = static_cast<int>(std::min<int64_t>(max_n_, d.count - first));
      gather(d, nullptr, first, n);
      forward(n);
      s = s + softmax_xent(n, false);
    }
    return s;
  }

  expected<float> loss_and_gradient(std::span<const float> x, std::span<const int32_t> y, int n,
                                    std::vector<float>* grad, std::vector<float>* logits) override {
    if (n <= 0 || n > max_n_ || x.size() != size_t(n) * net_.input_features || y.size() != size_t(n))
      return status{errc::invalid_argument, "loss_and_gradient: n must be in [1, batch_size] with n rows of input"};
    std::copy(x.begin(), x.end(), x_.begin());
    std::copy(y.begin(), y.end(), y_.begin());
    forward(n);
    if (logits) logits->assign(act_.back().begin(), act_.back().begin() + size_t(n) * net_.classes);
    sums s = softmax_xent(n, true);
    backward(n);
    if (grad) *grad = g_;
    return static_cast<float>(s.loss / n);
  }

 private:
  // Rows of `d` (order[r], or first + r without an order) into x_ and y_, normalised.
  void gather(const image_set& d, const int32_t* order, int64_t first, int n) {
    const int64_t f = d.features();
    for (int r = 0; r < n; ++r) {
      int64_t src = order ? order[r] : first + r;
      const uint8_t* p = d.pixels.data() + src * f;
      float* out = x_.data() + r * f;
      for (int64_t j = 0; j < f; ++j) out[j] = table_[p[j]];
      y_[r] = d.labels[src];
    }
  }

  void forward(int n) {
    const float* in = x_.data();
    for (size_t li = 0; li < net_.layers.size(); ++li) {
      const layer& l = net_.layers[li];
      float* out = act_[li].data();
      const float* W = w_.data() + l.weight_offset;
      const float* b = w_.data() + l.bias_offset;
      if (l.kind == layer_kind::dense) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, l.out, l.in, 1.0f, in, l.in, W, l.in, 0.0f, out, l.out);
        bias_act(out, b, n, l.out, l.relu);
      } else {
        const int hw = l.height * l.width, c9 = l.in * 9, cols = n * hw;
        im2col3x3(in, n, l.in, l.height, l.width, col_[li].data());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, l.out, cols, c9, 1.0f, W, c9, col_[li].data(), cols,
                    0.0f, z_[li].data(), cols);
        pool_bias_relu_kmajor(z_[li].data(), b, n, l.out, l.height, l.width, out, arg_[li].data());
      }
      in = out;
    }
  }

  sums softmax_xent(int n, bool want_grad) {
    return softmax_cross_entropy(act_.back().data(), y_.data(), n, net_.classes,
                                 want_grad ? dact_.back().data() : nullptr);
  }

  void backward(int n) {
    for (size_t li = net_.layers.size(); li-- > 0;) {
      const layer& l = net_.layers[li];
      const float* in = li == 0 ? x_.data() : act_[li - 1].data();
      float* din = li == 0 ? nullptr : dact_[li - 1].data();
      float* d = dact_[li].data();
      const float* W = w_.data() + l.weight_offset;
      float* dW = g_.data() + l.weight_offset;
      float* db = g_.data() + l.bias_offset;
      if (l.kind == layer_kind::dense) {
        relu_backward_bias_grad(d, act_[li].data(), n, l.out, l.relu, db);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l.out, l.in, n, 1.0f, d, l.out, in, l.in, 0.0f, dW, l.in);
        if (din)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, l.in, l.out, 1.0f, d, l.out, W, l.in, 0.0f, din,
                      l.in);
      } else {
        const int hw = l.height * l.width, c9 = l.in * 9, cols = n * hw;
        float* dz = z_[li].data();  // the pre-pool values are no longer needed
        unpool_relu_kmajor(d, act_[li].data(), arg_[li].data(), n, l.out, l.height, l.width, dz, db);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, l.out, c9, cols, 1.0f, dz, cols, col_[li].data(), cols,
                    0.0f, dW, c9);
        if (din) {
          float* dcol = col_[li].data();  // nor is the im2col matrix, once dW is done
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c9, cols, l.out, 1.0f, W, c9, dz, cols, 0.0f, dcol,
                      cols);
          col2im3x3(dcol, n, l.in, l.height, l.width, din);
        }
      }
    }
  }

  hyperparameters hp_;
  network net_;
  int max_n_;
  float lr_ = 0;
  std::array<float, 256> table_{};
  std::vector<float> w_, g_, v_, x_;
  std::vector<int32_t> y_;
  std::vector<std::vector<float>> act_, dact_, z_, col_;
  std::vector<std::vector<uint8_t>> arg_;
  std::array<image_set, 3> data_;
  std::vector<int32_t> order_;
  sums epoch_;
};

}  // namespace

expected<std::unique_ptr<backend>> make_cpu_backend(const hyperparameters& hp, const network& net) {
  if (auto s = hp.check(); !s) return s;
  return std::unique_ptr<backend>{new cpu_backend(hp, net)};
}

}  // namespace tune::train
