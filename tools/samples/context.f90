! SPDX-License-Identifier: BSD-3-Clause
! What the documentation's Fortran fragments use without declaring it: tools/check-samples.py
! compiles each fragment inside a BLOCK of a program that starts with these lines (a fragment's
! functions go after CONTAINS). A name a new fragment needs goes here.
  use localmap
  implicit none
  type(lm_mesh) :: mesh
  type(lm_dist_tensor) :: x
  integer :: rank, nranks, comm
