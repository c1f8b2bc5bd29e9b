// sm_probe.cu — what the GPU's multiprocessors look like to a memory-bound kernel (diagnostic for
// bench/NOTES.md, not part of the library). Standalone CUDA (sm_90):
//   1. cudaOccupancyMaxActiveClusters for cluster sizes 1-16 at one 200 KB block per SM;
//   2. which SMs share a GPC: CTAs of one cluster run in one GPC, so clusters of 8 map SM ids;
//   3. each SM's own read rate: one block per SM reads its own contiguous 1 MB (16-byte loads,
//      128 KB in flight), timed per block with %globaltimer, several launches.
// Output: plain lines for bench/decode_probe.py's analysis.  nvcc -arch=sm_90 -O3 -o sm_probe sm_probe.cu
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %d\n", cudaGetErrorString(e), __LINE__); return 1; } } while (0)

__device__ __forceinline__ uint64_t gtimer() { uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ int smid() { int s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); return s; }

__global__ void cluster_map(int* out) {
  extern __shared__ int pad[];
  if (threadIdx.x == 0) { pad[0] = 0; out[blockIdx.x] = smid(); }
}

__global__ void __launch_bounds__(1024, 1) sm_read(const uint4* __restrict__ src, int64_t per_block, int64_t* out, unsigned* sink) {
  extern __shared__ int pad[];
  __syncthreads();
  const uint64_t t0 = gtimer();
  const uint4* p = src + blockIdx.x * per_block;
  uint32_t acc = 0;
  for (int64_t i = threadIdx.x; i < per_block; i += 8 * 1024) {
    uint4 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = (i + j * 1024 < per_block) ? __ldcg(p + i + j * 1024) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  __syncthreads();
  if (acc == 0x12345678u) sink[0] = acc;
  if (threadIdx.x == 0) { out[blockIdx.x * 3] = t0; out[blockIdx.x * 3 + 1] = gtimer(); out[blockIdx.x * 3 + 2] = smid(); if (pad[0] == 7) sink[1] = 1; }
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int smem = 200 * 1024;
  CK(cudaFuncSetAttribute(cluster_map, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(cluster_map, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(sm_read, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  printf("sms %d\n", sms);
  for (int cs : {1, 2, 4, 8, 16}) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cs; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(cs * 16); cfg.blockDim = dim3(256); cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr; cfg.numAttrs = 1;
    int n = -1;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, cluster_map, &cfg);
    printf("max_active_clusters size %d: %d (%s)\n", cs, n, cudaGetErrorString(e));
  }
  // GPC map from clusters of 8 (one CTA per SM).
  int* d_out; CK(cudaMalloc(&d_out, 4096 * sizeof(int)));
  for (int rep = 0; rep < 12; ++rep) {
    const int cs = 8, nc = 16;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cs; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(cs * nc); cfg.blockDim = dim3(256); cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr; cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, cluster_map, d_out));
    CK(cudaDeviceSynchronize());
    std::vector<int> h(cs * nc);
    CK(cudaMemcpy(h.data(), d_out, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    for (int c = 0; c < nc; ++c) {
      printf("cluster");
      for (int r = 0; r < cs; ++r) printf(" %d", h[c * cs + r]);
      printf("\n");
    }
  }
  // Per-SM read rate.
  const int64_t per_block = (1 << 20) / 16;  // uint4 per block: 1 MB
  uint4* src; CK(cudaMalloc(&src, (size_t)sms * per_block * 16));
  CK(cudaMemset(src, 1, (size_t)sms * per_block * 16));
  int64_t* d_t; CK(cudaMalloc(&d_t, sms * 3 * sizeof(int64_t)));
  unsigned* sink; CK(cudaMalloc(&sink, 8));
  char* flush; const size_t fb = 512u << 20; CK(cudaMalloc(&flush, fb));
  for (int rep = 0; rep < 10; ++rep) {
    CK(cudaMemset(flush, rep, fb));
    sm_read<<<sms, 1024, smem>>>(src, per_block, d_t, sink);
    CK(cudaDeviceSynchronize());
    std::vector<int64_t> h(sms * 3);
    CK(cudaMemcpy(h.data(), d_t, h.size() * sizeof(int64_t), cudaMemcpyDeviceToHost));
    int64_t t0 = h[0];
    for (int b = 0; b < sms; ++b) t0 = h[b * 3] < t0 ? h[b * 3] : t0;
    printf("read rep %d:", rep);
    for (int b = 0; b < sms; ++b) printf(" %lld:%lld:%lld", (long long)h[b * 3 + 2], (long long)(h[b * 3] - t0), (long long)(h[b * 3 + 1] - t0));
    printf("\n");
  }
  return 0;
}
