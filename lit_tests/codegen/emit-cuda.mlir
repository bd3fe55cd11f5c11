// RUN: infer-opt %s --infer-fuse --test-infer-emit-cuda -o /dev/null | FileCheck %s

// The CUDA C++ `infer compile --target cuda` generates for infer.fused
// regions of f32 values: one extern "C" kernel per distinct body, a
// straight-line body on registers (block arguments r0.., one register per
// op), float4 accesses when every pointer is aligned, and the fp32 math of
// the CUDA backend's kernels. f32 kernels include no header;
// emit-cuda-bf16.mlir has the 16-bit element types.

// CHECK-NOT:  #include
// CHECK:      __device__ __forceinline__ float inferSilu(float v) {
// CHECK-NEXT:   return v / (1.0f + expf(-v));
// CHECK:      __device__ __forceinline__ float inferGeluTanh(float v) {
// CHECK:        tanhf(
// CHECK-NOT:  __expf
// CHECK-NOT:  __tanhf
// CHECK:      __device__ __forceinline__ float inferLoad(const float *p, long long i) {
// CHECK-NEXT:   return p[i];
// CHECK:      __device__ __forceinline__ float4 inferLoad4(const float *p, long long i) {
// CHECK-NEXT:   return ((const float4 *)p)[i];
// CHECK-NOT:  __nv_bfloat16

