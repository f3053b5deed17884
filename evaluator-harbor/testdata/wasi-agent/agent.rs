// A WASI command (wasm32-wasip2) agent used by the tests. Built by the test with
// `rustc --target wasm32-wasip2 -O agent.rs`.
use std::io::Read;

fn main() {
    let mut instruction = String::new();
    let _ = std::io::stdin().read_to_string(&mut instruction);
    println!("instruction: {}", instruction.trim());
    if std::env::var("MODE").as_deref() == Ok("spin") {
        let mut x: u64 = 0;
        loop {
            x = x.wrapping_add(1);
            std::hint::black_box(x);
        }
    }
    if std::env::var("MODE").as_deref() == Ok("hog") {
        // Grow past the task's memory_mb, a MiB at a time, touching every page.
        let mut held: Vec<Vec<u8>> = Vec::new();
        for i in 0.. {
            held.push(vec![1u8; 1 << 20]);
            if i % 64 == 0 {
                println!("holding {} MiB", held.len());
            }
        }
    }
    if std::env::var("MODE").as_deref() == Ok("hostile") {
        hostile();
        return;
    }
    let mut escapes = 0;
    for p in [
        "/tests/test.sh",
        "/solution/solve.sh",
        "/etc/passwd",
        "/logs/verifier",
        "/",
        "../tests/test.sh",
    ] {
        if std::fs::read(p).is_ok() || std::fs::read_dir(p).is_ok() {
            println!("escaped: {p}");
            escapes += 1;
        }
    }
    println!("escapes: {escapes}");
    std::fs::write("/app/hello.txt", "Hello, world!\n").expect("write /app/hello.txt");
    std::fs::write("/logs/agent/notes.txt", "done\n").expect("write /logs/agent");
}

extern "C" {
    // wasi-libc's symlink(2), which std links anyway.
    fn symlink(target: *const std::ffi::c_char, path: *const std::ffi::c_char) -> i32;
}

/// Every way out a component agent has; prints `BREACH <what>` for any that works.
fn hostile() {
    let host_paths = std::env::var("HOST_PATHS").unwrap_or_default();
    let mut tries: Vec<String> = host_paths
        .split(':')
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect();
    for p in &host_paths.split(':').collect::<Vec<_>>() {
        tries.push(format!("/app/../../../../../../..{p}"));
        tries.push(format!("/agent/../../../../../../..{p}"));
    }
    for p in &tries {
        if std::fs::read(p).is_ok() || std::fs::read_dir(p).is_ok() {
            println!("BREACH read {p}");
        }
        if std::fs::write(format!("{p}.pwned"), "x").is_ok() {
            println!("BREACH wrote {p}.pwned");
        }
    }
    for p in ["/x", "/agent/x", "/logs/verifier/reward.txt", "/tmp/x"] {
        if std::fs::write(p, "1").is_ok() {
            println!("BREACH wrote {p}");
        }
    }
    if let Ok(port) = std::env::var("PORT") {
        if std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_ok() {
            println!("BREACH connected to 127.0.0.1:{port}");
        }
    }
    // A link the host might write through after the run (its log file).
    let target = std::ffi::CString::new("../../../../../../../../../../etc/hostname").unwrap();
    let link = std::ffi::CString::new("/logs/agent/agent.txt").unwrap();
    let planted = unsafe { symlink(target.as_ptr(), link.as_ptr()) } == 0;
    println!("planted agent.txt link: {planted}");
    std::fs::write("/app/probed", "yes").expect("write /app/probed");
    println!("hostile probe done");
}
