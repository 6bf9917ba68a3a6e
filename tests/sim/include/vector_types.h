/* SPDX-License-Identifier: BSD-3-Clause */
/* cudasim: the launch geometry types of the CUDA runtime (uint3, dim3), field for field as in
 * CUDA's vector_types.h, so host code that builds launch configurations compiles unchanged. */
#ifndef CUDASIM_VECTOR_TYPES_H_
#define CUDASIM_VECTOR_TYPES_H_

struct uint3 {
  unsigned int x, y, z;
};
typedef struct uint3 uint3;

struct dim3 {
  unsigned int x, y, z;
#ifdef __cplusplus
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
#endif
};
typedef struct dim3 dim3;

#endif /* CUDASIM_VECTOR_TYPES_H_ */
