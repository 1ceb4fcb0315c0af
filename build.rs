//! Puts llama.cpp's shared libraries beside the binaries.
//!
//! The vendored llama.cpp is built as shared libraries with one CPU backend per x86-64
//! level (llama-cpp-sys-2's `dynamic-backends`: `GGML_BACKEND_DL` + `GGML_CPU_ALL_VARIANTS`).
//! At start-up the model thread loads the variant that scores best on the running CPU, so
//! one build runs on a plain x86-64 machine and still uses AVX-512 VNNI where it exists.
//! The libraries live in llama-cpp-sys-2's build directory; this script copies them into
//! the profile directory (and `deps/`, where test binaries run) and gives every binary an
//! `$ORIGIN` run path, so `target/release/` is a folder that runs anywhere as it is.

use std::path::{Path, PathBuf};

/// CPU variants not placed beside the binaries. The Sapphire Rapids variant multiplies
/// with AMX tiles, and on a virtual machine that reports AMX without keeping the tile
/// state (this project's CI machines) its first `tilezero` is an invalid opcode that kills
/// the process, whatever permission the process asked for. ggml scores it best on such a
/// processor, so it must not be offered: the Zen 4 variant (AVX-512 with VNNI and BF16)
/// is chosen there instead, at 395 prompt tokens/s on one thread for the default model.
const LEFT_OUT: &[&str] = &["libggml-cpu-sapphirerapids.so"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let Ok(backends) = std::env::var("DEP_LLAMA_BACKENDS_DIR") else {
        // llama-cpp-sys-2 was not built with dynamic backends: nothing to place.
        return;
    };
    let backends = PathBuf::from(backends);
    let Some(sys_out) = backends.parent().map(Path::to_path_buf) else { return };
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN");
    }
    // Where the binaries land: OUT_DIR is <profile>/build/<package>-<hash>/out.
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let Some(profile_dir) = out_dir.ancestors().nth(3).map(Path::to_path_buf) else { return };

    let mut sources = Vec::new();
    for dir in [backends.clone(), sys_out.join("lib"), sys_out.join("lib64"), sys_out.join("build").join("common")] {
        if dir.is_dir() {
            println!("cargo:rerun-if-changed={}", dir.display());
            sources.extend(shared_libraries(&dir));
        }
    }
    for dest in [profile_dir.clone(), profile_dir.join("deps")] {
        if std::fs::create_dir_all(&dest).is_err() {
            continue;
        }
        for name in LEFT_OUT {
            // A copy an earlier build placed would still be loaded and chosen.
            let _ = std::fs::remove_file(dest.join(name));
        }
        for source in &sources {
            if source.file_name().and_then(|n| n.to_str()).is_some_and(|n| LEFT_OUT.contains(&n)) {
                continue;
            }
            let Some(name) = source.file_name() else { continue };
            let target = dest.join(name);
            // Remove first: llama-cpp-sys-2 hard-links some of these files into the same
            // folders, and copying onto a hard link would write through to its source.
            let _ = std::fs::remove_file(&target);
            // A version symlink (`libllama.so.0` -> `libllama.so.0.0.1`) stays a symlink.
            let placed = match std::fs::read_link(source) {
                Ok(link) => link_to(&link, &target),
                Err(_) => std::fs::copy(source, &target).map(drop),
            };
            if let Err(e) = placed {
                println!("cargo:warning=cannot copy {} to {}: {e}", source.display(), target.display());
            }
        }
    }
    // The run-time fallback for binaries that were moved away from their libraries.
    println!("cargo:rustc-env=LOREKEEPER_GGML_BACKENDS_DIR={}", backends.display());
}

/// The shared libraries in `dir` under every name the loader may ask for
/// (`libllama.so.0` as well as `libllama.so`), version symlinks included.
fn shared_libraries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("lib") && (name.ends_with(".so") || name.contains(".so.")) && p.exists()
        })
        .collect();
    found.sort();
    found
}

#[cfg(unix)]
fn link_to(original: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(original, link)
}

#[cfg(not(unix))]
fn link_to(_original: &Path, _link: &Path) -> std::io::Result<()> {
    Ok(())
}