// silu(gate) * up becomes infer.silu_mul, which a later mul joins.
// CHECK-LABEL: // silu_mul(0, 1); mul(3, 2) -> 4
// CHECK-NEXT:  // computes rank 0 step 0, rank 0 step 3
// CHECK-NEXT:  __device__ __forceinline__ void fused_0_element(float r0, float r1, float r2, float &y0) {
// CHECK-NEXT:    const float r3 = inferSilu(r0) * r1;
// CHECK-NEXT:    const float r4 = r3 * r2;
// CHECK-NEXT:    y0 = r4;
// CHECK-NEXT:  }
// CHECK:       extern "C" __global__ void __launch_bounds__(256)
// CHECK-NEXT:  fused_0(const float *__restrict__ x0, const float *__restrict__ x1, const float *__restrict__ x2, float *__restrict__ y0, long long n) {
// CHECK:         const unsigned long long misaligned = ((unsigned long long)x0 & 15) | ((unsigned long long)x1 & 15) | ((unsigned long long)x2 & 15) | ((unsigned long long)y0 & 15);
// CHECK-NEXT:    if (misaligned == 0 && (n & 3) == 0) {
// CHECK-NEXT:      for (; i < n / 4; i += stride) {
// CHECK-NEXT:        const float4 a0 = inferLoad4(x0, i);
// CHECK:             fused_0_element(a0.w, a1.w, a2.w, b0.w);
// CHECK-NEXT:        inferStore4(y0, i, b0);
// CHECK:         for (; i < n; i += stride) {
// CHECK-NEXT:      float b0;
// CHECK-NEXT:      fused_0_element(inferLoad(x0, i), inferLoad(x1, i), inferLoad(x2, i), b0);
// CHECK-NEXT:      inferStore(y0, i, b0);
func.func @silu_mul_chain(%g: tensor<?x64xf32>, %u: tensor<?x64xf32>, %s: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %a = infer.silu %g : tensor<?x64xf32>
  %m = infer.mul %a, %u : tensor<?x64xf32>
  %y = infer.mul %m, %s : tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// gelu(gate) * up + residual.
// CHECK-LABEL: // gelu_tanh(0); mul(3, 1); add(4, 2) -> 5
// CHECK-NEXT:  // computes rank 0 step 1
// CHECK-NEXT:  __device__ __forceinline__ void fused_1_element(float r0, float r1, float r2, float &y0) {
// CHECK-NEXT:    const float r3 = inferGeluTanh(r0);
// CHECK-NEXT:    const float r4 = r3 * r1;
// CHECK-NEXT:    const float r5 = r4 + r2;
// CHECK-NEXT:    y0 = r5;
// CHECK:       fused_1(const float *__restrict__ x0, const float *__restrict__ x1, const float *__restrict__ x2, float *__restrict__ y0, long long n)
func.func @gelu_chain(%g: tensor<?x64xf32>, %u: tensor<?x64xf32>, %r: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %a = infer.gelu %g {approximate = "tanh"} : tensor<?x64xf32>
  %m = infer.mul %a, %u : tensor<?x64xf32>
  %s = infer.add %m, %r : tensor<?x64xf32>
  return %s : tensor<?x64xf32>
}

// Four residual adds: one kernel of five inputs.
// CHECK-LABEL: // add(0, 1); add(5, 2); add(6, 3); add(7, 4) -> 8
// CHECK:       void fused_2_element(float r0, float r1, float r2, float r3, float r4, float &y0) {
// CHECK-NEXT:    const float r5 = r0 + r1;
// CHECK-NEXT:    const float r6 = r5 + r2;
// CHECK-NEXT:    const float r7 = r6 + r3;
// CHECK-NEXT:    const float r8 = r7 + r4;
// CHECK-NEXT:    y0 = r8;
func.func @add_chain(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>, %c: tensor<?x64xf32>, %d: tensor<?x64xf32>, %e: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %0 = infer.add %a, %b : tensor<?x64xf32>
  %1 = infer.add %0, %c : tensor<?x64xf32>
  %2 = infer.add %1, %d : tensor<?x64xf32>
  %3 = infer.add %2, %e : tensor<?x64xf32>
  return %3 : tensor<?x64xf32>
}

// The same body as @silu_mul_chain reuses fused_0 (step 3 above).
func.func @silu_mul_chain_again(%g: tensor<?x64xf32>, %u: tensor<?x64xf32>, %s: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %a = infer.silu %g : tensor<?x64xf32>
  %m = infer.mul %a, %u : tensor<?x64xf32>
  %y = infer.mul %m, %s : tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// Several results, one of them an intermediate register: every result is a
// pointer parameter, stored from its own four lanes.
// CHECK-LABEL: // silu(0); add(2, 1); silu_mul(3, 2) -> 4, 2
// CHECK:       void fused_3_element(float r0, float r1, float &y0, float &y1) {
// CHECK-NEXT:    const float r2 = inferSilu(r0);
// CHECK-NEXT:    const float r3 = r2 + r1;
// CHECK-NEXT:    const float r4 = inferSilu(r3) * r2;
// CHECK-NEXT:    y0 = r4;
// CHECK-NEXT:    y1 = r2;
// CHECK:       fused_3(const float *__restrict__ x0, const float *__restrict__ x1, float *__restrict__ y0, float *__restrict__ y1, long long n) {
// CHECK:           float4 b0, b1;
// CHECK:           fused_3_element(a0.x, a1.x, b0.x, b1.x);
// CHECK:           inferStore4(y0, i, b0);
// CHECK-NEXT:      inferStore4(y1, i, b1);
// CHECK:         float b0, b1;
// CHECK-NEXT:    fused_3_element(inferLoad(x0, i), inferLoad(x1, i), b0, b1);
// CHECK-NEXT:    inferStore(y0, i, b0);
// CHECK-NEXT:    inferStore(y1, i, b1);
// CHECK-NOT:   fused_4
func.func @two_results(%x: tensor<?x64xf32>, %r: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %y:2 = infer.fused ins(%x, %r : tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>, tensor<?x64xf32> {
  ^bb0(%bx: tensor<?x64xf32>, %br: tensor<?x64xf32>):
    %s = infer.silu %bx : tensor<?x64xf32>
    %a = infer.add %s, %br : tensor<?x64xf32>
    %m = infer.silu_mul %a, %s : tensor<?x64xf32>
    infer.yield %m, %s : tensor<?x64xf32>, tensor<?x64xf32>
  }
  return %y#0, %y#1 : tensor<?x64xf32>, tensor<?x64xf32>
}
