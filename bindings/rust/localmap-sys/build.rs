// SPDX-License-Identifier: BSD-3-Clause
//! Finds liblocalmap and links it. Where, in this order:
//!  1. `LOCALMAP_LIB_DIR` (directory of liblocalmap.so / .a) and optionally `LOCALMAP_INCLUDE_DIR`
//!     (directory of localmap.h; default: `LOCALMAP_LIB_DIR/../include` or the source tree's);
//!  2. the `pkg-config` program (`$PKG_CONFIG`, default `pkg-config`) on module `localmap`
//!     (`PKG_CONFIG_PATH=<prefix>/lib/pkgconfig` for an installed prefix);
//!  3. the build tree of the source checkout this crate sits in (`../../../build/lib`), with a
//!     cargo warning saying so (set PKG_CONFIG_PATH to use an installed localmap instead).
//!
//! How (`LOCALMAP_LINK`):
//!  - `static` (the default when liblocalmap.a is there): liblocalmap.a goes into the binary, with
//!    what localmap.pc says it needs (`pkg-config --static`: the MPI library, libstdc++, NCCL and
//!    the CUDA runtime in a CUDA build). A program that depends on the `localmap` crate then runs
//!    as it is: it needs only the MPI library (and CUDA's), which the system's loader finds, and
//!    nothing of the prefix or the checkout at run time.
//!  - `dynamic`: links liblocalmap.so. This crate's own tests get an rpath; a program of yours finds
//!    the library through the loader (an installed prefix in ld.so.conf, LD_LIBRARY_PATH) or an
//!    rpath its build.rs adds from `DEP_LOCALMAP_LIB_DIR` (it must then depend on localmap-sys
//!    directly): `println!("cargo:rustc-link-arg=-Wl,-rpath,{}", std::env::var("DEP_LOCALMAP_LIB_DIR").unwrap());`
//!    Sanitizer builds of the library link this way (the ASan runtime is preloaded).
//!
//! Exports `DEP_LOCALMAP_LIB_DIR`, `DEP_LOCALMAP_INCLUDE_DIR`, `DEP_LOCALMAP_LINK` (static or
//! dynamic) and `DEP_LOCALMAP_RPATH` (directories the library's own dependencies need on the
//! loader path, e.g. CUDA's; ':'-separated) to dependents' build scripts, and
//! `LOCALMAP_INCLUDE_DIR` to this crate's code (the layout test compiles C against it).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn has_lib(dir: &Path) -> bool {
    dir.join("liblocalmap.so").exists() || dir.join("liblocalmap.a").exists()
}

