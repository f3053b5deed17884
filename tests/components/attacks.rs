//! Attack code shared by the hostile test components (included with `#[path]`).
//!
//! Every probe returns a line describing exactly what happened: `denied: <error>` when
//! the sandbox refused, or a line starting with `BREACH` when the attempt succeeded
//! where the contract says it must not. The components turn a report without any
//! `BREACH` into an `Err` and a report with one into an `Ok`, so a test that expects a
//! denial fails loudly (with the leaked detail) if the sandbox ever lets it through.

#![allow(dead_code)]

use std::io::{Read, Write};

/// Marker of a successful escape.
pub const BREACH: &str = "BREACH";

/// Lines of a probe report.
#[derive(Default)]
pub struct Report {
    pub lines: Vec<String>,
    pub breached: bool,
}

impl Report {
    pub fn denied(&mut self, what: &str, err: impl std::fmt::Display) {
        self.lines.push(format!("{what}: denied: {err}"));
    }

    pub fn breach(&mut self, what: &str, detail: impl std::fmt::Display) {
        self.breached = true;
        self.lines.push(format!("{BREACH} {what}: {detail}"));
    }

    pub fn note(&mut self, line: impl Into<String>) {
        self.lines.push(line.into());
    }

    /// `Err` listing every denial when nothing got through, `Ok` with the report
    /// otherwise.
    pub fn into_result(self) -> Result<Vec<String>, String> {
        if self.breached {
            Ok(self.lines)
        } else {
            Err(self.lines.join("\n"))
        }
    }
}

/// Read a whole file: `Ok("<n> bytes: <text>")` (text truncated) or the error.
pub fn read(path: &str) -> Result<String, String> {
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let n = f
        .read_to_end(&mut buf)
        .map_err(|e| format!("opened but read failed: {e}"))?;
    let text = String::from_utf8_lossy(&buf[..n.min(200)]).into_owned();
    Ok(format!("{n} bytes: {text:?}"))
}

/// A read that must be refused; the content is reported if it was not.
pub fn try_read(r: &mut Report, path: &str) {
    let what = format!("read {path}");
    match read(path) {
        Ok(leak) => r.breach(&what, leak),
        Err(e) => r.denied(&what, e),
    }
}

/// Every way std offers to change something at `path` (which must not be writable).
pub fn try_write_all(r: &mut Report, path: &str) {
    let what = format!("create {path}");
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(mut f) => {
            let w = f.write_all(b"hostile");
            r.breach(&what, format!("created (write: {w:?})"));
        }
        Err(e) => r.denied(&what, e),
    }
}

/// Try to modify an existing file at `path`: append, truncate, overwrite, remove,
/// rename, chmod-like (set_len).
pub fn try_modify(r: &mut Report, path: &str) {
    let what = format!("append {path}");
    match std::fs::OpenOptions::new().append(true).open(path) {
        Ok(mut f) => match f.write_all(b"hostile") {
            Ok(()) => r.breach(&what, "appended"),
            Err(e) => r.denied(&what, format!("opened but write failed: {e}")),
        },
        Err(e) => r.denied(&what, e),
    }
    let what = format!("truncate {path}");
    match std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
    {
        Ok(_) => r.breach(&what, "truncated"),
        Err(e) => r.denied(&what, e),
    }
    let what = format!("write {path}");
    match std::fs::write(path, b"hostile overwrite") {
        Ok(()) => r.breach(&what, "overwritten"),
        Err(e) => r.denied(&what, e),
    }
    let what = format!("rename {path}");
    match std::fs::rename(path, format!("{path}.moved")) {
        Ok(()) => r.breach(&what, "renamed"),
        Err(e) => r.denied(&what, e),
    }
    let what = format!("remove {path}");
    match std::fs::remove_file(path) {
        Ok(()) => r.breach(&what, "removed"),
        Err(e) => r.denied(&what, e),
    }
}

/// Try to hard-link or move `from` (in a directory the caller may not change) to `to`
/// (in a writable one), then write through the link: either would let a guest change
/// or carry away a file it was only allowed to read.
pub fn try_link_across(r: &mut Report, from: &str, to: &str) {
    let what = format!("hard link {from} -> {to}");
    match std::fs::hard_link(from, to) {
        Ok(()) => {
            let w = std::fs::OpenOptions::new()
                .append(true)
                .open(to)
                .and_then(|mut f| f.write_all(b"hostile"));
            r.breach(&what, format!("linked (append through it: {w:?})"));
        }
        Err(e) => r.denied(&what, e),
    }
    let moved = format!("{to}.moved");
    let what = format!("rename {from} -> {moved}");
    match std::fs::rename(from, &moved) {
        Ok(()) => r.breach(&what, "moved"),
        Err(e) => r.denied(&what, e),
    }
}

/// Try to create a directory.
pub fn try_mkdir(r: &mut Report, path: &str) {
    let what = format!("mkdir {path}");
    match std::fs::create_dir(path) {
        Ok(()) => r.breach(&what, "created"),
        Err(e) => r.denied(&what, e),
    }
}

