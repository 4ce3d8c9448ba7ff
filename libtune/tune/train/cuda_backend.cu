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
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tune/train/backend.hpp"
#include "tune/train/data.hpp"

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
// base is counters.offset + first for training steps (first = 0 on one device, the
// replica's share's start in a data-parallel step), `first` for evaluation.
__global__ void gather_kernel(const uint8_t* __restrict__ pixels, const uint8_t* __restrict__ labels,
                              const int32_t* __restrict__ order, const counters* c, int64_t first, int features,
                              float* __restrict__ x, int32_t* __restrict__ y) {
  const int r = blockIdx.x;
  const int64_t base = (c ? c->offset : 0) + first;
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
// loss summed over the n rows and divided by `divisor` (n: the mean; a data-parallel
// replica divides by the whole step's batch, so the replicas' gradients add up to the
// full batch's mean); per-block sums go to the counters with one atomic each.
__global__ void softmax_xent_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels, int n,
                                    int classes, int divisor, float* __restrict__ dlogits, double* loss_sum,
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
        dlogits[int64_t(r) * classes + c] = (expf(z[c] - lse) - (c == label ? 1.0f : 0.0f)) / divisor;
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

// The pool's gradient: dz [n, k, h, w] (zero but at each argmax where out > 0; not
// written when dz is null: the pooled kernels need none), and per (channel, slice of
// samples) partial bias sums, reduced by bias_partials_kernel.
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
    if (dz) {
      float* d = dz + (int64_t(i) * k + ch) * h * w + int64_t(2 * y) * w + 2 * x;
      d[0] = q == 0 ? g : 0.0f;
      d[1] = q == 1 ? g : 0.0f;
      d[w] = q == 2 ? g : 0.0f;
      d[w + 1] = q == 3 ? g : 0.0f;
    }
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

// The first conv block fused (one input channel, the images): 3x3 convolution
// (padding 1), + bias, ReLU, 2x2 max pool in one pass, one block per sample, the image
// and the weights in shared memory. The pre-pool values are never written (cuDNN's
// convolution wrote them, 12.8 MB a step at batch 128, and the pool read them back);
// out and arg as pool_fwd_kernel (the same first-on-ties rule).
// With a source (src.pixels), the block also does gather_kernel's work for its sample:
// reads the row's pixels, writes them normalised to x (for the backward pass) and its
// label to y; without, it reads x.
struct rows_source {
  const uint8_t* pixels = nullptr;
  const uint8_t* labels = nullptr;
  const int32_t* order = nullptr;
  const counters* c = nullptr;
  int64_t first = 0;
};

__global__ void conv1_block_fwd_kernel(rows_source src, float* __restrict__ x, int32_t* __restrict__ y,
                                       const float* __restrict__ W, const float* __restrict__ b, int k, int h, int w,
                                       float* __restrict__ out, uint8_t* __restrict__ arg) {
  extern __shared__ float sm[];
  const int hp = h + 2, wp = w + 2, h2 = h / 2, w2 = w / 2, hw2 = h2 * w2;
  float* img = sm;             // (h + 2) x (w + 2), zero border
  float* sw = img + hp * wp;   // k x 9
  float* sb = sw + k * 9;      // k
  const int64_t n = blockIdx.x;
  float* xs = x + n * h * w;
  if (src.pixels) {
    const int64_t base = (src.c ? src.c->offset : 0) + src.first;
    const int64_t row = src.order ? src.order[base + n] : base + n;
    const uint8_t* p = src.pixels + row * h * w;
    for (int i = threadIdx.x; i < hp * wp; i += blockDim.x) {
      const int r = i / wp, c = i % wp;
      float v = 0.0f;
      if (r > 0 && r < hp - 1 && c > 0 && c < wp - 1) {
        v = normalise_dev(p[(r - 1) * w + (c - 1)]);
        xs[(r - 1) * w + (c - 1)] = v;
      }
      img[i] = v;
    }
    if (threadIdx.x == 0) y[n] = src.labels[row];
  } else {
    for (int i = threadIdx.x; i < hp * wp; i += blockDim.x) {
      const int r = i / wp, c = i % wp;
      img[i] = r == 0 || r == hp - 1 || c == 0 || c == wp - 1 ? 0.0f : xs[(r - 1) * w + (c - 1)];
    }
  }
  for (int i = threadIdx.x; i < k * 9; i += blockDim.x) sw[i] = W[i];
  for (int i = threadIdx.x; i < k; i += blockDim.x) sb[i] = b[i];
  __syncthreads();
  for (int t = threadIdx.x; t < k * hw2; t += blockDim.x) {
    const int ch = t / hw2, pos = t % hw2, py = pos / w2, px = pos % w2;
    // The 4x4 patch under the pool window's four 3x3 convolutions.
    const float* p = img + (2 * py) * wp + 2 * px;
    float q[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) q[r][c] = p[r * wp + c];
    const float* wk = sw + ch * 9;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
      for (int dx = 0; dx < 3; ++dx) {
        const float f = wk[dy * 3 + dx];
        v[0] = fmaf(f, q[dy][dx], v[0]);
        v[1] = fmaf(f, q[dy][dx + 1], v[1]);
        v[2] = fmaf(f, q[dy + 1][dx], v[2]);
        v[3] = fmaf(f, q[dy + 1][dx + 1], v[3]);
      }
    int best = 0;
#pragma unroll
    for (int i = 1; i < 4; ++i)
      if (v[i] > v[best]) best = i;
    const int64_t j = (n * k + ch) * hw2 + pos;
    out[j] = fmaxf(v[best] + sb[ch], 0.0f);
    arg[j] = static_cast<uint8_t>(best);
  }
}

// Its gradient, without the pre-pool gradient (cuDNN needed it written out in full,
// mostly zeros): each pooled value's gradient g (0 where ReLU cut it) reaches only its
// window's argmax, so dW[ch][dy][dx] = sum of g * the input under that tap there, and
// db[ch] = sum of g. Block (channel, slice of samples): 9 + 1 partial sums, reduced in
// the block; conv1_block_sums_kernel adds the slices (in order: deterministic).
constexpr int conv1_sums = 10;
__global__ void conv1_block_bwd_kernel(const float* __restrict__ dout, const float* __restrict__ out,
                                       const uint8_t* __restrict__ arg, const float* __restrict__ x, int n, int k,
                                       int h, int w, float* __restrict__ partial) {
  __shared__ float sh[conv1_sums][32];
  const int ch = blockIdx.x, slice = blockIdx.y, slices = gridDim.y;
  const int h2 = h / 2, w2 = w / 2, hw2 = h2 * w2;
  const int i0 = int(int64_t(n) * slice / slices), i1 = int(int64_t(n) * (slice + 1) / slices);
  float acc[conv1_sums] = {};
  for (int64_t t = threadIdx.x; t < int64_t(i1 - i0) * hw2; t += blockDim.x) {
    const int i = i0 + int(t / hw2), pos = int(t % hw2);
    const int64_t j = (int64_t(i) * k + ch) * hw2 + pos;
    if (!(out[j] > 0.0f)) continue;
    const float g = dout[j];
    const int q = arg[j];
    const int y = 2 * (pos / w2) + (q >> 1), xc = 2 * (pos % w2) + (q & 1);
    const float* img = x + int64_t(i) * h * w;
#pragma unroll
    for (int dy = 0; dy < 3; ++dy) {
      const int r = y + dy - 1;
#pragma unroll
      for (int dx = 0; dx < 3; ++dx) {
        const int c = xc + dx - 1;
        const float v = r >= 0 && r < h && c >= 0 && c < w ? img[r * w + c] : 0.0f;
        acc[dy * 3 + dx] = fmaf(g, v, acc[dy * 3 + dx]);
      }
    }
    acc[9] += g;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int v = 0; v < conv1_sums; ++v) {
    float a = acc[v];
    for (int off = 16; off > 0; off >>= 1) a += __shfl_down_sync(0xffffffffu, a, off);
    if (lane == 0) sh[v][warp] = a;
  }
  __syncthreads();
  if (threadIdx.x < conv1_sums) {
    float t = 0.0f;
    for (int i = 0; i < int(blockDim.x >> 5); ++i) t += sh[threadIdx.x][i];
    partial[(int64_t(ch) * slices + slice) * conv1_sums + threadIdx.x] = t;
  }
}

__global__ void conv1_block_sums_kernel(const float* __restrict__ partial, int k, int slices, float* __restrict__ dW,
                                        float* __restrict__ db) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= k * conv1_sums) return;
  const int ch = t / conv1_sums, v = t % conv1_sums;
  float s = 0.0f;
  for (int i = 0; i < slices; ++i) s += partial[(int64_t(ch) * slices + i) * conv1_sums + v];
  if (v < 9) dW[ch * 9 + v] = s;
  else db[ch] = s;
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

