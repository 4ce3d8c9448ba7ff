// The CPU path's elementwise and layout operations (the GEMMs are OpenBLAS). The CUDA
// kernels in cuda_backend.cu follow the same definitions: pooling ties go to the first
// of the four positions in (0,0), (0,1), (1,0), (1,1) order, argmax ties to the lower
// class, so both paths agree exactly on which element gets a gradient.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tune/train/backend.hpp"

namespace tune::train {

// z[n, m] += b; then max(z, 0) when relu.
void bias_act(float* z, const float* b, int n, int m, bool relu);

// d[n, m] *= (a > 0) when relu (a is the layer's output); db[j] = sum over rows of d.
void relu_backward_bias_grad(float* d, const float* a, int n, int m, bool relu, float* db);

// Mean-free sums of the cross-entropy of softmax(logits[n, classes]) against labels;
// with dlogits, also the gradient of the *mean* loss: (softmax - onehot) / n.
sums softmax_cross_entropy(const float* logits, const int32_t* labels, int n, int classes, float* dlogits);

// in [n, c, h, w] -> col [c*9, n*h*w], 3x3 window, padding 1.
void im2col3x3(const float* in, int n, int c, int h, int w, float* col);
// The adjoint: col [c*9, n*h*w] summed back into out [n, c, h, w] (overwritten).
void col2im3x3(const float* col, int n, int c, int h, int w, float* out);

// z [k, n*h*w] (channel-major, as the im2col GEMM leaves it) -> out [n, k, h/2, w/2]
// = relu(max of each 2x2 window + b[k]); arg = the window position of the max (0..3).
void pool_bias_relu_kmajor(const float* z, const float* b, int n, int k, int h, int w, float* out, uint8_t* arg);
// Its gradient: dout [n, k, h/2, w/2] -> dz [k, n*h*w] (zero but at each argmax),
// db[k] = the sum of dout where out > 0.
void unpool_relu_kmajor(const float* dout, const float* out, const uint8_t* arg, int n, int k, int h, int w,
                        float* dz, float* db);

// PyTorch's SGD: g += wd * w; v = momentum * v + g; w -= lr * v.
void sgd_momentum_update(float* w, const float* g, float* v, size_t count, float lr, float momentum, float wd);

}  // namespace tune::train
