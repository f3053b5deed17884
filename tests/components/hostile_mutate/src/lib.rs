//! A hostile mutate operator (read-write `/target`): `config.attack` names the attack.
//! Attempts the sandbox must refuse return `Err` with one `<attempt>: denied: <error>`
//! line each; anything that got through returns `Ok` with `BREACH ...` notes. Attacks
//! that are *allowed* (planting symlinks, huge files, odd names) return `Ok` with notes
//! describing what they did, for the test to check on the host side.

#[path = "../../attacks.rs"]
mod attacks;

use attacks::Report;
use evolve_operator_sdk::config::string;
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::{model, tasks};

pub struct HostileMutate;

impl Operator for HostileMutate {
    const NAME: &'static str = "hostile_mutate";
    const SUMMARY: &'static str =
        "Tries to break out of the sandbox while mutating (test component).";

    fn config() -> SchemaBuilder {
        Schema::new().field("attack", string().required())
    }
}

fn proposal(notes: Vec<String>) -> Proposal {
    Proposal {
        changed: Vec::new(),
        notes,
        usage: Usage {
            input_tokens: 0,
            output_tokens: 0,
            usd: 0.0,
        },
    }
}

fn outcome(r: Report) -> Result<Proposal, String> {
    r.into_result().map(proposal)
}

fn result_line<T: std::fmt::Debug, E: std::fmt::Display>(what: &str, res: Result<T, E>) -> String {
    match res {
        Ok(v) => format!("{what}: ok {v:?}"),
        Err(e) => format!("{what}: error: {e}"),
    }
}