// A data-parallel replica's step ends here instead of in sgd_kernel: its next step
// reads the rows after the whole step's batch.
__global__ void advance_kernel(counters* c, int by) { c->offset += by; }

// Data-parallel reduction on the first device: g += the other replicas' gradients, in
// replica order (deterministic). Sources are peer pointers (read over NVLink/PCIe with
// peer access) or local copies made by cudaMemcpyPeerAsync.
constexpr int max_sources = 7;
struct gradient_sources {
  const float* p[max_sources];
  int count;
};

__global__ void add_gradients_kernel(float* __restrict__ g, gradient_sources src, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float t = g[i];
    for (int s = 0; s < src.count; ++s) t += src.p[s][i];
    g[i] = t;
  }
}

// The weight gradient of a later conv block (cuDNN's took 56 us of a 220 us CNN step on
// an H200), from the pooled gradients rather than the pre-pool ones: those are zero but
// at each pool window's argmax, and half of the rest ReLU cut, so summing over the
// pooled values that are not zero is about an eighth of the dense product's work.
// Block: pooled_wgrad_co output channels x a few samples; thread t = (input channel,
// tap). Per sample, the padded input planes go to shared memory and each output
// channel's nonzero pooled gradients are listed (value, offset of the argmax in the
// padded plane); then every thread adds g * input under its tap. Per-block partial
// sums, added in order by pooled_wgrad_sums_kernel (deterministic).
constexpr int pooled_wgrad_co = 16;
constexpr int pooled_wgrad_samples = 4;

// Shared memory of both pooled gradient kernels: the input's padded planes (the input
// for the weight gradient, the input gradient's sums for the other), then the lists.
size_t pooled_shared_bytes(const layer& l) {
  const size_t hw2 = size_t(l.height / 2) * (l.width / 2);
  return sizeof(float) * size_t(l.in) * (((l.height + 2) * (l.width + 2)) | 1) +
         pooled_wgrad_co * hw2 * (sizeof(float) + sizeof(int)) + pooled_wgrad_co * sizeof(int);
}

// Lists the nonzero pooled gradients of output channels co0 .. co0 + pooled_wgrad_co - 1
// of one sample in shared memory, in position order (deterministic): for channel c,
// count[c] entries of gs (the gradient, zero where ReLU cut it) and offs (its pool
// window's argmax as an offset in the padded input plane, row stride wp). One warp
// lists one channel; every thread of the block must call it (warp-wide ballots).
__device__ void list_pooled_gradients(const float* __restrict__ dout, const float* __restrict__ out,
                                      const uint8_t* __restrict__ arg, int64_t smp, int k, int co0, int h2, int w2,
                                      int wp, float* gs, int* offs, int* count) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5, hw2 = h2 * w2;
  for (int c = warp; c < pooled_wgrad_co; c += warps) {
    int listed = 0;
    for (int p0 = 0; p0 < hw2; p0 += 32) {
      const int p = p0 + lane;
      float g = 0.0f;
      int off = 0;
      if (p < hw2 && co0 + c < k) {
        const int64_t j = (smp * k + co0 + c) * hw2 + p;
        if (out[j] > 0.0f) g = dout[j];
        const int a = arg[j];
        off = (2 * (p / w2) + (a >> 1)) * wp + 2 * (p % w2) + (a & 1);
      }
      const unsigned nz = __ballot_sync(0xffffffffu, g != 0.0f);
      if (g != 0.0f) {
        const int at = listed + __popc(nz & ((1u << lane) - 1));
        gs[c * hw2 + at] = g;
        offs[c * hw2 + at] = off;
      }
      listed += __popc(nz);
    }
    if (lane == 0) count[c] = listed;
  }
}

__global__ void pooled_wgrad_kernel(const float* __restrict__ dout, const float* __restrict__ out,
                                    const uint8_t* __restrict__ arg, const float* __restrict__ x, int n, int cin,
                                    int k, int h, int w, float* __restrict__ partial) {
  extern __shared__ float sm[];
  // Planes an odd number of floats apart: the same tap of neighbouring channels falls
  // in different shared memory banks.
  const int hp = h + 2, wp = w + 2, plane = (hp * wp) | 1, h2 = h / 2, w2 = w / 2, hw2 = h2 * w2;
  float* xs = sm;                                   // cin padded planes
  float* gs = xs + cin * plane;                     // [co][hw2] nonzero gradients, listed first
  int* offs = reinterpret_cast<int*>(gs + pooled_wgrad_co * hw2);  // [co][hw2] their argmax offsets
  int* count = offs + pooled_wgrad_co * hw2;        // [co]
  const int co0 = blockIdx.x * pooled_wgrad_co, slice = blockIdx.y;
  const int taps = cin * 9, t = threadIdx.x;
  const int base = t < taps ? (t / 9) * plane + ((t % 9) / 3) * wp + (t % 3) : 0;
  float acc[pooled_wgrad_co];
#pragma unroll
  for (int c = 0; c < pooled_wgrad_co; ++c) acc[c] = 0.0f;
  for (int i = threadIdx.x; i < cin * plane; i += blockDim.x) xs[i] = 0.0f;  // the zero border stays
  const int s0 = slice * pooled_wgrad_samples, s1 = min(n, s0 + pooled_wgrad_samples);
  for (int smp = s0; smp < s1; ++smp) {
    __syncthreads();  // the previous sample's lists and planes are read
    const float* xi = x + int64_t(smp) * cin * h * w;
    for (int i = threadIdx.x; i < cin * h * w; i += blockDim.x) {
      const int c = i / (h * w), r = (i / w) % h, q = i % w;
      xs[c * plane + (r + 1) * wp + q + 1] = xi[i];
    }
    list_pooled_gradients(dout, out, arg, smp, k, co0, h2, w2, wp, gs, offs, count);
    __syncthreads();
    if (t < taps) {
#pragma unroll
      for (int c = 0; c < pooled_wgrad_co; ++c) {
        const int m = count[c];
        float a = acc[c];
        for (int e = 0; e < m; ++e) a = fmaf(gs[c * hw2 + e], xs[base + offs[c * hw2 + e]], a);
        acc[c] = a;
      }
    }
  }
  if (t < taps) {
#pragma unroll
    for (int c = 0; c < pooled_wgrad_co; ++c)
      if (co0 + c < k) partial[(int64_t(co0 + c) * gridDim.y + slice) * taps + t] = acc[c];
  }
}

__global__ void pooled_wgrad_sums_kernel(const float* __restrict__ partial, int k, int slices, int taps,
                                         float* __restrict__ dW) {
  const int64_t total = int64_t(k) * taps;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t co = i / taps, t = i % taps;
    float s = 0.0f;
    for (int q = 0; q < slices; ++q) s += partial[(co * slices + q) * taps + t];
    dW[i] = s;
  }
}

// The input gradient of a later conv block, from the pooled gradients as above: each
// nonzero pooled gradient g of output channel co reaches the 3x3 inputs around its
// argmax, dx[ci][y0 + dy - 1][x0 + dx - 1] += g * W[co][ci][dy][dx]. One block per
// sample, its input gradient accumulated in shared memory (padded planes, odd stride);
// each warp owns three input channels (lanes 0-26: channel and tap), so no two warps
// touch one address and the order of the additions is fixed (deterministic). The
// nonzero gradients are listed pooled_wgrad_co output channels at a time.
constexpr int pooled_dgrad_channels_per_warp = 3;

int pooled_dgrad_threads(const layer& l) {
  return 32 * ((l.in + pooled_dgrad_channels_per_warp - 1) / pooled_dgrad_channels_per_warp);
}

