// SPDX-License-Identifier: BSD-3-Clause
//! Adds an rpath for this crate's tests and examples to the directories localmap-sys's build
//! script reports (`DEP_LOCALMAP_RPATH`): liblocalmap's own when it is linked dynamically
//! (`LOCALMAP_LINK=dynamic`), and those of the library's dependencies that a CUDA build names.
//! Linked statically (the default), a program needs no rpath for localmap itself: a crate that
//! depends on `localmap` runs as it is.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_LOCALMAP_RPATH");
    if let Ok(dirs) = std::env::var("DEP_LOCALMAP_RPATH") {
        for d in dirs.split(':').filter(|d| !d.is_empty()) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{d}");
        }
    }
}
