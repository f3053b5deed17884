//! Builds every operator component for wasm32-wasip2 and embeds the library ones, and
//! embeds the built-in seeds.
//!
//! `cargo build` of the host is the one command that builds everything: this script
//! runs a nested `cargo build --target wasm32-wasip2 --profile operator` over the
//! crates under `operators/<stage>/<name>/` (embedded in the `evolve` binary),
//! `tests/components/<name>/` (hostile and fixture components the tests load from
//! disk) and `seeds/<name>/agent/` (a seed's agent component). The nested build uses
//! the `operator` profile, whose lock directories differ from the outer build's, so the
//! shared target directory does not deadlock.
//!
//! A seed is `seeds/<name>/` with a `seed.toml` (`summary = "..."`): every file under
//! its `target/` and `tasks/` is embedded, in path order, and its agent crate (package
//! `seed-<name>-agent`), when present, becomes the target's `agent.wasm`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Crate {
    package: String,
    artifact: String,
    stage: Option<String>,
    name: String,
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    for dir in ["operators", "tests/components", "sdk-rust", "wit", "seeds"] {
        println!("cargo::rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo::rerun-if-env-changed=EVOLVE_SKIP_COMPONENT_BUILD");
    if std::env::var_os("EVOLVE_SKIP_COMPONENT_BUILD").is_none() && !ensure_wasm_target() {
        return; // cargo::error was printed: cargo fails the build with that one line
    }
    warn_without_bubblewrap();

    let mut crates = library_crates(&root);
    let library_count = crates.len();
    crates.extend(test_crates(&root));
    let seeds = seeds(&root);
    crates.extend(
        seeds
            .iter()
            .filter_map(|s| s.agent.as_ref())
            .map(|package| Crate {
                artifact: package.clone(),
                package: package.clone(),
                stage: None,
                name: package.clone(),
            }),
    );

    let target_dir = target_dir(&root);
    let out_dir = target_dir.join("wasm32-wasip2").join("operator");
    if std::env::var_os("EVOLVE_SKIP_COMPONENT_BUILD").is_none() {
        build_components(&root, &target_dir, &crates);
    }

    let mut src = String::from(
        "/// Operator components built from `operators/` and embedded at compile time.\n",
    );
    src.push_str("pub static EMBEDDED: &[EmbeddedOperator] = &[\n");
    for c in &crates[..library_count] {
        let path = out_dir.join(format!("{}.wasm", c.artifact));
        let (sha256, blob_id) = digests(&path);
        writeln!(
            src,
            "    EmbeddedOperator {{ stage: {:?}, name: {:?}, bytes: include_bytes!({:?}), \
             sha256: {sha256:?}, blob_id: {blob_id:?} }},",
            c.stage.as_deref().unwrap(),
            c.name,
            path.display().to_string()
        )
        .unwrap();
    }
    src.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("embedded_operators.rs");
    std::fs::write(dest, src).unwrap();
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("embedded_seeds.rs");
    std::fs::write(dest, seeds_source(&seeds, &out_dir)).unwrap();
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("embedded_selftest.rs");
    std::fs::write(dest, selftest_source(&out_dir)).unwrap();
    println!(
        "cargo::rustc-env=EVOLVE_TEST_COMPONENTS_DIR={}",
        out_dir.display()
    );
}

/// The test components `evolve selftest` runs, embedded apart from the library so that
/// `evolve operator list` and recipes never see them.
const SELFTEST_COMPONENTS: [&str; 2] = ["selftest_mutate", "slow_gate"];

fn selftest_source(out_dir: &Path) -> String {
    let mut src =
        String::from("/// Hostile components of `evolve selftest`, embedded at compile time.\n");
    src.push_str("pub static SELFTEST_COMPONENTS: &[(&str, &[u8])] = &[\n");
    for name in SELFTEST_COMPONENTS {
        let path = out_dir.join(format!("tc_{name}.wasm"));
        let path = path.display().to_string();
        writeln!(src, "    ({name:?}, include_bytes!({path:?})),").unwrap();
    }
    src.push_str("];\n");
    src
}

/// A built-in seed found under `seeds/<name>/`.
struct SeedSource {
    name: String,
    summary: String,
    /// `(relative path, absolute path, executable)`, sorted by relative path.
    target: Vec<(String, PathBuf, bool)>,
    tasks: Vec<(String, PathBuf, bool)>,
    /// The agent crate's package, built into the target's `agent.wasm`.
    agent: Option<String>,
}

