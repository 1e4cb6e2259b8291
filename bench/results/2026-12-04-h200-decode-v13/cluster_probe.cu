// How many thread-block clusters of each size fit at once on this GPU with one block per SM.
#include <cstdio>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void probe(unsigned* out) {
  extern __shared__ unsigned char smem[];
  unsigned sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  cg::cluster_group c = cg::this_cluster();
  c.sync();
  if (threadIdx.x == 0) { out[3 * blockIdx.x] = sm; out[3 * blockIdx.x + 1] = unsigned(t & 0xffffffff); out[3*blockIdx.x+2] = c.block_rank(); }
  smem[threadIdx.x] = 0;
}
int main() {
  cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (size_t smem : {size_t(120 << 10), size_t(60 << 10)}) {
    cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    for (int cs : {1, 2, 4, 8, 12, 16}) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(cs * 8); cfg.blockDim = dim3(128); cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = cs; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
      cfg.attrs = at; cfg.numAttrs = 1;
      int n = -1; cudaError_t e = cudaOccupancyMaxActiveClusters(&n, probe, &cfg);
      printf("smem %zu KB cluster %2d: max active clusters %d (%s) -> %d blocks\n", smem >> 10, cs, n, cudaGetErrorString(e), n * cs);
    }
  }
  // 8 clusters of 16 at 120 KB: placement
  unsigned* d; cudaMalloc(&d, 3 * 128 * 4);
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 << 10);
  for (int cs : {16, 8}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(128); cfg.blockDim = dim3(128); cfg.dynamicSmemBytes = 120 << 10;
    cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = cs; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
    cfg.attrs = at; cfg.numAttrs = 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, probe, d);
    cudaDeviceSynchronize();
    unsigned h[3 * 128]; cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    unsigned t0 = h[1]; for (int i = 0; i < 128; ++i) if (h[3*i+1] < t0) t0 = h[3*i+1];
    printf("launch cluster %d: %s\n", cs, cudaGetErrorString(e));
    for (int c = 0; c < 128 / cs; ++c) { printf(" c%d:", c); for (int i = 0; i < cs; ++i) printf(" %u@%u", h[3*(c*cs+i)], (h[3*(c*cs+i)+1]-t0)/1000); printf("\n"); }
  }
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0); printf("SMs %d\n", sms);
}