__global__ void pooled_dgrad_kernel(const float* __restrict__ dout, const float* __restrict__ out,
                                    const uint8_t* __restrict__ arg, const float* __restrict__ W, int cin, int k,
                                    int h, int w, float* __restrict__ dx) {
  extern __shared__ float sm[];
  const int hp = h + 2, wp = w + 2, plane = (hp * wp) | 1, h2 = h / 2, w2 = w / 2, hw2 = h2 * w2;
  float* acc = sm;                              // cin padded planes
  float* gs = acc + cin * plane;                // [co][hw2] nonzero gradients, listed first
  int* offs = reinterpret_cast<int*>(gs + pooled_wgrad_co * hw2);
  int* count = offs + pooled_wgrad_co * hw2;
  const int64_t smp = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int ci = warp * pooled_dgrad_channels_per_warp + lane / 9, tap = lane % 9;
  const bool active = lane < 9 * pooled_dgrad_channels_per_warp && ci < cin;
  const int taps = cin * 9;
  // Where this lane adds, relative to the argmax's padded offset: (dy, dx) = tap, the
  // input at (y0 + dy - 1, x0 + dx - 1) is padded (y0 + dy, x0 + dx).
  const int base = active ? ci * plane + (tap / 3) * wp + (tap % 3) : 0;
  for (int i = threadIdx.x; i < cin * plane; i += blockDim.x) acc[i] = 0.0f;
  for (int co0 = 0; co0 < k; co0 += pooled_wgrad_co) {
    __syncthreads();  // zeroed, or the previous channels' lists read
    list_pooled_gradients(dout, out, arg, smp, k, co0, h2, w2, wp, gs, offs, count);
    __syncthreads();
    for (int c = 0; c < pooled_wgrad_co && co0 + c < k; ++c) {
      const float wv = active ? W[int64_t(co0 + c) * taps + ci * 9 + tap] : 0.0f;
      const int m = count[c];
      for (int e = 0; e < m; ++e) {
        if (active) acc[base + offs[c * hw2 + e]] += gs[c * hw2 + e] * wv;
        __syncwarp();  // the next entry may add where another lane just did
      }
    }
  }
  __syncthreads();
  float* dxs = dx + smp * cin * h * w;
  for (int i = threadIdx.x; i < cin * h * w; i += blockDim.x) {
    const int c = i / (h * w), r = (i / w) % h, q = i % w;
    dxs[i] = acc[c * plane + (r + 1) * wp + q + 1];
  }
}

// Dense layers with few outputs and no ReLU (the classifier, 10 outputs): cuBLAS's
// kernels for these thin products took 10-58 us each on an H200 (the weight gradient,
// 10 x 128 over a batch of 128, was the slowest launch of the whole CNN step); these
// take a few. thin_max_out bounds the per-lane sums kept in registers.
constexpr int thin_max_out = 32;

// y[r][o] = b[o] + sum_i x[r][i] W[o][i]: one block per row (many small blocks: under
// MPS they fill gaps beside other trials' kernels), each warp a strided part of every
// dot product, reduced in the warp and then across the block's warps.
constexpr int thin_fwd_threads = 128;
__global__ void thin_fwd_kernel(const float* __restrict__ x, const float* __restrict__ W,
                                const float* __restrict__ b, int n, int in, int out, float* __restrict__ y) {
  __shared__ float part[thin_fwd_threads / 32][thin_max_out];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = blockIdx.x;
  float acc[thin_max_out];
#pragma unroll
  for (int o = 0; o < thin_max_out; ++o) acc[o] = 0.0f;
  const float* xr = x + r * in;
  for (int i = threadIdx.x; i < in; i += blockDim.x) {
    const float v = xr[i];
#pragma unroll
    for (int o = 0; o < thin_max_out; ++o)
      if (o < out) acc[o] = fmaf(v, W[int64_t(o) * in + i], acc[o]);
  }
#pragma unroll
  for (int o = 0; o < thin_max_out; ++o) {
    if (o >= out) break;
    float a = acc[o];
    for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
    if (lane == 0) part[warp][o] = a;
  }
  __syncthreads();
  if (threadIdx.x < out) {
    float t = b[threadIdx.x];
    for (int k = 0; k < thin_fwd_threads / 32; ++k) t += part[k][threadIdx.x];
    y[r * out + threadIdx.x] = t;
  }
}

// dW[o][i] = sum_r d[r][o] x[r][i], and db[o] = sum_r d[r][o] (as column i == in).
// Block: 32 columns i x 8 row lanes for one output o (as relu_bias_grad_kernel): each
// thread sums every 8th row, then the 8 lanes are added.
__global__ void thin_wgrad_kernel(const float* __restrict__ d, const float* __restrict__ x, int n, int in, int out,
                                  float* __restrict__ dW, float* __restrict__ db) {
  __shared__ float part[8][33];
  const int o = blockIdx.y;
  const int i = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (i < in) {
    for (int r = threadIdx.y; r < n; r += 8) s = fmaf(d[int64_t(r) * out + o], x[int64_t(r) * in + i], s);
  } else if (i == in) {
    for (int r = threadIdx.y; r < n; r += 8) s += d[int64_t(r) * out + o];
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && i <= in) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += part[k][threadIdx.x];
    if (i < in) dW[int64_t(o) * in + i] = t;
    else db[o] = t;
  }
}

// dx[r][i] = sum_o d[r][o] W[o][i]: one thread each.
__global__ void thin_dgrad_kernel(const float* __restrict__ d, const float* __restrict__ W, int n, int in, int out,
                                  float* __restrict__ dx) {
  const int64_t total = int64_t(n) * in;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int r = int(t / in), i = int(t % in);
    float s = 0.0f;
    for (int o = 0; o < out; ++o) s = fmaf(d[int64_t(r) * out + o], W[int64_t(o) * in + i], s);
    dx[t] = s;
  }
}

