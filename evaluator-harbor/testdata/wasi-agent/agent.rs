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
    let mut escapes = 0;
    for p in ["/tests/test.sh", "/solution/solve.sh", "/etc/passwd", "/logs/verifier", "/", "../tests/test.sh"] {
        if std::fs::read(p).is_ok() || std::fs::read_dir(p).is_ok() {
            println!("escaped: {p}");
            escapes += 1;
        }
    }
    println!("escapes: {escapes}");
    std::fs::write("/app/hello.txt", "Hello, world!\n").expect("write /app/hello.txt");
    std::fs::write("/logs/agent/notes.txt", "done\n").expect("write /logs/agent");
}
