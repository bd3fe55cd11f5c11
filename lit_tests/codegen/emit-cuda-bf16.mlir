// RUN: infer-opt %s --infer-fuse --test-infer-emit-cuda -o /dev/null | FileCheck %s

// The generated kernels of infer.fused regions over 16-bit values: each
// pointer parameter has its value's element type, operands are widened to
// float as they are loaded, the body computes in float, and each result is
// rounded to nearest even as it is stored. Four 16-bit elements move as one
// 8-byte access, so their pointers need 8-byte alignment. A kernel is shared
// by steps of the same body and element types only.

// The headers of the element types in use, then their loads and stores.
// CHECK:      #include <cuda_fp16.h>
// CHECK-NEXT: #include <cuda_bf16.h>
// CHECK:      __device__ __forceinline__ float inferLoad(const float *p, long long i) {
// CHECK:      // __half elements: widened to float on load, rounded to nearest even on
// CHECK:      __device__ __forceinline__ float inferLoad(const __half *p, long long i) {
// CHECK-NEXT:   return __half2float(p[i]);
// CHECK:      __device__ __forceinline__ void inferStore(__half *p, long long i, float v) {
// CHECK-NEXT:   p[i] = __float2half_rn(v);
// CHECK:        w.lo = __floats2half2_rn(v.x, v.y);
// CHECK:      // __nv_bfloat16 elements: widened to float on load, rounded to nearest even
// CHECK:      __device__ __forceinline__ float inferLoad(const __nv_bfloat16 *p,
// CHECK-NEXT:                                            long long i) {
// CHECK-NEXT:   return __bfloat162float(p[i]);
// CHECK:      __device__ __forceinline__ void inferStore(__nv_bfloat16 *p, long long i,
// CHECK-NEXT:                                            float v) {
// CHECK-NEXT:   p[i] = __float2bfloat16_rn(v);
// CHECK:      struct __align__(8) inferBFloat16x4 {
// CHECK-NEXT:   __nv_bfloat162 lo, hi;
// CHECK:        const inferBFloat16x4 v = ((const inferBFloat16x4 *)p)[i];
// CHECK-NEXT:   const float2 lo = __bfloat1622float2(v.lo), hi = __bfloat1622float2(v.hi);
// CHECK:        w.lo = __floats2bfloat162_rn(v.x, v.y);
// CHECK-NEXT:   w.hi = __floats2bfloat162_rn(v.z, v.w);

// silu(gate) * up * scale in bf16: the body is float code, the parameters
// bf16.
// CHECK-LABEL: // silu_mul(0, 1); mul(3, 2) -> 4
// CHECK-NEXT:  // computes rank 0 step 0
// CHECK-NEXT:  __device__ __forceinline__ void fused_0_element(float r0, float r1, float r2, float &y0) {
// CHECK-NEXT:    const float r3 = inferSilu(r0) * r1;
// CHECK-NEXT:    const float r4 = r3 * r2;
// CHECK-NEXT:    y0 = r4;
// CHECK:       fused_0(const __nv_bfloat16 *__restrict__ x0, const __nv_bfloat16 *__restrict__ x1, const __nv_bfloat16 *__restrict__ x2, __nv_bfloat16 *__restrict__ y0, long long n) {
// CHECK:         const unsigned long long misaligned = ((unsigned long long)x0 & 7) | ((unsigned long long)x1 & 7) | ((unsigned long long)x2 & 7) | ((unsigned long long)y0 & 7);
// CHECK:             const float4 a0 = inferLoad4(x0, i);
// CHECK:             inferStore4(y0, i, b0);
// CHECK:           fused_0_element(inferLoad(x0, i), inferLoad(x1, i), inferLoad(x2, i), b0);
// CHECK-NEXT:      inferStore(y0, i, b0);
func.func @bf16_chain(%g: tensor<?x64xbf16>, %u: tensor<?x64xbf16>, %s: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %a = infer.silu %g : tensor<?x64xbf16>
  %m = infer.mul %a, %u : tensor<?x64xbf16>
  %y = infer.mul %m, %s : tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// The same body over f32 values is another kernel.
// CHECK-LABEL: // silu_mul(0, 1); mul(3, 2) -> 4
// CHECK-NEXT:  // computes rank 0 step 1
// CHECK:       fused_1(const float *__restrict__ x0, const float *__restrict__ x1, const float *__restrict__ x2, float *__restrict__ y0, long long n) {
// CHECK:         const unsigned long long misaligned = ((unsigned long long)x0 & 15) | ((unsigned long long)x1 & 15) | ((unsigned long long)x2 & 15) | ((unsigned long long)y0 & 15);
func.func @f32_chain(%g: tensor<?x64xf32>, %u: tensor<?x64xf32>, %s: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %a = infer.silu %g : tensor<?x64xf32>
  %m = infer.mul %a, %u : tensor<?x64xf32>
  %y = infer.mul %m, %s : tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// f16 values.
// CHECK-LABEL: // gelu_tanh(0); mul(2, 1) -> 3
// CHECK:       fused_2(const __half *__restrict__ x0, const __half *__restrict__ x1, __half *__restrict__ y0, long long n) {
func.func @f16_gelu(%g: tensor<?x64xf16>, %u: tensor<?x64xf16>) -> tensor<?x64xf16> {
  %a = infer.gelu %g {approximate = "tanh"} : tensor<?x64xf16>
  %m = infer.mul %a, %u : tensor<?x64xf16>
  return %m : tensor<?x64xf16>
}

// Mixed element types: bf16 operands, an f32 and a bf16 result; each pointer
// is aligned for its own four elements.
// CHECK-LABEL: // add(0, 1); silu(2) -> 3, 2
// CHECK:       fused_3(const __nv_bfloat16 *__restrict__ x0, const __nv_bfloat16 *__restrict__ x1, float *__restrict__ y0, __nv_bfloat16 *__restrict__ y1, long long n) {
// CHECK:         const unsigned long long misaligned = ((unsigned long long)x0 & 7) | ((unsigned long long)x1 & 7) | ((unsigned long long)y0 & 15) | ((unsigned long long)y1 & 7);
// CHECK-NOT:   fused_4
func.func @mixed(%x: tensor<?x64xbf16>, %r: tensor<?x64xbf16>) -> (tensor<?x64xf32>, tensor<?x64xbf16>) {
  %y:2 = infer.fused ins(%x, %r : tensor<?x64xbf16>, tensor<?x64xbf16>) -> tensor<?x64xf32>, tensor<?x64xbf16> {
  ^bb0(%bx: tensor<?x64xf32>, %br: tensor<?x64xf32>):
    %a = infer.add %bx, %br : tensor<?x64xf32>
    %s = infer.silu %a : tensor<?x64xf32>
    infer.yield %s, %a : tensor<?x64xf32>, tensor<?x64xf32>
  }
  return %y#0, %y#1 : tensor<?x64xf32>, tensor<?x64xbf16>
}