// Holds the stream for a while: the launches queued behind it are then timed without
// gaps for the host to catch up (profiling).
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Shared memory of conv1_block_fwd_kernel: the padded image, the weights, the biases.
size_t conv1_shared_bytes(const layer& l) {
  return sizeof(float) * (size_t(l.height + 2) * (l.width + 2) + size_t(l.out) * 9 + size_t(l.out));
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
// cuDNN's algorithm choices, kept per machine. cudnnFind* runs every algorithm for each
// layer, batch size and direction: it was most of a CNN trial's first epoch (0.99 s
// against 0.29 s for the next, one H200 shared by 4 trials; 3.2 s against 1.0 s shared
// by 16), and under contention it measures its neighbours' load as much as the
// algorithms. The first trial of a machine measures; later trials of the same device
// model, cuDNN version and math read its choices from a file in machine_cache_dir()
// (one line per choice, written under a temporary name and renamed, merged with what
// other trials wrote meanwhile). A choice read back is used only if cuDNN accepts it
// for the descriptors (its workspace size is asked again).
class algo_memo {
 public:
  struct choice {
    int algo = 0, math = 0;
  };
  void open(const std::string& device, int cc, bool tf32) {
    auto dir = machine_cache_dir();
    if (dir.empty()) return;
    std::string id = device + "|" + std::to_string(cc) + "|" + std::to_string(cudnnGetVersion()) + (tf32 ? "|tf32" : "|fp32");
    uint64_t h = 1469598103934665603ULL;
    for (unsigned char c : id) h = (h ^ c) * 1099511628211ULL;
    char name[48];
    std::snprintf(name, sizeof name, "/cudnn-algos-%016llx.txt", static_cast<unsigned long long>(h));
    path_ = dir + name;
    read(path_, choices_);
  }
  const choice* find(const std::string& key) const {
    auto it = choices_.find(key);
    return it == choices_.end() ? nullptr : &it->second;
  }
  void put(const std::string& key, choice c) {
    choices_[key] = c;
    dirty_ = true;
  }
  // Best effort: a file that cannot be written only means the next trial measures too.
  void save() {
    if (!dirty_ || path_.empty()) return;
    dirty_ = false;
    std::map<std::string, choice> all;
    read(path_, all);
    for (auto& [k, c] : choices_) all[k] = c;
    auto tmp = path_ + ".tmp." + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return;
    std::string text;
    for (auto& [k, c] : all) text += k + " " + std::to_string(c.algo) + " " + std::to_string(c.math) + "\n";
    bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ok = ::close(fd) == 0 && ok;
    if (!ok || ::rename(tmp.c_str(), path_.c_str()) != 0) ::unlink(tmp.c_str());
  }

 private:
  static void read(const std::string& path, std::map<std::string, choice>& into) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return;
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < (1 << 20);) text.append(buf, size_t(n));
    ::close(fd);
    size_t at = 0;
    while (at < text.size()) {
      auto end = text.find('\n', at);
      if (end == std::string::npos) break;  // a line without its end: not whole
      std::string line = text.substr(at, end - at);
      at = end + 1;
      char key[128];
      int algo = -1, math = -1;
      if (std::sscanf(line.c_str(), "%127s %d %d", key, &algo, &math) == 3 && algo >= 0 && algo < 16 && math >= 0 &&
          math < 8)
        into[key] = {algo, math};
    }
  }
  std::string path_;
  std::map<std::string, choice> choices_;
  bool dirty_ = false;
};

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
    for (auto& [key, g] : share_graphs_)
      if (g.graph) cudaGraphExecDestroy(g.graph);
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
    algos_.open(prop.name, prop.major * 10 + prop.minor, hp_.tf32);
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
    size_t partials = 1;
    // TUNE_TRAIN_DIRECT_CONV=0: the first conv block through cuDNN and the classifier
    // through cuBLAS too, as every other layer (comparisons).
    const char* direct_env = std::getenv("TUNE_TRAIN_DIRECT_CONV");
    const bool direct_allowed = !direct_env || std::string{direct_env} != "0";
    // The pooled gradient kernels (pooled_wgrad_kernel, pooled_dgrad_kernel) do an eighth
    // of cuDNN's work in fewer, longer, latency-bound blocks. Only where the card is
    // crowded with the same shape do they pay: 8 CNN trials at batch 128 under MPS on an
    // H200, 777k -> 868k samples/s. Alone or time-sliced they lose (547k -> 488k), and
    // in the 64-trial tuning run (batch 64-256, 4 or 16 trials at once) they lost under
    // MPS too: 181 -> 124 trials/min at a 0.25 share, 184 -> 147 auto-packed (2026-12-03).
    // So they run only when asked: TUNE_TRAIN_POOLED_GRADS=1.
    const char* pooled_env = std::getenv("TUNE_TRAIN_POOLED_GRADS");
    const bool pooled_allowed = direct_allowed && pooled_env && std::string{pooled_env} == "1";
    direct_.assign(net_.layers.size(), false);
    thin_.assign(net_.layers.size(), false);
    pooled_.assign(net_.layers.size(), false);
    pooled_dgrad_.assign(net_.layers.size(), false);
    size_t wpartials = 0;
    for (size_t li = 0; li < net_.layers.size(); ++li) {
      const layer& l = net_.layers[li];
      TRY(act_[li].alloc(n * l.out_features(), "activations"));
      TRY(dact_[li].alloc(n * l.out_features(), "activation gradients"));
      if (l.kind == layer_kind::dense) thin_[li] = direct_allowed && !l.relu && l.out <= thin_max_out;
      if (l.kind != layer_kind::conv_block) continue;
      TRY(arg_[li].alloc(n * l.out_features(), "pooling choices"));
      // The images' block (one channel in, no input gradient): the fused kernels.
      direct_[li] = direct_allowed && li == 0 && l.in == 1 && conv1_shared_bytes(l) <= 48 * 1024;
      if (direct_[li]) {
        partials = std::max(partials, size_t(l.out) * bias_slices * conv1_sums);
        continue;
      }
      if (!cudnn_) {
        CUDNN(cudnnCreate(&cudnn_));
        CUDNN(cudnnSetStream(cudnn_, stream_));
      }
      TRY(z_[li].alloc(n * l.out * l.height * l.width, "convolution outputs"));
      pooled_[li] = pooled_allowed && l.in * 9 <= 1024 && pooled_shared_bytes(l) <= 48 * 1024;
      pooled_dgrad_[li] = pooled_allowed && pooled_dgrad_threads(l) <= 1024 && pooled_shared_bytes(l) <= 48 * 1024;
      if (pooled_[li])
        wpartials = std::max(wpartials, size_t(l.out) * size_t((n + pooled_wgrad_samples - 1) / pooled_wgrad_samples) *
                                            size_t(l.in) * 9);
      CUDNN(cudnnCreateFilterDescriptor(&filters_[li]));
      CUDNN(cudnnSetFilter4dDescriptor(filters_[li], CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, l.out, l.in, 3, 3));
      partials = std::max(partials, size_t(l.out) * bias_slices);
    }
    TRY(partial_.alloc(partials, "partial sums"));
    TRY(wpartial_.alloc(wpartials, "weight gradient partial sums"));
    if (const char* e = std::getenv("TUNE_TRAIN_NO_GRAPHS")) graphs_ = std::string{e} != "1";
    return status::ok();
  }

  std::string name() const override { return name_; }

  status set_parameters(std::span<const float> p) override {
    CU(cudaSetDevice(device_));
    if (p.size() != net_.parameter_count)
      return {errc::invalid_argument, "set_parameters: " + std::to_string(p.size()) + " values for a network of " +
                                          std::to_string(net_.parameter_count) + " parameters"};
    // On the stream, then waited for: a plain cudaMemcpy from pageable memory may return
    // before its DMA is done, and the non-blocking stream would not wait for it.
    CU(cudaStreamSynchronize(stream_));
    CU(cudaMemcpyAsync(w_.get(), p.data(), p.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
    CU(cudaMemsetAsync(v_.get(), 0, p.size() * sizeof(float), stream_));
    CU(cudaStreamSynchronize(stream_));
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
    CU(cudaMemcpyAsync(s.pixels.get(), d.pixels.data(), d.pixels.size(), cudaMemcpyHostToDevice, stream_));
    CU(cudaMemcpyAsync(s.labels.get(), d.labels.data(), d.labels.size(), cudaMemcpyHostToDevice, stream_));
    CU(cudaStreamSynchronize(stream_));  // as in set_parameters
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
      TRY(capture(&p.graph, [&] { return train_step(count); }));
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
      TRY(forward(**plan, n, rows_source{d.pixels.get(), d.labels.get(), nullptr, nullptr, first}));
      TRY(xent(n, false, true));
    }
    return read_eval_sums(d.count);
  }

  expected<float> loss_and_gradient(std::span<const float> x, std::span<const int32_t> y, int n,
                                    std::vector<float>* grad, std::vector<float>* logits) override {
    CU(cudaSetDevice(device_));
    if (n <= 0 || n > max_n_ || x.size() != size_t(n) * net_.input_features || y.size() != size_t(n))
      return status{errc::invalid_argument, "loss_and_gradient: n must be in [1, batch_size] with n rows of input"};
    if (logits) logits->resize(size_t(n) * net_.classes);
    auto loss = gradient_of(x.data(), y.data(), n, n, logits ? logits->data() : nullptr);
    if (!loss) return loss.error();
    if (grad) TRY(gradient_to_host(*grad));
    return static_cast<float>(*loss / n);
  }

  // ---- as one replica of the data-parallel backend (below) ----

  struct share_args {
    int64_t first;  // the share's first row within the step's batch
    int batch;      // the whole step's batch: the gradient's divisor and the offset's advance
  };

  // This replica's part of a data-parallel step over the batch at the epoch offset:
  // rows [first, first + n) of it. Leaves the gradient of those rows' summed loss,
  // divided by `batch`, in grad(); adds their loss and accuracy to the epoch sums;
  // advances the offset by `batch`; does not update. n = 0: only the advance. Each
  // (n, first, batch) has its own graph, made as in step().
  status share_step(int64_t first, int n, int batch) {
    CU(cudaSetDevice(device_));
    if (n < 0 || n > max_n_ || first < 0 || first + n > batch)
      return {errc::invalid_argument, "share_step: rows [" + std::to_string(first) + ", " +
                                          std::to_string(first + n) + ") of a batch of " + std::to_string(batch) +
                                          " for a replica of at most " + std::to_string(max_n_)};
    if (n == 0) {
      advance_kernel<<<1, 1, 0, stream_>>>(counters_.get(), batch);
      CU(cudaGetLastError());
      return status::ok();
    }
    if (auto plan = plan_for(n); !plan) return plan.error();  // may drop graphs: look them up after
    const share_args sh{first, batch};
    share_graph& g = share_graphs_[{n, first, batch}];
    if (g.graph) {
      CU(cudaGraphLaunch(g.graph, stream_));
    } else if (!graphs_ || !g.warmed) {
      TRY(train_step(n, &sh));
      g.warmed = true;
    } else {
      TRY(capture(&g.graph, [&] { return train_step(n, &sh); }));
      CU(cudaGraphLaunch(g.graph, stream_));
    }
    epoch_count_ += n;
    return status::ok();
  }

  // The SGD update with what grad() holds (on replica 0: the reduced gradient). The
  // offset is not advanced here (share_step did it).
  status update() {
    CU(cudaSetDevice(device_));
    sgd_kernel<<<grid_for(int64_t(net_.parameter_count)), 256, 0, stream_>>>(
        w_.get(), g_.get(), v_.get(), int64_t(net_.parameter_count), counters_.get(), float(hp_.momentum),
        float(hp_.weight_decay), 0);
    CU(cudaGetLastError());
    return status::ok();
  }

  // Loss sum of n given rows (normalised floats); their loss gradient divided by
  // `divisor` is left in grad(); logits (n x classes) copied out when asked. Waits.
  expected<double> gradient_of(const float* x, const int32_t* y, int n, int divisor, float* logits) {
    CU(cudaSetDevice(device_));
    if (n <= 0 || n > max_n_)
      return status{errc::invalid_argument, "gradient_of: " + std::to_string(n) + " rows for a buffer of " +
                                                std::to_string(max_n_)};
    auto plan = plan_for(n);
    if (!plan) return plan.error();
    CU(cudaStreamSynchronize(stream_));
    CU(cudaMemcpyAsync(x_.get(), x, size_t(n) * net_.input_features * sizeof(float), cudaMemcpyHostToDevice,
                       stream_));
    CU(cudaMemcpyAsync(y_.get(), y, size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    TRY(reset_eval_sums());
    TRY(forward(**plan, n));
    TRY(xent(n, true, true, divisor));
    TRY(backward(**plan, n));
    auto s = read_eval_sums(n);
    if (!s) return s.error();
    if (logits)
      CU(cudaMemcpy(logits, act_.back().get(), size_t(n) * net_.classes * sizeof(float), cudaMemcpyDeviceToHost));
    return s->loss;
  }

  status gradient_to_host(std::vector<float>& out) {
    CU(cudaSetDevice(device_));
    CU(cudaStreamSynchronize(stream_));
    out.resize(net_.parameter_count);
    CU(cudaMemcpy(out.data(), g_.get(), out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return status::ok();
  }

  status synchronize() {
    CU(cudaSetDevice(device_));
    CU(cudaStreamSynchronize(stream_));
    return status::ok();
  }

  expected<std::vector<op_time>> profile_steps(int steps) override {
    CU(cudaSetDevice(device_));
    const int n = max_n_;
    if (steps < 1 || steps > 1000)
      return status{errc::invalid_argument, "profile: " + std::to_string(steps) + " steps: ask for 1 to 1000"};
    // Eager steps, the warm-up and the graph's replays each read the next rows.
    if (int64_t(n) * (2 * steps + 2) > data_[0].count - next_first_)
      return status{errc::invalid_argument, "profile: " + std::to_string(steps) + " steps of " + std::to_string(n) +
                                                " rows twice do not fit in the epoch's " +
                                                std::to_string(data_[0].count - next_first_) +
                                                " rows left: ask for fewer steps"};
    auto plan = plan_for(n);
    if (!plan) return plan.error();
    std::vector<cudaEvent_t> events;
    auto release = [&] {
      cudaStreamSynchronize(stream_);
      for (auto e : events) cudaEventDestroy(e);
    };
    auto run = [&]() -> expected<std::vector<op_time>> {
      TRY(train_step(n));  // libraries' lazy set-up, outside the timing
      std::vector<op_time> rows;
      std::vector<std::pair<std::string, cudaEvent_t>> marks;
      for (int s = 0; s < steps; ++s) {
        CU(cudaStreamSynchronize(stream_));
        spin_kernel<<<1, 1, 0, stream_>>>(5'000'000);  // a few ms: the step is queued whole behind it
        CU(cudaGetLastError());
        marks.clear();
        marks_ = &marks;
        events_ = &events;
        mark("start");
        status st = train_step(n);
        marks_ = nullptr;
        if (!st) return st;
        CU(cudaStreamSynchronize(stream_));
        for (size_t i = 1; i < marks.size(); ++i) {
          float ms = 0;
          CU(cudaEventElapsedTime(&ms, marks[i - 1].second, marks[i].second));
          auto it = std::find_if(rows.begin(), rows.end(), [&](const op_time& r) { return r.op == marks[i].first; });
          if (it == rows.end()) it = rows.insert(rows.end(), op_time{marks[i].first, 0});
          it->us += 1000.0 * ms / steps;
        }
      }
      shape_plan& p = **plan;
      if (graphs_ && !p.graph) TRY(capture(&p.graph, [&] { return train_step(n); }));
      cudaEvent_t* ge = events.data();  // the first two, made by the first step's marks
      CU(cudaStreamSynchronize(stream_));
      CU(cudaEventRecord(ge[0], stream_));
      for (int s = 0; s < steps; ++s) {
        if (p.graph) CU(cudaGraphLaunch(p.graph, stream_));
        else TRY(train_step(n));
      }
      CU(cudaEventRecord(ge[1], stream_));
      CU(cudaEventSynchronize(ge[1]));
      float ms = 0;
      CU(cudaEventElapsedTime(&ms, ge[0], ge[1]));
      rows.push_back({graphs_ ? "step (graph)" : "step (eager)", 1000.0 * ms / steps});
      return rows;
    };
    auto rows = run();
    marks_ = nullptr;
    release();
    // The rows the profile read: the trainer's next step reads the ones after them.
    const int64_t used = int64_t(n) * (2 * steps + 1);
    next_first_ += used;
    epoch_count_ += used;
    return rows;
  }

  cudaStream_t stream() const { return stream_; }
  float* params() const { return w_.get(); }
  float* grad() const { return g_.get(); }

 private:
  struct split_data {
    dbuf<uint8_t> pixels, labels;
    int64_t count = 0;
  };

  // ---- one step, as launches on the stream (run eagerly or under capture) ----

  // Profiling only (profile_steps): an event after the launches of one part of a step.
  void mark(const char* what, int li = -1) {
    if (!marks_) return;
    if (marks_->size() >= events_->size()) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return;
      events_->push_back(e);
    }
    cudaEvent_t e = (*events_)[marks_->size()];
    cudaEventRecord(e, stream_);
    marks_->push_back({li < 0 ? std::string{what} : "layer " + std::to_string(li + 1) + ": " + what, e});
  }

  // One device: the whole step, ending with the update (which advances the offset).
  // A data-parallel share (sh): its rows of the batch, the gradient divided by the
  // whole batch, and only the offset's advance at the end.
  status train_step(int n, const share_args* sh = nullptr) {
    auto plan = plan_for(n);
    if (!plan) return plan.error();
    TRY(forward(**plan, n,
                rows_source{data_[0].pixels.get(), data_[0].labels.get(), order_.get(), counters_.get(),
                            sh ? sh->first : 0}));
    TRY(xent(n, true, false, sh ? sh->batch : n));
    mark("softmax + cross-entropy");
    TRY(backward(**plan, n));
    if (sh) {
      advance_kernel<<<1, 1, 0, stream_>>>(counters_.get(), sh->batch);
    } else {
      sgd_kernel<<<grid_for(int64_t(net_.parameter_count)), 256, 0, stream_>>>(
          w_.get(), g_.get(), v_.get(), int64_t(net_.parameter_count), counters_.get(), float(hp_.momentum),
          float(hp_.weight_decay), n);
    }
    CU(cudaGetLastError());
    mark("sgd update");
    return status::ok();
  }

  // Captures what launch() enqueues on the stream into *out (instantiated).
  template <class F>
  status capture(cudaGraphExec_t* out, F&& launch) {
    CU(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    status s = launch();
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (!s) {
      if (graph) cudaGraphDestroy(graph);
      return s;
    }
    if (e != cudaSuccess) return cuda_fail("cudaStreamEndCapture (capturing a training step)", e);
    e = cudaGraphInstantiate(out, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      *out = nullptr;
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

  // The rows into x_ and y_ from `src` first (the fused first conv block reads them
  // itself), or (no source) from x_ and y_ as they are.
  status forward(const shape_plan& p, int n, std::optional<rows_source> src = std::nullopt) {
    if (src && !direct_[0]) {
      gather_kernel<<<n, 256, 0, stream_>>>(src->pixels, src->labels, src->order, src->c, src->first,
                                            int(net_.input_features), x_.get(), y_.get());
      CU(cudaGetLastError());
      mark("gather + normalise");
    }
    const float* in = x_.get();
    for (size_t li = 0; li < net_.layers.size(); ++li) {
      const layer& l = net_.layers[li];
      float* out = act_[li].get();
      const float* W = w_.get() + l.weight_offset;
      const float* b = w_.get() + l.bias_offset;
      if (thin_[li]) {
        thin_fwd_kernel<<<n, thin_fwd_threads, 0, stream_>>>(in, W, b, n, l.in, l.out, out);
        CU(cudaGetLastError());
        mark("dense fwd (thin)", li);
      } else if (l.kind == layer_kind::dense) {
        // Row-major Y[n,out] = X[n,in] W^T is column-major Y^T = W X^T.
        TRY(gemm(CUBLAS_OP_T, CUBLAS_OP_N, l.out, n, l.in, W, l.in, in, l.in, out, l.out));
        mark("dense fwd gemm", li);
        bias_act_kernel<<<grid_for(int64_t(n) * l.out), 256, 0, stream_>>>(out, b, n, l.out, l.relu);
        CU(cudaGetLastError());
        mark("dense bias+relu", li);
      } else if (direct_[li]) {
        conv1_block_fwd_kernel<<<n, 256, conv1_shared_bytes(l), stream_>>>(
            src.value_or(rows_source{}), x_.get(), y_.get(), W, b, l.out, l.height, l.width, out, arg_[li].get());
        CU(cudaGetLastError());
        mark("conv1 block fwd (fused)", li);
      } else {
        const conv_plan& c = p.conv[li];
        const float one = 1.0f, zero = 0.0f;
        CUDNN(cudnnConvolutionForward(cudnn_, &one, c.x, in, filters_[li], W, c.fwd, c.fwd_algo, conv_ws_.get(),
                                      conv_ws_.size(), &zero, c.z, z_[li].get()));
        mark("conv fwd (cuDNN)", li);
        pool_fwd_kernel<<<grid_for(int64_t(n) * l.out_features()), 256, 0, stream_>>>(
            z_[li].get(), b, n, l.out, l.height, l.width, out, arg_[li].get());
        CU(cudaGetLastError());
        mark("conv bias+relu+pool", li);
      }
      in = out;
    }
    return status::ok();
  }

  // Training sums into the epoch counters, evaluation (and tests) into the eval ones;
  // the gradient is of the loss summed over the rows, divided by `divisor` (0: n).
  status xent(int n, bool want_grad, bool eval, int divisor = 0) {
    counters* c = counters_.get();
    softmax_xent_kernel<<<(n + 255) / 256, 256, 0, stream_>>>(
        act_.back().get(), y_.get(), n, net_.classes, divisor > 0 ? divisor : n,
        want_grad ? dact_.back().get() : nullptr,
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
      if (thin_[li]) {
        thin_wgrad_kernel<<<dim3(l.in / 32 + 1, l.out), dim3(32, 8), 0, stream_>>>(d, in, n, l.in, l.out, dW, db);
        CU(cudaGetLastError());
        mark("dense weight+bias grad (thin)", li);
        if (din) {
          thin_dgrad_kernel<<<grid_for(int64_t(n) * l.in), 256, 0, stream_>>>(d, W, n, l.in, l.out, din);
          CU(cudaGetLastError());
          mark("dense data grad (thin)", li);
        }
      } else if (l.kind == layer_kind::dense) {
        relu_bias_grad_kernel<<<(l.out + 31) / 32, dim3(32, 8), 0, stream_>>>(d, act_[li].get(), n, l.out, l.relu,
                                                                             db);
        CU(cudaGetLastError());
        mark("dense relu+bias grad", li);
        // dW[out,in] = dY^T X is column-major dW^T = X^T-as-stored times dY.
        TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, n, in, l.in, d, l.out, dW, l.in));
        mark("dense weight grad gemm", li);
        // dX[n,in] = dY W is column-major dX^T = W^T-as-stored times dY^T.
        if (din) TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_N, l.in, n, l.out, W, l.in, d, l.out, din, l.in));
        mark("dense data grad gemm", li);
      } else if (direct_[li]) {
        conv1_block_bwd_kernel<<<dim3(l.out, bias_slices), 256, 0, stream_>>>(d, act_[li].get(), arg_[li].get(), in, n,
                                                                             l.out, l.height, l.width, partial_.get());
        CU(cudaGetLastError());
        conv1_block_sums_kernel<<<(l.out * conv1_sums + 127) / 128, 128, 0, stream_>>>(partial_.get(), l.out,
                                                                                      bias_slices, dW, db);
        CU(cudaGetLastError());
        mark("conv1 block bwd (fused)", li);
      } else {
        const conv_plan& c = p.conv[li];
        // The pre-pool values are not needed any more: their buffer takes the pre-pool
        // gradient, which only cuDNN's kernels read.
        const bool pooled_data = !din || pooled_dgrad_[li];
        float* dz = pooled_[li] && pooled_data ? nullptr : z_[li].get();
        pool_bwd_kernel<<<dim3(l.out, bias_slices), 256, 0, stream_>>>(d, act_[li].get(), arg_[li].get(), n, l.out,
                                                                       l.height, l.width, dz, partial_.get());
        CU(cudaGetLastError());
        bias_partials_kernel<<<(l.out + 63) / 64, 64, 0, stream_>>>(partial_.get(), l.out, bias_slices, db);
        CU(cudaGetLastError());
        mark("conv pool grad + bias grad", li);
        const float one = 1.0f, zero = 0.0f;
        if (pooled_[li]) {
          const int slices = (n + pooled_wgrad_samples - 1) / pooled_wgrad_samples;
          const int threads = (l.in * 9 + 31) / 32 * 32;
          pooled_wgrad_kernel<<<dim3((l.out + pooled_wgrad_co - 1) / pooled_wgrad_co, slices), threads,
                                pooled_shared_bytes(l), stream_>>>(d, act_[li].get(), arg_[li].get(), in, n,
                                                                         l.in, l.out, l.height, l.width,
                                                                         wpartial_.get());
          CU(cudaGetLastError());
          pooled_wgrad_sums_kernel<<<grid_for(int64_t(l.out) * l.in * 9), 256, 0, stream_>>>(
              wpartial_.get(), l.out, slices, l.in * 9, dW);
          CU(cudaGetLastError());
          mark("conv filter grad (pooled)", li);
        } else {
          CUDNN(cudnnConvolutionBackwardFilter(cudnn_, &one, c.x, in, c.z, dz, c.bwd_filter, c.filter_algo,
                                               conv_ws_.get(), conv_ws_.size(), &zero, filters_[li], dW));
          mark("conv filter grad (cuDNN)", li);
        }
        if (din && pooled_dgrad_[li]) {
          pooled_dgrad_kernel<<<n, pooled_dgrad_threads(l), pooled_shared_bytes(l), stream_>>>(
              d, act_[li].get(), arg_[li].get(), W, l.in, l.out, l.height, l.width, din);
          CU(cudaGetLastError());
          mark("conv data grad (pooled)", li);
        } else if (din) {
          CUDNN(cudnnConvolutionBackwardData(cudnn_, &one, filters_[li], W, c.z, dz, c.bwd_data, c.data_algo,
                                             conv_ws_.get(), conv_ws_.size(), &zero, c.x, din));
          mark("conv data grad (cuDNN)", li);
        }
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
      if (l.kind != layer_kind::conv_block || direct_[li]) continue;
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
      const float* x = li == 0 ? x_.get() : act_[li - 1].get();
      float* dx = li == 0 ? dact_[0].get() : dact_[li - 1].get();  // scratch for layer 0
      // The fastest algorithm that fits and keeps fp32 math unless TF32 was asked for.
      auto acceptable = [&](cudnnStatus_t st, size_t memory, cudnnMathType_t m) {
        return st == CUDNN_STATUS_SUCCESS && memory <= find_workspace_bytes && (hp_.tf32 || m == CUDNN_FMA_MATH);
      };
      auto searching = [&]() -> status {  // the search's scratch, once; it runs the buffers' kernels
        if (!find_ws.get()) TRY(find_ws.alloc(find_workspace_bytes, "cuDNN's algorithm search"));
        CU(cudaStreamSynchronize(stream_));
        return status::ok();
      };
      const std::string shape = std::to_string(l.in) + "x" + std::to_string(l.out) + "x" + std::to_string(l.height) +
                                "x" + std::to_string(l.width) + "/n" + std::to_string(n);
      // A choice another trial of this machine measured, if cuDNN takes it here.
      auto remembered = [&](const char* kind, cudnnConvolutionDescriptor_t d, auto workspace_of) -> std::optional<int> {
        const auto* m = algos_.find(std::string{kind} + "/" + shape);
        if (!m || !(hp_.tf32 || m->math == CUDNN_FMA_MATH)) return std::nullopt;
        if (cudnnSetConvolutionMathType(d, static_cast<cudnnMathType_t>(m->math)) != CUDNN_STATUS_SUCCESS) return std::nullopt;
        size_t memory = 0;
        if (workspace_of(m->algo, &memory) != CUDNN_STATUS_SUCCESS || memory > find_workspace_bytes) {
          cudnnSetConvolutionMathType(d, math);
          return std::nullopt;
        }
        need = std::max(need, memory);
        return m->algo;
      };
      if (auto a = remembered("fwd", c.fwd, [&](int algo, size_t* m) {
            return cudnnGetConvolutionForwardWorkspaceSize(cudnn_, c.x, filters_[li], c.fwd, c.z,
                                                           static_cast<cudnnConvolutionFwdAlgo_t>(algo), m);
          })) {
        c.fwd_algo = static_cast<cudnnConvolutionFwdAlgo_t>(*a);
      } else {
        TRY(searching());
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
        algos_.put("fwd/" + shape, {int(perf[pick].algo), int(perf[pick].mathType)});
      }
      if (pooled_[li]) {
        // pooled_wgrad_kernel computes this layer's weight gradient: no cuDNN algorithm.
      } else if (auto a = remembered("filter", c.bwd_filter, [&](int algo, size_t* m) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnn_, c.x, c.z, c.bwd_filter, filters_[li],
                                                                  static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), m);
          })) {
        c.filter_algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(*a);
      } else {
        TRY(searching());
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
        algos_.put("filter/" + shape, {int(perf[pick].algo), int(perf[pick].mathType)});
      }
      if (li == 0 || pooled_dgrad_[li]) continue;  // no input gradient, or pooled_dgrad_kernel's
      if (auto a = remembered("data", c.bwd_data, [&](int algo, size_t* m) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn_, filters_[li], c.z, c.bwd_data, c.x,
                                                                static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), m);
          })) {
        c.data_algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(*a);
      } else {
        TRY(searching());
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
        algos_.put("data/" + shape, {int(perf[pick].algo), int(perf[pick].mathType)});
      }
    }
    algos_.save();
    if (need > conv_ws_.size()) {
      // Captured graphs hold the old workspace's address: drop them, they are
      // captured again on their next use.
      CU(cudaStreamSynchronize(stream_));
      for (auto& [k, q] : plans_)
        if (q.graph) {
          cudaGraphExecDestroy(q.graph);
          q.graph = nullptr;
        }
      for (auto& [k, q] : share_graphs_)
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
  std::vector<dbuf<float>> act_, dact_, z_;  // z_: pre-pool values (cuDNN's conv blocks)
  std::vector<dbuf<uint8_t>> arg_;
  std::vector<bool> direct_;  // per layer: the fused first conv block (no cuDNN)
  std::vector<bool> thin_;    // per layer: a classifier with few outputs (no cuBLAS)
  std::vector<bool> pooled_;  // per layer: a conv block's weight gradient by pooled_wgrad_kernel
  std::vector<bool> pooled_dgrad_;  // and its input gradient by pooled_dgrad_kernel
  dbuf<float> wpartial_;      // its per-block sums
  std::vector<std::pair<std::string, cudaEvent_t>>* marks_ = nullptr;  // profiling: mark() records
  std::vector<cudaEvent_t>* events_ = nullptr;
  std::vector<cudnnFilterDescriptor_t> filters_;
  std::array<split_data, 3> data_;
  algo_memo algos_;  // cuDNN's choices, shared by the machine's trials
  std::map<int, shape_plan> plans_;
  struct share_graph {
    cudaGraphExec_t graph = nullptr;
    bool warmed = false;
  };
  std::map<std::tuple<int, int64_t, int>, share_graph> share_graphs_;  // (n, first, batch)
  int32_t* host_order_ = nullptr;
  counters* host_counters_ = nullptr;
  int64_t next_first_ = 0, epoch_count_ = 0;
};

