#include <cstdio>
#include <cuda_runtime.h>
struct alignas(16) v16 { unsigned int x, y, z, w; };
__global__ void spin(long long c){ long long s=clock64(); while(clock64()-s<c){} }
__global__ void k_gs4(const v16* __restrict__ s, v16* __restrict__ d, size_t vecs){
  size_t stride=(size_t)gridDim.x*blockDim.x, i=(size_t)blockIdx.x*blockDim.x+threadIdx.x;
  for(; i+3*stride<vecs; i+=4*stride){ v16 a=s[i],b=s[i+stride],c=s[i+2*stride],e=s[i+3*stride]; d[i]=a; d[i+stride]=b; d[i+2*stride]=c; d[i+3*stride]=e; }
  for(; i<vecs; i+=stride) d[i]=s[i];
}
template<int U> __global__ void k_pass(const v16* __restrict__ s, v16* __restrict__ d, size_t vecs){
  size_t base=(size_t)blockIdx.x*blockDim.x*U+threadIdx.x; v16 r[U];
  #pragma unroll
  for(int k=0;k<U;k++){ size_t i=base+(size_t)k*blockDim.x; if(i<vecs) r[k]=s[i]; }
  #pragma unroll
  for(int k=0;k<U;k++){ size_t i=base+(size_t)k*blockDim.x; if(i<vecs) d[i]=r[k]; }
}
int main(){
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  size_t sizes[]={16ull<<20, 256ull<<20, 1ull<<30};
  void *a,*b; cudaMalloc(&a,1ull<<30); cudaMalloc(&b,1ull<<30); cudaMemset(a,1,1ull<<30);
  cudaEvent_t e0,e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for(size_t n: sizes){
    size_t vecs=n/16;
    const char* names[]={"memcpy","gs4 sm*8","gs4 sm*16","gs4 sm*32","pass1x256","pass2x256","pass4x256","pass4x128","pass8x128"};
    for(int v=0; v<9; v++){
      float best[21]; 
      for(int r=0;r<21;r++){
        spin<<<1,1>>>(200000);
        cudaEventRecord(e0);
        switch(v){
          case 0: cudaMemcpyAsync(b,a,n,cudaMemcpyDeviceToDevice); break;
          case 1: k_gs4<<<sms*8,256>>>((v16*)a,(v16*)b,vecs); break;
          case 2: k_gs4<<<sms*16,256>>>((v16*)a,(v16*)b,vecs); break;
          case 3: k_gs4<<<sms*32,256>>>((v16*)a,(v16*)b,vecs); break;
          case 4: k_pass<1><<<(vecs+255)/256,256>>>((v16*)a,(v16*)b,vecs); break;
          case 5: k_pass<2><<<(vecs+511)/512,256>>>((v16*)a,(v16*)b,vecs); break;
          case 6: k_pass<4><<<(vecs+1023)/1024,256>>>((v16*)a,(v16*)b,vecs); break;
          case 7: k_pass<4><<<(vecs+511)/512,128>>>((v16*)a,(v16*)b,vecs); break;
          case 8: k_pass<8><<<(vecs+1023)/1024,128>>>((v16*)a,(v16*)b,vecs); break;
        }
        cudaEventRecord(e1); cudaEventSynchronize(e1); cudaEventElapsedTime(&best[r],e0,e1);
      }
      for(int i=0;i<21;i++)for(int j=i+1;j<21;j++) if(best[j]<best[i]){float t=best[i];best[i]=best[j];best[j]=t;}
      printf("%5zu MiB %-10s %7.1f GB/s (median, r+w)\n", n>>20, names[v], 2.0*n/(best[10]*1e6));
    }
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
