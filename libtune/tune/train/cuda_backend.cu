// The network on one CUDA device. Designed so a step costs the GPU's time, not the
// host's: the data set is resident (as bytes), the epoch's order is on the device and
// a gather kernel builds each batch, the batch offset, the learning rate and the
// loss/accuracy sums live in device memory, and a step (gather, forward, fused
// softmax-cross-entropy, backward, fused SGD update) is captured once per batch size
// as a CUDA graph and replayed. The host waits only in end_epoch and evaluate.
//
// Matrix products are cuBLAS (row-major shapes mapped onto column-major calls below),
// convolutions cuDNN; bias+ReLU, pooling, the loss and the optimiser are our kernels.
// fp32 by default (cuBLAS COMPUTE_32F, cuDNN FMA math), TF32 only when asked.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <vector>

#include "tune/train/backend.hpp"

namespace tune::train {

namespace {

// ---- errors: every call is checked, and the message names it ----------------------

status cuda_fail(const char* call, cudaError_t e) {
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed
  return {e == cudaErrorMemoryAllocation ? errc::insufficient : errc::invalid_argument,
          std::string{call} + " failed: " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")"};
}

status cublas_fail(const char* call, cublasStatus_t e) {
  return {e == CUBLAS_STATUS_ALLOC_FAILED ? errc::insufficient : errc::invalid_argument,
          std::string{call} + " failed: " + cublasGetStatusString(e) + " (cuBLAS status " + std::to_string(int(e)) +
              ")"};
}

status cudnn_fail(const char* call, cudnnStatus_t e) {
  return {e == CUDNN_STATUS_ALLOC_FAILED ? errc::insufficient : errc::invalid_argument,
          std::string{call} + " failed: " + cudnnGetErrorString(e) +
              (e == CUDNN_STATUS_NOT_INITIALIZED ? " (is libcudnn 9 installed and matching this CUDA driver?)" : "")};
}

#define CU(call)                                      \
  do {                                                \
    cudaError_t e_ = (call);                          \
    if (e_ != cudaSuccess) return cuda_fail(#call, e_); \
  } while (0)
#define CUB(call)                                                 \
  do {                                                            \
    cublasStatus_t e_ = (call);                                   \
    if (e_ != CUBLAS_STATUS_SUCCESS) return cublas_fail(#call, e_); \
  } while (0)
#define CUDNN(call)                                              \
  do {                                                           \
    cudnnStatus_t e_ = (call);                                   \
    if (e_ != CUDNN_STATUS_SUCCESS) return cudnn_fail(#call, e_); \
  } while (0)
#define LAUNCHED(name) CU(cudaPeekAtLastError() == cudaSuccess ? cudaSuccess : cudaGetLastError())
#define TRY(expr)          \
  do {                     \
    status s_ = (expr);    \
    if (!s_) return s_;    \
  } while (0)

// ---- kernels --------------------------------------------------------------------

struct counters {
  int64_t offset;               // next row of the epoch's order
  double loss;                  // epoch sums, read once per epoch
  unsigned long long correct;
  double eval_loss;             // evaluate()'s sums
  unsigned long long eval_correct;
  float lr;                     // this epoch's learning rate
};

__device__ __forceinline__ float normalise_dev(uint8_t p) {
  return (static_cast<float>(p) / 255.0f - pixel_mean) / pixel_std;  // as data.hpp, to the bit
}

// x[r] = normalised pixels of row order[base + r] (or base + r without an order);
// base is counters.offset for training steps, `first` for evaluation.
__global__ void gather_kernel(const uint8_t* __restrict__ pixels, const uint8_t* __restrict__ labels,
                              const int32_t* __restrict__ order, const counters* c, int64_t first, int features,
                              float* __restrict__ x, int32_t* __restrict__ y) {
  const int r = blockIdx.x;
  const int64_t base = c ? c->offset : first;
  const int64_t src = order ? order[base + r] : base + r;
  const uint8_t* p = pixels + src * features;
  float* out = x + int64_t(r) * features;
  for (int j = threadIdx.x; j < features; j += blockDim.x) out[j] = normalise_dev(p[j]);
  if (threadIdx.x == 0) y[r] = labels[src];
}

__global__ void bias_act_kernel(float* __restrict__ z, const float* __restrict__ b, int n, int m, bool relu) {
  const int64_t total = int64_t(n) * m;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float v = z[i] + b[i % m];
    z[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

// d *= (a > 0) when relu; db[j] = column sums of d. Block: 32 columns x 8 row lanes.
__global__ void relu_bias_grad_kernel(float* __restrict__ d, const float* __restrict__ a, int n, int m, bool relu,
                                      float* __restrict__ db) {
  __shared__ float part[8][33];
  const int j = blockIdx.x * 32 + threadIdx.x;
  float sum = 0.0f;
  if (j < m)
    for (int r = threadIdx.y; r < n; r += 8) {
      const int64_t i = int64_t(r) * m + j;
      float v = d[i];
      if (relu) {
        v = a[i] > 0.0f ? v : 0.0f;
        d[i] = v;
      }
      sum += v;
    }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && j < m) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += part[k][threadIdx.x];
    db[j] = t;
  }
}

// One thread per sample: loss, correctness, and (with dlogits) the gradient of the
// mean loss; per-block sums go to the counters with one atomic each.
__global__ void softmax_xent_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels, int n,
                                    int classes, float* __restrict__ dlogits, double* loss_sum,
                                    unsigned long long* correct_sum) {
  __shared__ double sloss[256];
  __shared__ unsigned int scorrect[256];
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  double loss = 0.0;
  unsigned int correct = 0;
  if (r < n) {
    const float* z = logits + int64_t(r) * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c)
      if (z[c] > z[best]) best = c;
    const float mx = z[best];
    float total = 0.0f;
    for (int c = 0; c < classes; ++c) total += expf(z[c] - mx);
    const float lse = mx + logf(total);
    const int label = labels[r];
    loss = double(lse - z[label]);
    correct = best == label;
    if (dlogits)
      for (int c = 0; c < classes; ++c)
        dlogits[int64_t(r) * classes + c] = (expf(z[c] - lse) - (c == label ? 1.0f : 0.0f)) / n;
  }
  sloss[threadIdx.x] = loss;
  scorrect[threadIdx.x] = correct;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      sloss[threadIdx.x] += sloss[threadIdx.x + s];
      scorrect[threadIdx.x] += scorrect[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(loss_sum, sloss[0]);
    atomicAdd(correct_sum, static_cast<unsigned long long>(scorrect[0]));
  }
}

// z [n, k, h, w] -> out [n, k, h/2, w/2] = relu(max of the 2x2 window + b); arg = the
// window position of the max, first one on ties (as ops.cpp).
__global__ void pool_fwd_kernel(const float* __restrict__ z, const float* __restrict__ b, int n, int k, int h, int w,
                                float* __restrict__ out, uint8_t* __restrict__ arg) {
  const int h2 = h / 2, w2 = w / 2;
  const int64_t total = int64_t(n) * k * h2 * w2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int x = i % w2, y = (i / w2) % h2;
    const int64_t plane = i / (int64_t(h2) * w2);  // = sample * k + channel
    const float* p = z + plane * h * w + int64_t(2 * y) * w + 2 * x;
    float v[4] = {p[0], p[1], p[w], p[w + 1]};
    int best = 0;
    for (int q = 1; q < 4; ++q)
      if (v[q] > v[best]) best = q;
    out[i] = fmaxf(v[best] + b[plane % k], 0.0f);
    arg[i] = static_cast<uint8_t>(best);
  }
}

// The pool's gradient: dz [n, k, h, w] (zero but at each argmax where out > 0), and per
// (channel, slice of samples) partial bias sums, reduced by bias_partials_kernel.
__global__ void pool_bwd_kernel(const float* __restrict__ dout, const float* __restrict__ out,
                                const uint8_t* __restrict__ arg, int n, int k, int h, int w, float* __restrict__ dz,
                                float* __restrict__ partial) {
  __shared__ float sh[256];
  const int ch = blockIdx.x, slice = blockIdx.y, slices = gridDim.y;
  const int h2 = h / 2, w2 = w / 2, hw2 = h2 * w2;
  const int i0 = int(int64_t(n) * slice / slices), i1 = int(int64_t(n) * (slice + 1) / slices);
  float sum = 0.0f;
  for (int64_t t = threadIdx.x; t < int64_t(i1 - i0) * hw2; t += blockDim.x) {
    const int i = i0 + int(t / hw2), pos = int(t % hw2);
    const int64_t j = (int64_t(i) * k + ch) * hw2 + pos;
    const float g = out[j] > 0.0f ? dout[j] : 0.0f;
    const int q = arg[j], y = pos / w2, x = pos % w2;
    float* d = dz + (int64_t(i) * k + ch) * h * w + int64_t(2 * y) * w + 2 * x;
    d[0] = q == 0 ? g : 0.0f;
    d[1] = q == 1 ? g : 0.0f;
    d[w] = q == 2 ? g : 0.0f;
    d[w + 1] = q == 3 ? g : 0.0f;
    sum += g;
  }
  sh[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[ch * slices + slice] = sh[0];
}

__global__ void bias_partials_kernel(const float* __restrict__ partial, int k, int slices, float* __restrict__ db) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= k) return;
  float t = 0.0f;
  for (int s = 0; s < slices; ++s) t += partial[ch * slices + s];
  db[ch] = t;
}

// PyTorch's SGD over the whole flat parameter vector; then the step's batch offset
// advances (in the same graph, so the next replay reads the next rows).
__global__ void sgd_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ v, int64_t count,
                           counters* c, float momentum, float wd, int advance) {
  const float lr = c->lr;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] + wd * w[i];
    const float vi = momentum * v[i] + gi;
    v[i] = vi;
    w[i] -= lr * vi;
  }
  if (advance && blockIdx.x == 0 && threadIdx.x == 0) c->offset += advance;
}