// ---- data-parallel training over k devices ----------------------------------------
//
// One cuda_backend per device (a replica, with buffers for ceil(B / k) rows), each with
// the train split resident and the same epoch order. A step over B rows gives replica i
// the rows [start_i, start_i + n_i) of the batch: n_i = B / k, plus one for the first
// B % k replicas (0 when B < k). Each replica runs its share as one captured graph (per
// share shape) that divides the loss gradient by B, so the replicas' gradients add up
// to the full batch's mean gradient, each share weighted by its rows. Replica 0 waits
// for the others (an event each), adds their gradients -- reading them through peer
// access, or from copies that cudaMemcpyPeerAsync makes on replica 0's device where
// peer access is not available (or TUNE_TRAIN_NO_PEER=1) -- applies the SGD update (its
// momentum is the only one used), and copies the new parameters to every other replica
// (cudaMemcpyPeerAsync); each replica's next step waits for that copy. All replicas hold
// the same parameters, bit for bit, after every step. Evaluation runs on replica 0.
// The host issues the glue between the graphs (4 + 5 (k - 1) calls per step).
class data_parallel_backend final : public backend {
 public:
  data_parallel_backend(const hyperparameters& hp, const network& net, std::vector<int> devices)
      : hp_(hp), net_(net), devices_(std::move(devices)) {}

