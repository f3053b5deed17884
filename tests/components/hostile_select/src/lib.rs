//! A hostile select operator: `config.attack` names the attack. Attempts the sandbox
//! must refuse return `Err` with one `<attempt>: denied: <error>` line each; anything
//! that got through returns `Ok` with a `BREACH ...` line (see `attacks.rs`).

#[path = "../../attacks.rs"]
mod attacks;

use attacks::Report;
use evolve_operator_sdk::config::{integer, string};
use evolve_operator_sdk::prelude::*;

pub struct HostileSelect;

impl Operator for HostileSelect {
    const NAME: &'static str = "hostile_select";
    const SUMMARY: &'static str = "Tries to break out of the sandbox (test component).";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "attack",
                string().required().description("Which attack to run"),
            )
            .field("port", integer().minimum(1.0).maximum(65535.0))
    }
}

impl Select for HostileSelect {
    fn select(ctx: &Context, _archive: &ArchiveView) -> Result<Vec<String>, String> {
        let attack = ctx.str("attack").ok_or("config.attack is missing")?;
        let mut r = Report::default();
        match attack {
            "read_passwd" => attacks::try_read(&mut r, "/etc/passwd"),
            "read_escape" => {
                for path in [
                    "../evaluator/secret.txt",
                    "/target/../evaluator/secret.txt",
                    "/target/../archive.jsonl",
                    "/evaluator/secret.txt",
                    "/archive.jsonl",
                    "/scratch/../target/../evaluator/secret.txt",
                    "/target/link_rel",
                    "/target/link_abs",
                    "/target/link_dir/secret.txt",
                    "/target/sub/link_up2",
                ] {
                    attacks::try_read(&mut r, path);
                }
                match attacks::list("/") {
                    Ok(names) => r.note(format!("ls /: {names:?}")),
                    Err(e) => r.denied("ls /", e),
                }
            }
            // Positive control: what a select operator may read.
            "report_fs" => {
                let mut lines = Vec::new();
                for dir in ["/", "/target", "/scratch", "/operators", "/feedback"] {
                    lines.push(format!("ls {dir}: {:?}", attacks::list(dir)));
                }
                for file in [
                    "/target/file.txt",
                    "/target/link_inner",
                    "/target/sub/keep.txt",
                ] {
                    lines.push(format!("read {file}: {:?}", attacks::read(file)));
                }
                lines.push(format!(
                    "write /scratch/ok.txt: {:?}",
                    std::fs::write("/scratch/ok.txt", "scratch ok").map_err(|e| e.to_string())
                ));
                return Ok(lines);
            }
            "write_target" => {
                attacks::try_write_all(&mut r, "/target/x");
                attacks::try_mkdir(&mut r, "/target/newdir");
                attacks::try_modify(&mut r, "/target/file.txt");
                match attacks::make_symlink("file.txt", "/target/new_link") {
                    Ok(()) => r.breach("symlink /target/new_link", "created"),
                    Err(e) => r.denied("symlink /target/new_link", e),
                }
                match std::fs::remove_dir("/target/sub") {
                    Ok(()) => r.breach("rmdir /target/sub", "removed"),
                    Err(e) => r.denied("rmdir /target/sub", e),
                }
                attacks::try_link_across(&mut r, "/target/file.txt", "/scratch/hl");
            }
            "spin" => attacks::spin(),
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(30));
                return Ok(vec!["woke up after 30 s".into()]);
            }
            "memory_bomb" => {
                let n = attacks::memory_bomb();
                return Ok(vec![format!("allocated {n} chunks")]);
            }
            "recursion" => return Ok(vec![attacks::recurse(0).to_string()]),
            "recursion_shadow" => return Ok(vec![attacks::recurse_shadow(0).to_string()]),
            "wild_read" => return Ok(vec![attacks::wild_read().to_string()]),
            "flood_stdout" => {
                attacks::flood_stdout(10 * 1024)?;
                return Ok(vec!["flooded".into()]);
            }
            "socket" => {
                let port = ctx
                    .i64("port")
                    .ok_or("config.port is required for socket")?;
                attacks::sockets(&mut r, port as u16);
            }
            "env" => return Ok(attacks::environment()),
            "empty_result" => return Ok(Vec::new()),
            "blank_result" => return Ok(vec!["  ".into()]),
            "oversized_result" => return Ok(vec!["x".repeat(20 << 20)]),
            "oversized_error" => return Err("E".repeat(20 << 20)),
            "panic" => panic!("hostile panic 42"),
            "exit" => std::process::exit(0),
            "abort" => std::process::abort(),
            // Issue 22: 900,000 ids for one child were accepted and archived.
            "many_ids" => return Ok(vec!["0".into(); 900_000]),
            // Over wasmtime's 128 MiB hostcall fuel: refused before it is copied.
            "huge_result" => return Ok(vec!["x".repeat(150 << 20)]),
            // Disk quota: 1 GiB into /scratch, 100,000 files, a 1 TiB sparse file.
            "fill_scratch" => {
                let n = attacks::fill_file("/scratch/fill.bin", 1 << 30)?;
                return Ok(vec![format!("wrote {n} bytes")]);
            }
            // Over the quota, then blocked in a host call: the epoch cannot stop it.
            "fill_then_sleep" => {
                attacks::fill_file("/scratch/fill.bin", 9 << 20)?;
                std::thread::sleep(std::time::Duration::from_secs(30));
                return Ok(vec!["woke up after 30 s".into()]);
            }
            "many_files" => {
                let n = attacks::many_files("/scratch", 100_000)?;
                return Ok(vec![format!("made {n} files")]);
            }
            "sparse_file" => {
                attacks::sparse_file("/scratch/sparse.bin", 1 << 40)?;
                return Ok(vec!["made a 1 TiB sparse file".into()]);
            }
            // What the guest is told about its deadline.
            "deadline" => return Ok(vec![ctx.deadline_ms.to_string()]),
            "ok" => return Ok(vec!["0".into()]),
            other => return Err(format!("unknown attack {other:?}")),
        }
        r.into_result()
    }
}

evolve_operator_sdk::export!(select: HostileSelect);