fn pkg_config(args: &[&str], module: &str) -> Option<String> {
    let prog = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let out = Command::new(prog).args(args).arg(module).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The localmap.pc describing the library in `lib`: an installed prefix's, the build tree's.
fn pc_file_for(lib: &Path) -> Option<PathBuf> {
    [lib.join("pkgconfig/localmap.pc"), lib.join("../localmap.pc")].into_iter().find(|p| p.exists())
}

/// Links liblocalmap.a and what `pkg-config --static --libs` of its .pc file lists. Returns the
/// -Wl,-rpath directories found there (a CUDA build's), or Err(reason) to link dynamically instead.
fn link_static(lib: &Path) -> Result<Vec<String>, String> {
    let archive = lib.join("liblocalmap.a");
    if !archive.exists() {
        return Err(format!("no {}", archive.display()));
    }
    let pc = pc_file_for(lib).ok_or_else(|| format!("no localmap.pc for {}", lib.display()))?;
    let pc_s = pc.to_string_lossy().into_owned();
    let flags = pkg_config(&["--static", "--libs"], &pc_s)
        .ok_or_else(|| format!("`pkg-config --static --libs {pc_s}` failed (is the MPI's .pc file, e.g. ompi.pc, installed?)"))?;
    println!("cargo:rerun-if-changed={}", archive.display());
    println!("cargo:rerun-if-changed={pc_s}");
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=static=localmap");
    let mut rpath = Vec::new();
    for f in flags.split_whitespace() {
        if let Some(d) = f.strip_prefix("-L") {
            if Path::new(d) != lib {
                println!("cargo:rustc-link-search=native={d}");
            }
        } else if let Some(l) = f.strip_prefix("-l") {
            if l != "localmap" {
                println!("cargo:rustc-link-lib=dylib={l}");
            }
        } else if let Some(d) = f.strip_prefix("-Wl,-rpath,") {
            rpath.push(d.to_string());
        } else if f != "-pthread" && !f.starts_with("-Wl,-z,") {  // (hardening flags: MPICH's)
            println!("cargo:warning=localmap-sys: ignoring the link flag {f} of {pc_s}");
        }
    }
    Ok(rpath)
}

/// Where liblocalmap is: (its directory, the header's, how it was found), or the places tried.
fn find(source_root: &Path) -> Result<(PathBuf, PathBuf, &'static str), Vec<String>> {
    let mut tried = Vec::new();
    if let Ok(lib) = env::var("LOCALMAP_LIB_DIR").map(PathBuf::from) {
        let up = lib.join("../include");
        let inc = env::var("LOCALMAP_INCLUDE_DIR").map(PathBuf::from)
            .unwrap_or_else(|_| if up.join("localmap.h").exists() { up } else { source_root.join("include") });
        if has_lib(&lib) {
            return Ok((lib, inc, "LOCALMAP_LIB_DIR"));
        }
        tried.push(format!("LOCALMAP_LIB_DIR={} (no liblocalmap.so there)", lib.display()));
    } else {
        tried.push("LOCALMAP_LIB_DIR (not set)".into());
    }
    match pkg_config(&["--variable=libdir"], "localmap").map(PathBuf::from) {
        Some(lib) if has_lib(&lib) => {
            let inc = pkg_config(&["--variable=includedir"], "localmap").unwrap_or_default();
            return Ok((lib, PathBuf::from(inc), "pkg-config"));
        }
        Some(lib) => tried.push(format!("pkg-config localmap: libdir {} has no liblocalmap", lib.display())),
        None => tried.push("pkg-config localmap (program missing or module not found; set PKG_CONFIG_PATH)".into()),
    }
    let lib = source_root.join("build/lib");
    if has_lib(&lib) {
        return Ok((lib, source_root.join("include"), "source build tree"));
    }
    tried.push(format!("{} (the source tree's build; run `make lib`)", lib.display()));
    Err(tried)
}

/// Links liblocalmap as `LOCALMAP_LINK` asks; returns the directories it needs on the loader path.
fn link(lib: &Path) -> Vec<String> {
    let want = env::var("LOCALMAP_LINK").unwrap_or_default();
    match want.as_str() {
        "" | "static" => match link_static(lib) {
            Ok(rpath) => {
                println!("cargo:link=static");
                return rpath;
            }
            Err(why) if want == "static" => panic!("localmap-sys: LOCALMAP_LINK=static, but {why}"),
            Err(why) => println!("cargo:warning=localmap-sys: linking liblocalmap.so ({why}): a program of yours \
                                  then needs it on the loader path (see localmap-sys's build.rs)"),
        },
        "dynamic" => {}
        other => panic!("localmap-sys: LOCALMAP_LINK={other}: use static or dynamic"),
    }
    println!("cargo:rerun-if-changed={}", lib.join("liblocalmap.so").display());
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=localmap");
    println!("cargo:link=dynamic");
    vec![lib.display().to_string()]
}

fn main() {
    for v in ["LOCALMAP_LIB_DIR", "LOCALMAP_INCLUDE_DIR", "LOCALMAP_LINK", "PKG_CONFIG_PATH", "PKG_CONFIG"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let source_root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../..");
    let (lib, inc, how) = find(&source_root)
        .unwrap_or_else(|tried| panic!("localmap-sys: cannot find liblocalmap; tried:\n  {}", tried.join("\n  ")));
    let (lib, inc) = (lib.canonicalize().unwrap_or(lib), inc.canonicalize().unwrap_or(inc));
    if how == "source build tree" {
        println!("cargo:warning=localmap-sys: no installed localmap found (pkg-config), so this links the \
                  source tree's build ({}); set PKG_CONFIG_PATH=<prefix>/lib/pkgconfig to use an installed one",
                 lib.display());
    }
    // For this crate's own tests; dependents get DEP_LOCALMAP_RPATH (the localmap crate's build.rs
    // adds it to its tests and examples).
    let rpath = link(&lib);
    for d in &rpath {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{d}");
    }
    println!("cargo:rpath={}", rpath.join(":"));
    println!("cargo:lib_dir={}", lib.display());
    println!("cargo:include_dir={}", inc.display());
    println!("cargo:rustc-env=LOCALMAP_INCLUDE_DIR={}", inc.display());
}