  ~data_parallel_backend() override {
    for (auto& r : replicas_) r->synchronize();
    for (size_t i = 0; i < ready_.size(); ++i)
      if (ready_[i]) {
        cudaSetDevice(devices_[i]);
        cudaEventDestroy(ready_[i]);
      }
    cudaSetDevice(devices_[0]);
    if (params_ready_) cudaEventDestroy(params_ready_);
    for (auto& b : staging_) b.reset();
    // replicas_, declared first, goes last: each one cleans up on its own device.
  }

  status init() {
    const int k = static_cast<int>(devices_.size());
    hyperparameters share_hp = hp_;
    share_hp.batch_size = (hp_.batch_size + k - 1) / k;  // the largest share
    for (int d : devices_) {
      auto r = std::make_unique<cuda_backend>(share_hp, net_, d);
      TRY(r->init());
      replicas_.push_back(std::move(r));
    }
    const char* no_peer = std::getenv("TUNE_TRAIN_NO_PEER");
    const bool want_peer = !(no_peer && std::string{no_peer} == "1");
    peer_.assign(k, false);
    staging_.resize(k);
    ready_.assign(k, nullptr);
    int peers = 0;
    for (int i = 1; i < k; ++i) {
      int can = 0;
      CU(cudaDeviceCanAccessPeer(&can, devices_[0], devices_[i]));
      // Replica 0's kernel reads replica i's gradient in place; the other direction
      // only helps the parameter copies, so it is best effort.
      peer_[i] = want_peer && can && enable_peer(devices_[0], devices_[i]);
      if (peer_[i]) {
        ++peers;
        int back = 0;
        if (cudaDeviceCanAccessPeer(&back, devices_[i], devices_[0]) == cudaSuccess && back)
          enable_peer(devices_[i], devices_[0]);
      } else {
        CU(cudaSetDevice(devices_[0]));
        TRY(staging_[i].alloc(net_.parameter_count, "a copy of another replica's gradient"));
      }
      CU(cudaSetDevice(devices_[i]));
      CU(cudaEventCreateWithFlags(&ready_[i], cudaEventDisableTiming));
    }
    CU(cudaSetDevice(devices_[0]));
    CU(cudaEventCreateWithFlags(&params_ready_, cudaEventDisableTiming));
    name_ = "cuda:";
    for (int i = 0; i < k; ++i) name_ += (i ? "," : "") + std::to_string(devices_[i]);
    name_ += " data-parallel (";
    for (int i = 0; i < k; ++i) name_ += (i ? ", " : "") + replicas_[i]->name();
    name_ += peers == k - 1 ? "; peer access)"
                            : peers == 0 ? "; gradients copied with cudaMemcpyPeer)"
                                         : "; peer access to " + std::to_string(peers) + " of " +
                                               std::to_string(k - 1) + " replicas, copies for the rest)";
    return status::ok();
  }

