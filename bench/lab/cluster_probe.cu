// bench/lab/cluster_probe.cu -- can paged decode merge a split request through distributed shared
// memory on this GPU? Prints, for a block shaped like decode's one-block-per-SM shape (128 threads,
// ~197 KB of dynamic shared memory):
//   (1) cudaOccupancyMaxActiveClusters for cluster sizes 1-16 (16: the non-portable size), i.e.
//       whether B=1's 8 KV heads x 16 units fit as 8 co-resident clusters of 16;
//   (2) a launch of 8 clusters of 16 blocks that spin ~20 us: the spread of their start times
//       (co-resident if small) and the distinct SMs used;
//   (3) the latency of one cluster barrier (arrive.release + wait.acquire) and of one dependent
//       DSMEM load from the farthest rank, in clock cycles and ns.
// Build and run (on the device): nvcc -arch=sm_90a -O2 -o /tmp/cluster_probe bench/lab/cluster_probe.cu && /tmp/cluster_probe
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
namespace cg = cooperative_groups;

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

constexpr int kThreads = 128;
constexpr int kSmem = 197 * 1024;

__device__ __forceinline__ uint64_t gtime() { uint64_t t; asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ uint32_t smid() { uint32_t s; asm volatile("mov.u32 %0, %smid;" : "=r"(s)); return s; }

// (2) each block: its start time, end time, SM; spins ~spin_ns.
__global__ void __launch_bounds__(kThreads, 1) spin_kernel(uint64_t* out, uint64_t spin_ns) {
  extern __shared__ uint4 smem[];
  const int b = blockIdx.x + gridDim.x * blockIdx.y;
  const uint64_t t0 = gtime();
  if (threadIdx.x == 0) smem[0] = make_uint4(b, 0, 0, 0);
  while (gtime() - t0 < spin_ns) {}
  cg::this_cluster().sync();
  if (threadIdx.x == 0) { out[3 * b] = t0; out[3 * b + 1] = gtime(); out[3 * b + 2] = smid(); }
}

// (3) rank 0 thread 0 times `iters` cluster barriers, then `iters` dependent DSMEM loads from the
// last rank's shared memory (a pointer chase inside it).
__global__ void __launch_bounds__(kThreads, 1) latency_kernel(long long* out, int iters) {
  extern __shared__ uint4 smem[];
  int* chain = reinterpret_cast<int*>(smem);
  cg::cluster_group cl = cg::this_cluster();
  const unsigned rank = cl.block_rank(), n = cl.num_blocks();
  if (threadIdx.x < 64) chain[threadIdx.x] = (threadIdx.x * 17 + 5) % 64;
  cl.sync();
  long long t0 = clock64();
  for (int i = 0; i < iters; ++i) cl.sync();
  long long t1 = clock64();
  const uint64_t g0 = gtime();
  if (rank == 0 && threadIdx.x == 0) {
    const int* far = cl.map_shared_rank(chain, n - 1);
    int k = 0;
    const long long t2 = clock64();
    for (int i = 0; i < iters; ++i) k = far[k];
    const long long t3 = clock64();
    out[0] = (t1 - t0) / iters;
    out[1] = (t3 - t2) / iters;
    out[2] = k;  // keeps the chase
    out[3] = static_cast<long long>(gtime() - g0);
  }
  cl.sync();  // no block leaves while rank 0 reads the last rank's memory
}

template <class K>
int launch(K kernel, dim3 grid, int cs, cudaStream_t s, void** args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid; cfg.blockDim = dim3(kThreads); cfg.dynamicSmemBytes = kSmem; cfg.stream = s;
  cudaLaunchAttribute a[1];
  a[0].id = cudaLaunchAttributeClusterDimension;
  a[0].val.clusterDim.x = 1; a[0].val.clusterDim.y = cs; a[0].val.clusterDim.z = 1;
  cfg.attrs = a; cfg.numAttrs = 1;
  CK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(kernel), args));
  return 0;
}

int main() {
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  int clk_khz = 0; CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
  printf("device %s, %d SMs, clock %d kHz\n", prop.name, prop.multiProcessorCount, clk_khz);
  for (auto k : {reinterpret_cast<const void*>(spin_kernel), reinterpret_cast<const void*>(latency_kernel)}) {
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  // (1)
  for (int cs : {1, 2, 4, 8, 16}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(8, cs); cfg.blockDim = dim3(kThreads); cfg.dynamicSmemBytes = kSmem;
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeClusterDimension;
    a[0].val.clusterDim.x = 1; a[0].val.clusterDim.y = cs; a[0].val.clusterDim.z = 1;
    cfg.attrs = a; cfg.numAttrs = 1;
    int n = -1;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, spin_kernel, &cfg);
    printf("cluster size %2d: max active clusters %d (%s) -> %d blocks at once\n", cs, n,
           cudaGetErrorString(e), n * cs);
  }
  // (2)
  const int nb = 8 * 16;
  uint64_t* d; CK(cudaMalloc(&d, nb * 3 * sizeof(uint64_t)));
  uint64_t spin = 20000;
  void* args2[] = {&d, &spin};
  for (int rep = 0; rep < 3; ++rep) {
    if (launch(spin_kernel, dim3(8, 16), 16, 0, args2)) return 1;
    CK(cudaDeviceSynchronize());
  }
  std::vector<uint64_t> h(nb * 3);
  CK(cudaMemcpy(h.data(), d, h.size() * 8, cudaMemcpyDeviceToHost));
  uint64_t s0 = ~0ull, s1 = 0, e1 = 0; std::vector<int> sms;
  for (int b = 0; b < nb; ++b) { s0 = std::min(s0, h[3 * b]); s1 = std::max(s1, h[3 * b]); e1 = std::max(e1, h[3 * b + 1]); sms.push_back(int(h[3 * b + 2])); }
  std::sort(sms.begin(), sms.end());
  const int distinct = int(std::unique(sms.begin(), sms.end()) - sms.begin());
  printf("8 clusters x 16 blocks, spin 20 us: starts spread %.2f us, last end %.2f us after first start, %d distinct SMs\n",
         (s1 - s0) / 1e3, (e1 - s0) / 1e3, distinct);
  // (3)
  long long* o; CK(cudaMalloc(&o, 4 * sizeof(long long)));
  int iters = 200;
  void* args3[] = {&o, &iters};
  for (int cs : {2, 4, 8, 16}) {
    if (launch(latency_kernel, dim3(1, cs), cs, 0, args3)) return 1;
    CK(cudaDeviceSynchronize());
    long long r[4]; CK(cudaMemcpy(r, o, sizeof r, cudaMemcpyDeviceToHost));
    const double ghz = clk_khz / 1e6;
    printf("cluster %2d: barrier %lld cycles (~%.0f ns at the nominal clock), DSMEM dependent load %lld cycles (~%.0f ns)\n",
           cs, r[0], r[0] / ghz, r[1], r[1] / ghz);
  }
  return 0;
}