/// Create a symlink `link` -> `target` through wasi-libc; `Ok(())` or the OS error.
pub fn make_symlink(target: &str, link: &str) -> Result<(), std::io::Error> {
    let t = std::ffi::CString::new(target).map_err(std::io::Error::other)?;
    let l = std::ffi::CString::new(link).map_err(std::io::Error::other)?;
    // SAFETY: both pointers are valid NUL-terminated strings for the call's duration.
    let rc = unsafe { libc::symlink(t.as_ptr(), l.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// List a directory's names, or the error.
pub fn list(path: &str) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .map_err(|e| e.to_string())?
        .map(|e| {
            e.map(|e| e.file_name().to_string_lossy().into_owned())
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    names.sort();
    Ok(names)
}

/// Never returns: a tight loop the optimizer cannot remove.
pub fn spin() -> ! {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

/// Allocate (and touch) 8 MiB chunks until the allocator gives up (abort -> trap).
pub fn memory_bomb() -> usize {
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; 8 << 20];
        chunk[0] = 1;
        chunk[(8 << 20) - 1] = 1;
        held.push(std::hint::black_box(chunk));
        if held.len() == usize::MAX {
            return held.len();
        }
    }
}

/// Unbounded recursion on wasm's own call stack (nothing address-taken, so nothing
/// lives on the shadow stack in linear memory).
pub fn recurse(n: u64) -> u64 {
    if std::hint::black_box(n) == u64::MAX {
        return 0;
    }
    std::hint::black_box(recurse(std::hint::black_box(n + 1))).wrapping_add(1)
}

/// Unbounded recursion with an address-taken local in every frame: Rust keeps those on
/// the shadow stack in linear memory, which overflows (below address 0, as rustc puts
/// the stack first) before wasm's call stack does.
pub fn recurse_shadow(n: u64) -> u64 {
    if std::hint::black_box(n) == u64::MAX {
        return 0;
    }
    let pad = std::hint::black_box([n; 64]);
    std::hint::black_box(recurse_shadow(n + 1)).wrapping_add(pad[n as usize % 64])
}

/// Print exactly `lines` lines of 1024 bytes (1023 `x` and a newline) to stdout.
pub fn flood_stdout(lines: usize) -> Result<(), String> {
    let line = "x".repeat(1023);
    let mut out = std::io::stdout().lock();
    for i in 0..lines {
        writeln!(out, "{line}").map_err(|e| format!("stdout write {i} failed: {e}"))?;
    }
    out.flush().map_err(|e| format!("stdout flush failed: {e}"))
}

/// Network probes: TCP connect to `127.0.0.1:port`, TCP listen, UDP send, DNS.
pub fn sockets(r: &mut Report, port: u16) {
    use std::net::{TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
    let addr = format!("127.0.0.1:{port}");
    match TcpStream::connect(&addr) {
        Ok(_) => r.breach(&format!("tcp connect {addr}"), "connected"),
        Err(e) => r.denied(&format!("tcp connect {addr}"), e),
    }
    match TcpListener::bind("127.0.0.1:0") {
        Ok(l) => r.breach(
            "tcp listen 127.0.0.1:0",
            format!("bound {:?}", l.local_addr()),
        ),
        Err(e) => r.denied("tcp listen 127.0.0.1:0", e),
    }
    match UdpSocket::bind("0.0.0.0:0") {
        Ok(s) => match s.send_to(b"hostile", &addr) {
            Ok(n) => r.breach(&format!("udp send {addr}"), format!("sent {n} bytes")),
            Err(e) => r.denied(
                &format!("udp send {addr}"),
                format!("bound but send failed: {e}"),
            ),
        },
        Err(e) => r.denied("udp bind 0.0.0.0:0", e),
    }
    for host in ["localhost:80", "example.com:80"] {
        match host.to_socket_addrs() {
            Ok(addrs) => r.breach(
                &format!("dns {host}"),
                format!("{:?}", addrs.collect::<Vec<_>>()),
            ),
            Err(e) => r.denied(&format!("dns {host}"), e),
        }
    }
}

/// Environment, arguments and working directory as the guest sees them.
pub fn environment() -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    let vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
    let cwd = match std::env::current_dir() {
        Ok(p) => p.display().to_string(),
        Err(e) => format!("error: {e}"),
    };
    let mut stdin = String::new();
    let read = std::io::stdin()
        .read_to_string(&mut stdin)
        .map(|n| (n, stdin))
        .map_err(|e| e.to_string());
    vec![
        format!("args={args:?}"),
        format!("vars={vars:?}"),
        format!("cwd={cwd}"),
        format!("stdin={read:?}"),
    ]
}

/// Write `total` bytes into `path` in 1 MiB chunks; `Ok(bytes written)` or the error
/// with how far it got. A disk quota must stop the caller long before `total` when
/// `total` is far over it.
pub fn fill_file(path: &str, total: u64) -> Result<u64, String> {
    let chunk = vec![0x5au8; 1 << 20];
    let mut f = std::fs::File::create(path).map_err(|e| format!("create {path}: {e}"))?;
    let mut written = 0u64;
    while written < total {
        f.write_all(&chunk)
            .map_err(|e| format!("write {path} at {written}: {e}"))?;
        written += chunk.len() as u64;
    }
    Ok(written)
}

/// Create `n` empty files `<dir>/f<i>`; `Ok(n)` or the error with how far it got.
pub fn many_files(dir: &str, n: u64) -> Result<u64, String> {
    for i in 0..n {
        std::fs::write(format!("{dir}/f{i}"), b"").map_err(|e| format!("file {i}: {e}"))?;
    }
    Ok(n)
}

/// A sparse file of `len` bytes: almost no blocks, a huge apparent size.
pub fn sparse_file(path: &str, len: u64) -> Result<(), String> {
    let f = std::fs::File::create(path).map_err(|e| format!("create {path}: {e}"))?;
    f.set_len(len).map_err(|e| format!("set_len {path}: {e}"))
}

/// Read a byte at 2 GiB: past the end of any memory the sandbox allows, and far from
/// where an overflowing shadow stack lands (just under 4 GiB). An out-of-bounds trap.
pub fn wild_read() -> u8 {
    let addr = std::hint::black_box(0x8000_0000usize) as *const u8;
    // SAFETY: none; the read is meant to trap (wasm bounds-checks it, nothing else).
    unsafe { std::ptr::read_volatile(addr) }
}