  std::string name() const override { return name_; }
  int devices() const override { return static_cast<int>(replicas_.size()); }

  status set_parameters(std::span<const float> p) override {
    // Replica 0 first: it waits for its stream, so no parameter copy to the others is
    // still under way when they are overwritten.
    for (auto& r : replicas_) TRY(r->set_parameters(p));
    return status::ok();
  }

  expected<std::vector<float>> parameters() override { return replicas_[0]->parameters(); }

  expected<std::vector<float>> replica_parameters(int r) override {
    if (r < 0 || r >= devices())
      return status{errc::invalid_argument,
                    "replica " + std::to_string(r) + " of " + std::to_string(devices()) + " replicas"};
    TRY(replicas_[0]->synchronize());  // the copy of the parameters to replica r is done
    return replicas_[r]->parameters();
  }

  status load(split_id which, const image_set& d) override {
    if (which == split_id::train) {
      for (auto& r : replicas_) TRY(r->load(which, d));
      train_count_ = d.count;
      return status::ok();
    }
    return replicas_[0]->load(which, d);  // evaluation runs there only
  }

  status begin_epoch(std::span<const int32_t> order, float lr) override {
    for (auto& r : replicas_) TRY(r->begin_epoch(order, lr));
    next_first_ = 0;
    epoch_count_ = 0;
    return status::ok();
  }

