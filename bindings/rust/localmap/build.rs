// SPDX-License-Identifier: BSD-3-Clause
//! Adds an rpath to liblocalmap's directory (found by localmap-sys's build script) for this
//! crate's tests and examples, so they run without LD_LIBRARY_PATH. A program of yours can do the
//! same in its own build.rs with `DEP_LOCALMAP_LIB_DIR` when it depends on localmap-sys directly,
//! or set LD_LIBRARY_PATH, or use an installed liblocalmap on the loader's path.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_LOCALMAP_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_LOCALMAP_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