impl Mutate for HostileMutate {
    fn mutate(ctx: &Context, _observation: &Observation) -> Result<Proposal, String> {
        let attack = ctx.str("attack").ok_or("config.attack is missing")?;
        let mut r = Report::default();
        match attack {
            "plant_symlinks" => {
                let mut notes = Vec::new();
                for (target, link) in [
                    ("../evaluator/secret.txt", "/target/link_rel"),
                    ("/etc/passwd", "/target/link_abs"),
                    ("..", "/target/link_up"),
                    ("file.txt", "/target/link_inner"),
                ] {
                    notes.push(result_line(
                        &format!("symlink {link} -> {target}"),
                        attacks::make_symlink(target, link),
                    ));
                }
                // Can the guest itself read through what it planted?
                for path in [
                    "/target/link_rel",
                    "/target/link_abs",
                    "/target/link_up/evaluator/secret.txt",
                    "/target/link_inner",
                ] {
                    notes.push(result_line(&format!("read {path}"), attacks::read(path)));
                }
                Ok(proposal(notes))
            }
            "write_feedback" => {
                attacks::try_write_all(&mut r, "/feedback/new.txt");
                attacks::try_mkdir(&mut r, "/feedback/newdir");
                attacks::try_modify(&mut r, "/feedback/train.json");
                attacks::try_link_across(&mut r, "/feedback/train.json", "/target/hl");
                attacks::try_link_across(&mut r, "/feedback/train.json", "/scratch/hl");
                outcome(r)
            }
            "write_operators" => {
                attacks::try_write_all(&mut r, "/operators/new.txt");
                attacks::try_modify(&mut r, "/operators/select/mine/src/lib.rs");
                outcome(r)
            }
            "write_outside" => {
                for path in [
                    "/scratch/../../x",
                    "/scratch/../x",
                    "/target/../x",
                    "/target/../evaluator/x",
                    "/evaluator/x",
                    "../x",
                    "/x",
                    "/tmp/x",
                ] {
                    attacks::try_write_all(&mut r, path);
                }
                attacks::try_modify(&mut r, "/target/../evaluator/secret.txt");
                attacks::try_modify(&mut r, "/target/../archive.jsonl");
                // Through a symlink it plants itself.
                match attacks::make_symlink("../evaluator", "/target/esc") {
                    Ok(()) => r.note("symlink /target/esc -> ../evaluator: planted"),
                    Err(e) => r.denied("symlink /target/esc -> ../evaluator", e),
                }
                attacks::try_write_all(&mut r, "/target/esc/x");
                attacks::try_modify(&mut r, "/target/esc/secret.txt");
                outcome(r)
            }
            "huge_file" => {
                use std::io::Write;
                let chunk = vec![0x5au8; 1 << 20];
                let mut f = std::fs::File::create("/target/huge.bin")
                    .map_err(|e| format!("create: {e}"))?;
                for i in 0..50 {
                    f.write_all(&chunk)
                        .map_err(|e| format!("write chunk {i}: {e}"))?;
                }
                f.sync_all().map_err(|e| format!("sync: {e}"))?;
                Ok(proposal(vec!["wrote 50 MiB to /target/huge.bin".into()]))
            }
            "odd_names" => {
                let long = "a".repeat(255);
                let too_long = "b".repeat(256);
                let mut notes = Vec::new();
                for name in [
                    "new\nline",
                    "-rf",
                    "--help",
                    " spaced ",
                    "tab\tname",
                    "uni\u{e9}",
                    "back\\slash",
                    long.as_str(),
                    too_long.as_str(),
                ] {
                    let path = format!("/target/{name}");
                    notes.push(result_line(
                        &format!("create {name:?}"),
                        std::fs::write(&path, name.as_bytes()),
                    ));
                }
                notes.push(non_utf8_name());
                Ok(proposal(notes))
            }
            "call_model" => {
                let req = model::ChatRequest {
                    messages: vec![model::Message {
                        role: model::Role::User,
                        content: "hello".into(),
                    }],
                    max_tokens: Some(8),
                    temperature: None,
                };
                match model::chat(&req) {
                    Ok(resp) => Ok(proposal(vec![format!(
                        "{} model answered: {:?}",
                        attacks::BREACH,
                        resp.content
                    )])),
                    Err(model::ModelError::Unavailable(msg)) => {
                        Err(format!("model: unavailable: {msg}"))
                    }
                    Err(e) => Err(format!("model: other error: {e:?}")),
                }
            }
            "call_tasks_gate" => {
                let mut notes = vec![format!("train-tasks: {:?}", tasks::train_tasks())];
                let run = |names: &[&str], reps: u32| {
                    tasks::run(&tasks::RunRequest {
                        tasks: names.iter().map(|s| s.to_string()).collect(),
                        repetitions: reps,
                    })
                };
                for (label, names, reps) in [
                    ("gate", &["gate-secret"][..], 1),
                    ("unknown", &["no-such-task"][..], 1),
                    ("mixed", &["train-1", "gate-secret"][..], 1),
                    ("zero-reps", &["train-1"][..], 0),
                    ("train", &["train-1"][..], 1),
                ] {
                    let line = match run(names, reps) {
                        Ok(reports) => format!(
                            "{label}: ok {:?}",
                            reports
                                .iter()
                                .map(|t| (t.task.clone(), t.repetition, t.reward))
                                .collect::<Vec<_>>()
                        ),
                        Err(e) => format!("{label}: error {e:?}"),
                    };
                    notes.push(line);
                }
                Ok(proposal(notes))
            }
            // Disk quota on /target: 1 GiB, far over any quota.
            "fill_target" => {
                let n = attacks::fill_file("/target/fill.bin", 1 << 30)?;
                Ok(proposal(vec![format!("wrote {n} bytes to /target")]))
            }
            "ok" => Ok(proposal(vec!["ok".into()])),
            other => Err(format!("unknown attack {other:?}")),
        }
    }
}

/// WASI p2 paths are Unicode strings: a non-UTF-8 name cannot even be expressed. Try
/// through wasi-libc's `open` with raw bytes and report what happened.
fn non_utf8_name() -> String {
    let path = std::ffi::CString::new(b"/target/bad\xff\xfename".to_vec()).expect("no NUL");
    // SAFETY: valid NUL-terminated path; the variadic mode is an int as C expects.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY,
            0o644 as libc::c_int,
        )
    };
    if fd >= 0 {
        unsafe { libc::close(fd) };
        "create non-utf8: ok".into()
    } else {
        format!(
            "create non-utf8: error: {}",
            std::io::Error::last_os_error()
        )
    }
}

evolve_operator_sdk::export!(mutate: HostileMutate);