/// Every `seeds/<name>/` holding a `seed.toml`, in name order.
fn seeds(root: &Path) -> Vec<SeedSource> {
    let mut out = Vec::new();
    for dir in sorted_dirs(&root.join("seeds")) {
        let manifest = dir.join("seed.toml");
        if !manifest.is_file() {
            continue;
        }
        let name = file_name(&dir);
        let text = std::fs::read_to_string(&manifest).unwrap();
        let summary = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("summary")?.trim().strip_prefix('='))
            .and_then(|v| v.trim().strip_prefix('"')?.strip_suffix('"'))
            .filter(|v| !v.is_empty() && !v.contains(['\\', '"']))
            .unwrap_or_else(|| {
                panic!(
                    "evolve build: {} needs a line `summary = \"...\"` (no escapes)",
                    manifest.display()
                )
            })
            .to_string();
        let agent = dir
            .join("agent/Cargo.toml")
            .is_file()
            .then(|| format!("seed-{}-agent", name.replace('_', "-")));
        let mut target = seed_files(&dir.join("target"));
        if agent.is_some() {
            if target.iter().any(|(p, _, _)| p == "agent.wasm") {
                panic!(
                    "evolve build: seed {name:?} has both agent/ and target/agent.wasm; \
                     agent.wasm is built from agent/"
                );
            }
            target.push(("agent.wasm".into(), PathBuf::new(), false));
            target.sort();
        }
        let tasks = seed_files(&dir.join("tasks"));
        if tasks.is_empty() {
            panic!(
                "evolve build: seed {name:?} has no tasks under {}/tasks",
                dir.display()
            );
        }
        out.push(SeedSource {
            name,
            summary,
            target,
            tasks,
            agent,
        });
    }
    out
}

/// The regular files under `dir`, recursively, as `(relative path, absolute path,
/// executable)` sorted by relative path. Anything but files and directories is refused.
fn seed_files(dir: &Path) -> Vec<(String, PathBuf, bool)> {
    use std::os::unix::fs::PermissionsExt;
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, PathBuf, bool)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                walk(base, &path, out);
            } else if meta.is_file() {
                let rel = path.strip_prefix(base).unwrap();
                let rel: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_str().unwrap().to_string())
                    .collect();
                out.push((rel.join("/"), path, meta.permissions().mode() & 0o111 != 0));
            } else {
                panic!(
                    "evolve build: seed file {} is neither a file nor a directory",
                    path.display()
                );
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn seeds_source(seeds: &[SeedSource], out_dir: &Path) -> String {
    let files = |src: &mut String, files: &[(String, PathBuf, bool)], agent: Option<&String>| {
        for (rel, abs, executable) in files {
            let abs = match agent {
                Some(package) if rel == "agent.wasm" && abs.as_os_str().is_empty() => {
                    out_dir.join(format!("{package}.wasm"))
                }
                _ => abs.clone(),
            };
            writeln!(
                src,
                "        SeedFile {{ path: {rel:?}, bytes: include_bytes!({:?}), executable: {executable} }},",
                abs.display().to_string()
            )
            .unwrap();
        }
    };
    let mut src = String::from("/// Seeds from `seeds/`, embedded at compile time.\n");
    src.push_str("pub static SEEDS: &[Seed] = &[\n");
    for s in seeds {
        writeln!(
            src,
            "    Seed {{ name: {:?}, summary: {:?}, target: &[",
            s.name, s.summary
        )
        .unwrap();
        files(&mut src, &s.target, s.agent.as_ref());
        src.push_str("    ], tasks: &[\n");
        files(&mut src, &s.tasks, None);
        src.push_str("    ] },\n");
    }
    src.push_str("];\n");
    src
}

/// `operators/<stage>/<name>` is package `op-<stage>-<name>` (underscores become dashes).
/// The SHA-256 of the component at `path` and its git blob id (SHA-1 of `blob <len>\0`
/// and the bytes), computed once here instead of on every `evolve init` and recipe
/// check. `builtin`'s tests recompute both at run time.
fn digests(path: &Path) -> ([u8; 32], [u8; 20]) {
    use sha1::Digest as _;
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let sha256 = <sha2::Sha256 as sha2::Digest>::digest(&bytes).into();
    let mut blob = sha1::Sha1::new();
    blob.update(format!("blob {}\0", bytes.len()));
    blob.update(&bytes);
    (sha256, blob.finalize().into())
}

fn library_crates(root: &Path) -> Vec<Crate> {
    let mut out = Vec::new();
    for stage in sorted_dirs(&root.join("operators")) {
        let stage_name = file_name(&stage);
        for op in sorted_dirs(&stage) {
            if !op.join("Cargo.toml").is_file() {
                continue;
            }
            let name = file_name(&op);
            let package = format!("op-{stage_name}-{}", name.replace('_', "-"));
            out.push(Crate {
                artifact: package.replace('-', "_"),
                package,
                stage: Some(stage_name.clone()),
                name,
            });
        }
    }
    out
}

/// `tests/components/<name>` is package `tc-<name>`.
fn test_crates(root: &Path) -> Vec<Crate> {
    sorted_dirs(&root.join("tests/components"))
        .into_iter()
        .filter(|d| d.join("Cargo.toml").is_file())
        .map(|d| {
            let name = file_name(&d);
            let package = format!("tc-{}", name.replace('_', "-"));
            Crate {
                artifact: package.replace('-', "_"),
                package,
                stage: None,
                name,
            }
        })
        .collect()
}

/// The wasm32-wasip2 target must be installed for the active toolchain before anything is
/// built for it. rustup installs the `targets` of `rust-toolchain.toml` only when it
/// installs the toolchain itself; a toolchain that was already there is used as it is. So
/// check the sysroot first, add the target with rustup if it is missing, and stop with one
/// line naming the command to run only if that fails too. Returns whether it is there.
fn ensure_wasm_target() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let installed = |root: &Option<PathBuf>| {
        root.as_ref()
            .is_some_and(|r| r.join("lib/rustlib/wasm32-wasip2/lib").is_dir())
    };
    if installed(&sysroot) {
        return true;
    }
    // The toolchain cargo runs under (rustup's proxy names it), else the pinned one.
    let toolchain = std::env::var("RUSTUP_TOOLCHAIN").unwrap_or_else(|_| "1.95.0".into());
    let add = format!("rustup target add wasm32-wasip2 --toolchain {toolchain}");
    println!("cargo::warning=the wasm32-wasip2 target is missing; running `{add}`");
    let added = Command::new("rustup")
        .args(["target", "add", "wasm32-wasip2", "--toolchain", &toolchain])
        .status()
        .is_ok_and(|s| s.success());
    if !(added && installed(&sysroot)) {
        println!(
            "cargo::error=the operator components need the wasm32-wasip2 target, which is not installed for this toolchain and could not be added; run `{add}`, then build again"
        );
        return false;
    }
    true
}

