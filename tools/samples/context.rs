// SPDX-License-Identifier: BSD-3-Clause
// What the documentation's Rust fragments use without declaring it: tools/check-samples.py builds
// each fragment as an example of one crate, its column-0 items (fn, struct, use, ...) in place of
// @ITEMS and its statements in place of @BODY, inside a function that takes these arguments. A
// name a new fragment needs goes here.
#![allow(unused_imports, unused_variables, unused_mut, dead_code, unreachable_code)]
use localmap::*;

/*@ITEMS@*/

fn fragment(mesh: &Mesh, x: &DistTensor, rank: i32, size: i32) -> std::result::Result<(), Box<dyn std::error::Error>> {
    /*@BODY@*/
    ;
    Ok(())
}

fn main() {}
