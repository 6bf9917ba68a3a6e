// SPDX-License-Identifier: BSD-3-Clause
//! Finds liblocalmap. In this order:
//!  1. `LOCALMAP_LIB_DIR` (directory of liblocalmap.so) and optionally `LOCALMAP_INCLUDE_DIR`
//!     (directory of localmap.h; default: `LOCALMAP_LIB_DIR/../include` or the source tree's);
//!  2. the `pkg-config` program (`$PKG_CONFIG`, default `pkg-config`) on module `localmap`;
//!  3. the build tree of the source checkout this crate sits in (`../../../build/lib`).
//! Exports `DEP_LOCALMAP_LIB_DIR` and `DEP_LOCALMAP_INCLUDE_DIR` to dependents' build scripts and
//! `LOCALMAP_INCLUDE_DIR` to this crate's code (the layout test compiles C against it).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn has_lib(dir: &Path) -> bool {
    dir.join("liblocalmap.so").exists() || dir.join("liblocalmap.a").exists()
}

fn pkg_config(args: &[&str]) -> Option<String> {
    let prog = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let out = Command::new(prog).args(args).arg("localmap").output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    for v in ["LOCALMAP_LIB_DIR", "LOCALMAP_INCLUDE_DIR", "PKG_CONFIG_PATH", "PKG_CONFIG"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let source_root = manifest.join("../../..");
    let mut tried = Vec::new();

    let found: Option<(PathBuf, PathBuf, &str)> = (|| {
        if let Ok(lib) = env::var("LOCALMAP_LIB_DIR") {
            let lib = PathBuf::from(lib);
            let inc = env::var("LOCALMAP_INCLUDE_DIR").map(PathBuf::from).unwrap_or_else(|_| {
                let up = lib.join("../include");
                if up.join("localmap.h").exists() { up } else { source_root.join("include") }
            });
            if has_lib(&lib) {
                return Some((lib, inc, "LOCALMAP_LIB_DIR"));
            }
            tried.push(format!("LOCALMAP_LIB_DIR={} (no liblocalmap.so there)", lib.display()));
        } else {
            tried.push("LOCALMAP_LIB_DIR (not set)".into());
        }
        if let Some(lib) = pkg_config(&["--variable=libdir"]) {
            let inc = pkg_config(&["--variable=includedir"]).unwrap_or_default();
            let lib = PathBuf::from(lib);
            if has_lib(&lib) {
                return Some((lib, PathBuf::from(inc), "pkg-config"));
            }
            tried.push(format!("pkg-config localmap: libdir {} has no liblocalmap", lib.display()));
        } else {
            tried.push("pkg-config localmap (program missing or module not found; set PKG_CONFIG_PATH)".into());
        }
        let lib = source_root.join("build/lib");
        if has_lib(&lib) {
            return Some((lib, source_root.join("include"), "source build tree"));
        }
        tried.push(format!("{} (the source tree's build; run `make lib`)", lib.display()));
        None
    })();

    let (lib, inc, _how) = match found {
        Some(f) => f,
        None => panic!("localmap-sys: cannot find liblocalmap; tried:\n  {}", tried.join("\n  ")),
    };
    let lib = lib.canonicalize().unwrap_or(lib);
    let inc = inc.canonicalize().unwrap_or(inc);
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=localmap");
    // For this crate's own tests; dependents get DEP_LOCALMAP_LIB_DIR and add their own rpath.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:lib_dir={}", lib.display());
    println!("cargo:include_dir={}", inc.display());
    println!("cargo:rustc-env=LOCALMAP_INCLUDE_DIR={}", inc.display());
}