  status step(int64_t first, int count) override {
    if (count <= 0 || count > hp_.batch_size || first != next_first_ || first + count > train_count_)
      return {errc::invalid_argument, "step: rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                          ") are not the next batch of at most " + std::to_string(hp_.batch_size) +
                                          " after row " + std::to_string(next_first_) + " (call begin_epoch first)"};
    const int k = devices();
    for (int i = k - 1; i >= 0; --i) {  // the others first: replica 0 then waits for them
      const share s = share_of(i, count);
      if (i > 0) {
        CU(cudaSetDevice(devices_[i]));
        CU(cudaStreamWaitEvent(replicas_[i]->stream(), params_ready_, 0));  // the last update's parameters
      }
      TRY(replicas_[i]->share_step(s.first, s.n, count));
    }
    TRY(reduce(count));
    TRY(replicas_[0]->update());
    TRY(broadcast());
    next_first_ += count;
    epoch_count_ += count;
    return status::ok();
  }

  expected<sums> end_epoch() override {
    sums total;
    for (auto& r : replicas_) {
      auto s = r->end_epoch();
      if (!s) return s.error();
      total.loss += s->loss;
      total.correct += s->correct;
    }
    total.count = epoch_count_;
    return total;
  }

  expected<sums> evaluate(split_id which) override { return replicas_[0]->evaluate(which); }

  // Split like a step: each replica's share, reduced on replica 0 (no update).
  expected<float> loss_and_gradient(std::span<const float> x, std::span<const int32_t> y, int n,
                                    std::vector<float>* grad, std::vector<float>* logits) override {
    if (n <= 0 || n > hp_.batch_size || x.size() != size_t(n) * net_.input_features || y.size() != size_t(n))
      return status{errc::invalid_argument, "loss_and_gradient: n must be in [1, batch_size] with n rows of input"};
    if (logits) logits->resize(size_t(n) * net_.classes);
    TRY(replicas_[0]->synchronize());  // no parameter copy to another replica is under way
    double loss = 0;
    for (int i = 0; i < devices(); ++i) {
      const share s = share_of(i, n);
      if (s.n == 0) continue;
      auto l = replicas_[i]->gradient_of(x.data() + s.first * net_.input_features, y.data() + s.first, s.n, n,
                                         logits ? logits->data() + s.first * net_.classes : nullptr);
      if (!l) return l.error();
      loss += *l;
    }
    TRY(reduce(n));
    if (grad) TRY(replicas_[0]->gradient_to_host(*grad));
    else TRY(replicas_[0]->synchronize());
    return static_cast<float>(loss / n);
  }

 private:
  struct share {
    int64_t first;
    int n;
  };

  share share_of(int i, int batch) const {
    const int k = devices(), q = batch / k, rem = batch % k;
    return {int64_t(i) * q + std::min(i, rem), q + (i < rem ? 1 : 0)};
  }

  // True when `from` may now access `to`'s memory (enabled here, or already before).
  static bool enable_peer(int from, int to) {
    if (cudaSetDevice(from) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
    if (e != cudaSuccess) cudaGetLastError();
    return e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
  }

  // Replica 0's gradient += those of the replicas that had rows in this batch, once
  // their work is done (everything is ordered on replica 0's stream).
  status reduce(int batch) {
    const int k = devices();
    cuda_backend& r0 = *replicas_[0];
    const size_t bytes = net_.parameter_count * sizeof(float);
    for (int i = 1; i < k; ++i) {
      CU(cudaSetDevice(devices_[i]));
      CU(cudaEventRecord(ready_[i], replicas_[i]->stream()));
    }
    CU(cudaSetDevice(devices_[0]));
    gradient_sources src{};
    auto add = [&]() -> status {
      add_gradients_kernel<<<grid_for(int64_t(net_.parameter_count)), 256, 0, r0.stream()>>>(
          r0.grad(), src, int64_t(net_.parameter_count));
      CU(cudaGetLastError());
      src.count = 0;
      return status::ok();
    };
    for (int i = 1; i < k; ++i) {
      // Also for a replica without rows: its parameters are overwritten next.
      CU(cudaStreamWaitEvent(r0.stream(), ready_[i], 0));
      if (share_of(i, batch).n == 0) continue;
      const float* from = replicas_[i]->grad();
      if (!peer_[i]) {
        CU(cudaMemcpyPeerAsync(staging_[i].get(), devices_[0], from, devices_[i], bytes, r0.stream()));
        from = staging_[i].get();
      }
      src.p[src.count++] = from;
      if (src.count == max_sources) TRY(add());
    }
    if (src.count > 0) TRY(add());
    return status::ok();
  }

  // Replica 0's parameters to every other replica; their next step waits for this.
  status broadcast() {
    cuda_backend& r0 = *replicas_[0];
    CU(cudaSetDevice(devices_[0]));
    const size_t bytes = net_.parameter_count * sizeof(float);
    for (int i = 1; i < devices(); ++i)
      CU(cudaMemcpyPeerAsync(replicas_[i]->params(), devices_[i], r0.params(), devices_[0], bytes, r0.stream()));
    CU(cudaEventRecord(params_ready_, r0.stream()));
    return status::ok();
  }

  std::vector<std::unique_ptr<cuda_backend>> replicas_;  // first: destroyed last
  hyperparameters hp_;
  network net_;
  std::vector<int> devices_;
  std::string name_;
  std::vector<bool> peer_;             // replica 0 reads replica i's gradient in place
  std::vector<dbuf<float>> staging_;   // on devices_[0]: copies of gradients, without peer access
  std::vector<cudaEvent_t> ready_;     // on devices_[i]: replica i's share of the step is done
  cudaEvent_t params_ready_ = nullptr;  // on devices_[0]: the parameters were copied out
  int64_t train_count_ = 0, next_first_ = 0, epoch_count_ = 0;
};

status no_such_device(int device, int count, const std::string& asked) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return {errc::invalid_argument,
          "device cuda:" + std::to_string(device) + (asked.empty() ? "" : " (of " + asked + ")") +
              " does not exist: this process sees " + std::to_string(count) + " CUDA device(s)" +
              (visible ? std::string{" (CUDA_VISIBLE_DEVICES="} + visible + ")" : std::string{})};
}

expected<int> visible_devices(const std::string& asked) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return status{errc::invalid_argument, "device " + asked + " asked for, but CUDA reports " +
                                              cudaGetErrorString(e) + ": use --device cpu, or check the driver"};
  }
  return count;
}

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
  auto count = visible_devices("cuda:" + std::to_string(device));
  if (!count) return count.error();
  if (device < 0 || device >= *count) return no_such_device(device, *count, "");
  auto b = std::make_unique<cuda_backend>(hp, net, device);
  if (auto s = b->init(); !s) return s;
  return std::unique_ptr<backend>{std::move(b)};
}

expected<std::unique_ptr<backend>> make_data_parallel_backend(const hyperparameters& hp, const network& net,
                                                              const std::vector<int>& devices) {
  if (auto s = hp.check(); !s) return s;
  device_spec spec{true, devices.empty() ? 0 : devices[0]};
  spec.indices = devices;
  const std::string asked = spec.to_string();
  if (devices.size() < 2)
    return status{errc::invalid_argument, "data-parallel training needs 2 or more devices, not " + asked +
                                              ": use cuda:N for one device"};
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (devices[i] == devices[j])
        return status{errc::invalid_argument,
                      "device cuda:" + std::to_string(devices[i]) + " appears twice in " + asked};
  auto count = visible_devices(asked);
  if (!count) return count.error();
  for (int d : devices)
    if (d < 0 || d >= *count) return no_such_device(d, *count, asked);
  auto b = std::make_unique<data_parallel_backend>(hp, net, devices);
  if (auto s = b->init(); !s) return s;
  return std::unique_ptr<backend>{std::move(b)};
}

}  // namespace tune::train