int grid_for(int64_t total, int block = 256) {
  return static_cast<int>(std::min<int64_t>((total + block - 1) / block, 4096));
}

// ---- device memory --------------------------------------------------------------

template <class T>
class dbuf {
 public:
  dbuf() = default;
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  dbuf(dbuf&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  dbuf& operator=(dbuf&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~dbuf() { reset(); }
  status alloc(size_t count, const char* what) {
    reset();
    if (count == 0) return status::ok();
    cudaError_t e = cudaMalloc(&p_, count * sizeof(T));
    if (e != cudaSuccess) {
      p_ = nullptr;
      cudaGetLastError();
      return {errc::insufficient, std::string{"cudaMalloc of "} + std::to_string(count * sizeof(T)) + " bytes for " +
                                      what + " failed: " + cudaGetErrorString(e) +
                                      " (lower batch_size or width, or use a card with more free memory)"};
    }
    n_ = count;
    return status::ok();
  }
  void reset() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Descriptors and algorithms of one conv layer for one batch size.
struct conv_plan {
  cudnnTensorDescriptor_t x = nullptr, z = nullptr;
  cudnnConvolutionDescriptor_t fwd = nullptr, bwd_data = nullptr, bwd_filter = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t data_algo{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo{};
};

struct shape_plan {
  std::vector<conv_plan> conv;  // one per layer (unused for dense layers)
  cudaGraphExec_t graph = nullptr;
  bool warmed = false;  // ran eagerly once: libraries have done their lazy set-up
};

constexpr size_t find_workspace_bytes = size_t{256} << 20;
constexpr size_t cublas_workspace_bytes = size_t{32} << 20;
constexpr int bias_slices = 16;

class cuda_backend final : public backend {
 public:
  cuda_backend(const hyperparameters& hp, const network& net, int device)
      : hp_(hp), net_(net), device_(device), max_n_(hp.batch_size) {}

  ~cuda_backend() override {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    for (auto& [n, p] : plans_) destroy_plan(p);
    for (auto f : filters_)
      if (f) cudnnDestroyFilterDescriptor(f);
    if (cublas_) cublasDestroy(cublas_);
    if (cudnn_) cudnnDestroy(cudnn_);
    if (host_order_) cudaFreeHost(host_order_);
    if (host_counters_) cudaFreeHost(host_counters_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  status init() {
    CU(cudaSetDevice(device_));
    cudaDeviceProp prop{};
    CU(cudaGetDeviceProperties(&prop, device_));
    name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
    CU(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUB(cublasCreate(&cublas_));
    CUB(cublasSetStream(cublas_, stream_));
    TRY(cublas_ws_.alloc(cublas_workspace_bytes, "the cuBLAS workspace"));
    // A fixed workspace: cuBLAS must not allocate while a step is being captured.
    CUB(cublasSetWorkspace(cublas_, cublas_ws_.get(), cublas_workspace_bytes));
    gemm_compute_ = hp_.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const size_t n = size_t(max_n_);
    TRY(w_.alloc(net_.parameter_count, "the parameters"));
    TRY(g_.alloc(net_.parameter_count, "the gradients"));
    TRY(v_.alloc(net_.parameter_count, "the momentum"));
    TRY(x_.alloc(n * net_.input_features, "the input batch"));
    TRY(y_.alloc(n, "the labels"));
    TRY(counters_.alloc(1, "the counters"));
    CU(cudaMemsetAsync(counters_.get(), 0, sizeof(counters), stream_));
    CU(cudaMallocHost(&host_counters_, sizeof(counters)));
    act_.resize(net_.layers.size());
    dact_.resize(net_.layers.size());
    z_.resize(net_.layers.size());
    arg_.resize(net_.layers.size());
    filters_.assign(net_.layers.size(), nullptr);
    size_t max_k = 1;
    for (size_t li = 0; li < net_.layers.size(); ++li) {
      const layer& l = net_.layers[li];
      TRY(act_[li].alloc(n * l.out_features(), "activations"));
      TRY(dact_[li].alloc(n * l.out_features(), "activation gradients"));
      if (l.kind == layer_kind::conv_block) {
        if (!cudnn_) {
          CUDNN(cudnnCreate(&cudnn_));
          CUDNN(cudnnSetStream(cudnn_, stream_));
        }
        TRY(z_[li].alloc(n * l.out * l.height * l.width, "convolution outputs"));
        TRY(arg_[li].alloc(n * l.out_features(), "pooling choices"));
        CUDNN(cudnnCreateFilterDescriptor(&filters_[li]));
        CUDNN(cudnnSetFilter4dDescriptor(filters_[li], CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, l.out, l.in, 3, 3));
        max_k = std::max(max_k, size_t(l.out));
      }
    }
    TRY(partial_.alloc(max_k * bias_slices, "bias partial sums"));
    if (const char* e = std::getenv("TUNE_TRAIN_NO_GRAPHS")) graphs_ = std::string{e} != "1";
    return status::ok();
  }

  std::string name() const override { return name_; }

  status set_parameters(std::span<const float> p) override {
    CU(cudaSetDevice(device_));
    if (p.size() != net_.parameter_count)
      return {errc::invalid_argument, "set_parameters: " + std::to_string(p.size()) + " values for a network of " +
                                          std::to_string(net_.parameter_count) + " parameters"};
    CU(cudaStreamSynchronize(stream_));
    CU(cudaMemcpy(w_.get(), p.data(), p.size() * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemset(v_.get(), 0, p.size() * sizeof(float)));
    return status::ok();
  }

  expected<std::vector<float>> parameters() override {
    CU(cudaSetDevice(device_));
    std::vector<float> out(net_.parameter_count);
    CU(cudaStreamSynchronize(stream_));
    CU(cudaMemcpy(out.data(), w_.get(), out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
  }

  status load(split_id which, const image_set& d) override {
    CU(cudaSetDevice(device_));
    if (d.features() != net_.input_features)
      return {errc::invalid_argument, "images of " + std::to_string(d.features()) + " pixels for a network of " +
                                          std::to_string(net_.input_features) + " inputs"};
    auto& s = data_[static_cast<int>(which)];
    TRY(s.pixels.alloc(d.pixels.size(), "the data set"));
    TRY(s.labels.alloc(d.labels.size(), "the labels"));
    CU(cudaMemcpy(s.pixels.get(), d.pixels.data(), d.pixels.size(), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(s.labels.get(), d.labels.data(), d.labels.size(), cudaMemcpyHostToDevice));
    s.count = d.count;
    if (which == split_id::train) {
      TRY(order_.alloc(size_t(d.count), "the epoch order"));
      if (host_order_) cudaFreeHost(host_order_);
      host_order_ = nullptr;
      CU(cudaMallocHost(&host_order_, size_t(d.count) * sizeof(int32_t)));
    }
    return status::ok();
  }

  status begin_epoch(std::span<const int32_t> order, float lr) override {
    CU(cudaSetDevice(device_));
    const auto& t = data_[0];
    if (static_cast<int64_t>(order.size()) != t.count || t.count == 0)
      return {errc::invalid_argument, "begin_epoch: an order of " + std::to_string(order.size()) +
                                          " rows for a train split of " + std::to_string(t.count) + " (load it first)"};
    CU(cudaStreamSynchronize(stream_));  // the pinned buffers are free again
    std::copy(order.begin(), order.end(), host_order_);
    *host_counters_ = counters{};
    host_counters_->lr = lr;
    CU(cudaMemcpyAsync(order_.get(), host_order_, order.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    CU(cudaMemcpyAsync(counters_.get(), host_counters_, sizeof(counters), cudaMemcpyHostToDevice, stream_));
    next_first_ = 0;
    epoch_count_ = 0;
    return status::ok();
  }

  status step(int64_t first, int count) override {
    CU(cudaSetDevice(device_));
    if (count <= 0 || count > max_n_ || first != next_first_ || first + count > data_[0].count)
      return {errc::invalid_argument, "step: rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                          ") are not the next batch of at most " + std::to_string(max_n_) +
                                          " after row " + std::to_string(next_first_) + " (call begin_epoch first)"};
    auto plan = plan_for(count);
    if (!plan) return plan.error();
    shape_plan& p = **plan;
    if (p.graph) {
      CU(cudaGraphLaunch(p.graph, stream_));
    } else if (!graphs_ || !p.warmed) {
      TRY(train_step(count));
      p.warmed = true;
    } else {
      TRY(capture(p, count));
      CU(cudaGraphLaunch(p.graph, stream_));
    }
    next_first_ += count;
    epoch_count_ += count;
    return status::ok();
  }

  expected<sums> end_epoch() override {
    CU(cudaSetDevice(device_));
    CU(cudaMemcpyAsync(host_counters_, counters_.get(), sizeof(counters), cudaMemcpyDeviceToHost, stream_));
    CU(cudaStreamSynchronize(stream_));
    return sums{host_counters_->loss, static_cast<int64_t>(host_counters_->correct), epoch_count_};
  }

  expected<sums> evaluate(split_id which) override {
    CU(cudaSetDevice(device_));
    const auto& d = data_[static_cast<int>(which)];
    TRY(reset_eval_sums());
    for (int64_t first = 0; first < d.count; first += max_n_) {
      const int n = static_cast<int>(std::min<int64_t>(max_n_, d.count - first));
      auto plan = plan_for(n);
      if (!plan) return plan.error();
      gather_kernel<<<n, 256, 0, stream_>>>(d.pixels.get(), d.labels.get(), nullptr, nullptr, first,
                                            int(net_.input_features), x_.get(), y_.get());
      CU(cudaGetLastError());
      TRY(forward(**plan, n));
      TRY(xent(n, false, true));
    }
    return read_eval_sums(d.count);
  }

  expected<float> loss_and_gradient(std::span<const float> x, std::span<const int32_t> y, int n,
                                    std::vector<float>* grad, std::vector<float>* logits) override {
    CU(cudaSetDevice(device_));
    if (n <= 0 || n > max_n_ || x.size() != size_t(n) * net_.input_features || y.size() != size_t(n))
      return status{errc::invalid_argument, "loss_and_gradient: n must be in [1, batch_size] with n rows of input"};
    auto plan = plan_for(n);
    if (!plan) return plan.error();
    CU(cudaStreamSynchronize(stream_));
    CU(cudaMemcpy(x_.get(), x.data(), x.size_bytes(), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(y_.get(), y.data(), y.size_bytes(), cudaMemcpyHostToDevice));
    TRY(reset_eval_sums());
    TRY(forward(**plan, n));
    TRY(xent(n, true, true));
    TRY(backward(**plan, n));
    auto s = read_eval_sums(n);
    if (!s) return s.error();
    if (grad) {
      grad->resize(net_.parameter_count);
      CU(cudaMemcpy(grad->data(), g_.get(), grad->size() * sizeof(float), cudaMemcpyDeviceToHost));
    }
    if (logits) {
      logits->resize(size_t(n) * net_.classes);
      CU(cudaMemcpy(logits->data(), act_.back().get(), logits->size() * sizeof(float), cudaMemcpyDeviceToHost));
    }
    return static_cast<float>(s->loss / n);
  }

 private:
  struct split_data {
    dbuf<uint8_t> pixels, labels;
    int64_t count = 0;
  };

  // ---- one step, as launches on the stream (run eagerly or under capture) ----

  status train_step(int n) {
    gather_kernel<<<n, 256, 0, stream_>>>(data_[0].pixels.get(), data_[0].labels.get(), order_.get(),
                                          counters_.get(), 0, int(net_.input_features), x_.get(), y_.get());
    CU(cudaGetLastError());
    auto plan = plan_for(n);
    if (!plan) return plan.error();
    TRY(forward(**plan, n));
    TRY(xent(n, true, false));
    TRY(backward(**plan, n));
    sgd_kernel<<<grid_for(int64_t(net_.parameter_count)), 256, 0, stream_>>>(
        w_.get(), g_.get(), v_.get(), int64_t(net_.parameter_count), counters_.get(), float(hp_.momentum),
        float(hp_.weight_decay), n);
    CU(cudaGetLastError());
    return status::ok();
  }

  status capture(shape_plan& p, int n) {
    CU(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    status s = train_step(n);
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (!s) {
      if (graph) cudaGraphDestroy(graph);
      return s;
    }
    if (e != cudaSuccess) return cuda_fail("cudaStreamEndCapture (capturing a training step)", e);
    e = cudaGraphInstantiate(&p.graph, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      p.graph = nullptr;
      return cuda_fail("cudaGraphInstantiate (a training step)", e);
    }
    return status::ok();
  }

  status gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a, int lda,
              const float* b, int ldb, float* c, int ldc) {
    const float one = 1.0f, zero = 0.0f;
    CUB(cublasGemmEx(cublas_, ta, tb, m, n, k, &one, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, &zero, c, CUDA_R_32F,
                     ldc, gemm_compute_, CUBLAS_GEMM_DEFAULT));
    return status::ok();
  }

  status forward(const shape_plan& p, int n) {
    const float* in = x_.get();
    for (size_t li = 0; li < net_.layers.size(); ++li) {
      const layer& l = net_.layers[li];
      float* out = act_[li].get();
      const float* W = w_.get() + l.weight_offset;
      const float* b = w_.get() + l.bias_offset;
      if (l.kind == layer_kind::dense) {
        // Row-major Y[n,out] = X[n,in] W^T is column-major Y^T = W X^T.
        TRY(gemm(CUBLAS_OP_T, CUBLAS_OP_N, l.out, n, l.in, W, l.in, in, l.in, out, l.out));
        bias_act_kernel<<<grid_for(int64_t(n) * l.out), 256, 0, stream_>>>(out, b, n, l.out, l.relu);
        CU(cudaGetLastError());
      } else {
        const conv_plan& c = p.conv[li];
        const float one = 1.0f, zero = 0.0f;
        CUDNN(cudnnConvolutionForward(cudnn_, &one, c.x, in, filters_[li], W, c.fwd, c.fwd_algo, conv_ws_.get(),
                                      conv_ws_.size(), &zero, c.z, z_[li].get()));
        pool_fwd_kernel<<<grid_for(int64_t(n) * l.out_features()), 256, 0, stream_>>>(
            z_[li].get(), b, n, l.out, l.height, l.width, out, arg_[li].get());
        CU(cudaGetLastError());
      }
      in = out;
    }
    return status::ok();
  }

  // Training sums into the epoch counters, evaluation (and tests) into the eval ones.
  status xent(int n, bool want_grad, bool eval) {
    counters* c = counters_.get();
    softmax_xent_kernel<<<(n + 255) / 256, 256, 0, stream_>>>(
        act_.back().get(), y_.get(), n, net_.classes, want_grad ? dact_.back().get() : nullptr,
        eval ? &c->eval_loss : &c->loss, eval ? &c->eval_correct : &c->correct);
    CU(cudaGetLastError());
    return status::ok();
  }

  status backward(const shape_plan& p, int n) {
    for (size_t li = net_.layers.size(); li-- > 0;) {
      const layer& l = net_.layers[li];
      const float* in = li == 0 ? x_.get() : act_[li - 1].get();
      float* din = li == 0 ? nullptr : dact_[li - 1].get();
      float* d = dact_[li].get();
      const float* W = w_.get() + l.weight_offset;
      float* dW = g_.get() + l.weight_offset;
      float* db = g_.get() + l.bias_offset;
      if (l.kind == layer_kind::dense) {
        relu_bias_grad_kernel<<<(l.out + 31) / 32, dim3(32, 8), 0, stream_>>>(d, act_[li].get(), n, l.out, l.relu,
                                                                             db);
        CU(cudaGetLastError());
        // dW[out,in] = dY^T X is column-major dW^T = X^T-as-stored times dY.
        TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, n, in, l.in, d, l.out, dW, l.in));
        // dX[n,in] = dY W is column-major dX^T = W^T-as-stored times dY^T.
        if (din) TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_N, l.in, n, l.out, W, l.in, d, l.out, din, l.in));
      } else {
        const conv_plan& c = p.conv[li];
        float* dz = z_[li].get();  // the pre-pool values are not needed any more
        pool_bwd_kernel<<<dim3(l.out, bias_slices), 256, 0, stream_>>>(d, act_[li].get(), arg_[li].get(), n, l.out,
                                                                       l.height, l.width, dz, partial_.get());
        CU(cudaGetLastError());
        bias_partials_kernel<<<(l.out + 63) / 64, 64, 0, stream_>>>(partial_.get(), l.out, bias_slices, db);
        CU(cudaGetLastError());
        const float one = 1.0f, zero = 0.0f;
        CUDNN(cudnnConvolutionBackwardFilter(cudnn_, &one, c.x, in, c.z, dz, c.bwd_filter, c.filter_algo,
                                             conv_ws_.get(), conv_ws_.size(), &zero, filters_[li], dW));
        if (din)
          CUDNN(cudnnConvolutionBackwardData(cudnn_, &one, filters_[li], W, c.z, dz, c.bwd_data, c.data_algo,
                                             conv_ws_.get(), conv_ws_.size(), &zero, c.x, din));
      }
    }
    return status::ok();
  }

  status reset_eval_sums() {
    counters* c = counters_.get();
    CU(cudaMemsetAsync(&c->eval_loss, 0, sizeof(double), stream_));
    CU(cudaMemsetAsync(&c->eval_correct, 0, sizeof(unsigned long long), stream_));
    return status::ok();
  }

  expected<sums> read_eval_sums(int64_t count) {
    CU(cudaMemcpyAsync(host_counters_, counters_.get(), sizeof(counters), cudaMemcpyDeviceToHost, stream_));
    CU(cudaStreamSynchronize(stream_));
    return sums{host_counters_->eval_loss, static_cast<int64_t>(host_counters_->eval_correct), count};
  }

  // ---- per batch size: cuDNN descriptors and algorithms, and the step's graph ----

  expected<shape_plan*> plan_for(int n) {
    auto it = plans_.find(n);
    if (it != plans_.end()) return &it->second;
    shape_plan p;
    p.conv.resize(net_.layers.size());
    status s = make_conv_plans(p, n);
    if (!s) {
      destroy_plan(p);
      return s;
    }
    return &plans_.emplace(n, std::move(p)).first->second;
  }

  status make_conv_plans(shape_plan& p, int n) {
    size_t need = conv_ws_.size();
    dbuf<uint8_t> find_ws;
    const cudnnMathType_t math = hp_.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    for (size_t li = 0; li < net_.layers.size(); ++li) {
      const layer& l = net_.layers[li];
      if (l.kind != layer_kind::conv_block) continue;
      conv_plan& c = p.conv[li];
      CUDNN(cudnnCreateTensorDescriptor(&c.x));
      CUDNN(cudnnCreateTensorDescriptor(&c.z));
      CUDNN(cudnnSetTensor4dDescriptor(c.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, l.in, l.height, l.width));
      CUDNN(cudnnSetTensor4dDescriptor(c.z, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, l.out, l.height, l.width));
      for (auto* d : {&c.fwd, &c.bwd_data, &c.bwd_filter}) {
        CUDNN(cudnnCreateConvolutionDescriptor(d));
        CUDNN(cudnnSetConvolution2dDescriptor(*d, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        CUDNN(cudnnSetConvolutionMathType(*d, math));
      }
      if (!find_ws.get()) TRY(find_ws.alloc(find_workspace_bytes, "cuDNN's algorithm search"));
      CU(cudaStreamSynchronize(stream_));  // the search runs the buffers' kernels
      const float* x = li == 0 ? x_.get() : act_[li - 1].get();
      float* dx = li == 0 ? dact_[0].get() : dact_[li - 1].get();  // scratch for layer 0
      // The fastest algorithm that fits and keeps fp32 math unless TF32 was asked for.
      auto acceptable = [&](cudnnStatus_t st, size_t memory, cudnnMathType_t m) {
        return st == CUDNN_STATUS_SUCCESS && memory <= find_workspace_bytes && (hp_.tf32 || m == CUDNN_FMA_MATH);
      };
      {
        std::array<cudnnConvolutionFwdAlgoPerf_t, 8> perf{};
        int got = 0;
        CUDNN(cudnnFindConvolutionForwardAlgorithmEx(cudnn_, c.x, x, filters_[li], w_.get() + l.weight_offset, c.fwd,
                                                     c.z, z_[li].get(), int(perf.size()), &got, perf.data(),
                                                     find_ws.get(), find_workspace_bytes));
        int pick = -1;
        for (int i = 0; i < got && pick < 0; ++i)
          if (acceptable(perf[i].status, perf[i].memory, perf[i].mathType)) pick = i;
        if (pick < 0) return no_algorithm("forward", l, n);
        c.fwd_algo = perf[pick].algo;
        CUDNN(cudnnSetConvolutionMathType(c.fwd, perf[pick].mathType));
        need = std::max(need, perf[pick].memory);
      }
      {
        std::array<cudnnConvolutionBwdFilterAlgoPerf_t, 8> perf{};
        int got = 0;
        CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnn_, c.x, x, c.z, z_[li].get(), c.bwd_filter,
                                                            filters_[li], g_.get() + l.weight_offset,
                                                            int(perf.size()), &got, perf.data(), find_ws.get(),
                                                            find_workspace_bytes));
        int pick = -1;
        for (int i = 0; i < got && pick < 0; ++i)
          if (acceptable(perf[i].status, perf[i].memory, perf[i].mathType)) pick = i;
        if (pick < 0) return no_algorithm("backward filter", l, n);
        c.filter_algo = perf[pick].algo;
        CUDNN(cudnnSetConvolutionMathType(c.bwd_filter, perf[pick].mathType));
        need = std::max(need, perf[pick].memory);
      }
      if (li > 0) {
        std::array<cudnnConvolutionBwdDataAlgoPerf_t, 8> perf{};
        int got = 0;
        CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(cudnn_, filters_[li], w_.get() + l.weight_offset, c.z,
                                                          z_[li].get(), c.bwd_data, c.x, dx, int(perf.size()), &got,
                                                          perf.data(), find_ws.get(), find_workspace_bytes));
        int pick = -1;
        for (int i = 0; i < got && pick < 0; ++i)
          if (acceptable(perf[i].status, perf[i].memory, perf[i].mathType)) pick = i;
        if (pick < 0) return no_algorithm("backward data", l, n);
        c.data_algo = perf[pick].algo;
        CUDNN(cudnnSetConvolutionMathType(c.bwd_data, perf[pick].mathType));
        need = std::max(need, perf[pick].memory);
      }
    }
    if (need > conv_ws_.size()) {
      // Captured graphs hold the old workspace's address: drop them, they are
      // captured again on their next use.
      CU(cudaStreamSynchronize(stream_));
      for (auto& [k, q] : plans_)
        if (q.graph) {
          cudaGraphExecDestroy(q.graph);
          q.graph = nullptr;
        }
      TRY(conv_ws_.alloc(need, "the cuDNN workspace"));
    }
    return status::ok();
  }

  status no_algorithm(const char* what, const layer& l, int n) {
    return {errc::invalid_argument, std::string{"cuDNN offers no "} + (hp_.tf32 ? "" : "fp32 (FMA) ") + what +
                                        " convolution algorithm for " + std::to_string(l.in) + "->" +
                                        std::to_string(l.out) + " channels at " + std::to_string(l.height) + "x" +
                                        std::to_string(l.width) + ", batch " + std::to_string(n) +
                                        (hp_.tf32 ? "" : "; try --tf32")};
  }

  void destroy_plan(shape_plan& p) {
    if (p.graph) cudaGraphExecDestroy(p.graph);
    p.graph = nullptr;
    for (auto& c : p.conv) {
      if (c.x) cudnnDestroyTensorDescriptor(c.x);
      if (c.z) cudnnDestroyTensorDescriptor(c.z);
      for (auto d : {c.fwd, c.bwd_data, c.bwd_filter})
        if (d) cudnnDestroyConvolutionDescriptor(d);
      c = {};
    }
  }

  hyperparameters hp_;
  network net_;
  int device_;
  int max_n_;
  std::string name_;
  bool graphs_ = true;  // TUNE_TRAIN_NO_GRAPHS=1 runs every step eagerly (debugging)
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasComputeType_t gemm_compute_ = CUBLAS_COMPUTE_32F;
  dbuf<uint8_t> cublas_ws_, conv_ws_;
  dbuf<float> w_, g_, v_, x_, partial_;
  dbuf<int32_t> y_, order_;
  dbuf<counters> counters_;
  std::vector<dbuf<float>> act_, dact_, z_;
  std::vector<dbuf<uint8_t>> arg_;
  std::vector<cudnnFilterDescriptor_t> filters_;
  std::array<split_data, 3> data_;
  std::map<int, shape_plan> plans_;
  int32_t* host_order_ = nullptr;
  counters* host_counters_ = nullptr;
  int64_t next_first_ = 0, epoch_count_ = 0;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

expected<std::unique_ptr<backend>> make_cuda_backend(const hyperparameters& hp, const network& net, int device) {
  if (auto s = hp.check(); !s) return s;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return status{errc::invalid_argument, "device cuda:" + std::to_string(device) + " asked for, but CUDA reports " +
                                              cudaGetErrorString(e) + ": use --device cpu, or check the driver"};
  }
  if (device < 0 || device >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return status{errc::invalid_argument,
                  "device cuda:" + std::to_string(device) + " does not exist: this process sees " +
                      std::to_string(count) + " CUDA device(s)" +
                      (visible ? std::string{" (CUDA_VISIBLE_DEVICES="} + visible + ")" : std::string{})};
  }
  auto b = std::make_unique<cuda_backend>(hp, net, device);
  if (auto s = b->init(); !s) return s;
  return std::unique_ptr<backend>{std::move(b)};
}

}  // namespace tune::train