/// The local engine runs every trial phase in a bubblewrap sandbox and refuses to start a
/// run without it. Say so in the build's output too, not only when the first run starts.
fn warn_without_bubblewrap() {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("bwrap").is_file()));
    if !on_path {
        println!(
            "cargo::warning=bubblewrap (bwrap) is not installed: the demo runs without it, but a local-engine run of an agent of your own will refuse to start until it is (Debian/Ubuntu: apt-get install bubblewrap)"
        );
    }
}

fn build_components(root: &Path, target_dir: &Path, crates: &[Crate]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args([
            "build",
            "--target",
            "wasm32-wasip2",
            "--profile",
            "operator",
        ])
        .arg("--target-dir")
        .arg(target_dir);
    for c in crates {
        cmd.args(["-p", &c.package]);
    }
    // The outer build's settings are for the native host; the nested build must not
    // inherit them (flags, target, wrappers), only the toolchain and the job server.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().to_string();
        let inherited_build_setting = key.starts_with("CARGO_")
            && key != "CARGO_HOME"
            && key != "CARGO_MAKEFLAGS"
            && key != "CARGO_REGISTRIES_CRATES_IO_PROTOCOL"
            && key != "CARGO_NET_OFFLINE";
        if inherited_build_setting
            || matches!(
                key.as_str(),
                "RUSTFLAGS"
                    | "RUSTC_WRAPPER"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "TARGET"
                    | "HOST"
                    | "OUT_DIR"
                    | "OPT_LEVEL"
                    | "PROFILE"
                    | "DEBUG"
                    | "NUM_JOBS"
                    | "RUSTDOC"
                    | "RUSTC"
                    | "RUSTC_LINKER"
            )
        {
            cmd.env_remove(&key);
        }
    }
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("evolve build: cannot run cargo to build the operator components: {e}")
    });
    if !status.success() {
        panic!(
            "evolve build: building the operator components for wasm32-wasip2 failed (see the \
             errors above)."
        );
    }
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { root.join(p) })
        .unwrap_or_else(|| root.join("target"))
}

fn sorted_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect(),
        Err(_) => Vec::new(),
    };
    dirs.sort();
    dirs
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().to_string()
}
