//! `evolve view` against a workspace produced by a real run (`evolve demo`): its JSON agrees
//! with `evolve log`, `status` and `verify`; it answers GET only, on 127.0.0.1 only, writes
//! nothing and takes no lock, also over a run in progress; and in real headless Chromium
//! (Debian's `chromium`, driven over the DevTools protocol) the page loads, the lineage
//! tree has one node per generation, and a real click on a node shows its diff.
//!
//! The browser test skips with a message when `chromium` is missing, except under `CI`,
//! where `host/tests/viewer-setup.sh` installs it and the test must run. With
//! `EVOLVE_VIEWER_SCREENSHOT=<path>` it saves a screenshot of the page there
//! (`docs/viewer.png` is made that way).

use crate::{cmd, ws};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};
use ws::text;

// ------------------------------------------------------------------ the workspace

/// A demo workspace from a real run, made once per test process.
struct Fixture {
    dir: PathBuf,
    ws: PathBuf,
    keys: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        remove_stale_fixtures(base);
        let dir = base.join(format!("viewer-fixture-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = Fixture {
            ws: dir.join("demo-ws"),
            keys: dir.join("keys"),
            dir,
        };
        let out = evolve(&f, &["demo", "demo-ws", "--json"]).run();
        assert!(out.status.success(), "evolve demo failed:\n{}", text(&out));
        f
    })
}

/// Fixtures of earlier test processes that are gone (a static is never dropped).
fn remove_stale_fixtures(base: &Path) {
    for e in std::fs::read_dir(base).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix("viewer-fixture-")
            && !Path::new("/proc").join(pid).exists()
        {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn evolve(f: &Fixture, args: &[&str]) -> cmd::Evolve {
    cmd::evolve(args).keys(&f.keys).cwd(&f.dir)
}

fn cli_json(f: &Fixture, args: &[&str]) -> Value {
    evolve(f, args).run().json()
}

// ------------------------------------------------------------------ the server

/// A running `evolve view`, stopped when dropped.
struct Served {
    child: Child,
    port: u16,
    url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(f: &Fixture, ws: &Path) -> Served {
    serve_with(evolve(f, &["view", ws.to_str().unwrap(), "--json"]).command())
}

/// Start `evolve view … --json` as `cmd` says and read its address.
fn serve_with(mut cmd: Command) -> Served {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("evolve view --json printed {line:?}: {e}"));
    let port = v["port"].as_u64().unwrap() as u16;
    let url = v["url"].as_str().unwrap().to_string();
    assert_eq!(url, format!("http://127.0.0.1:{port}/"));
    Served { child, port, url }
}

struct Reply {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One HTTP/1.1 request over a plain socket, so any method and `Host` can be sent.
fn request(port: u16, method: &str, path: &str, host: &str) -> Reply {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body: String::from_utf8(body).unwrap(),
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 4 + n..];
    }
}

fn get(s: &Served, path: &str) -> Reply {
    request(s.port, "GET", path, &format!("127.0.0.1:{}", s.port))
}

fn get_ok(s: &Served, path: &str) -> Value {
    let r = get(s, path);
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.json()
}

// ------------------------------------------------------------------ JSON endpoints

#[test]
fn the_endpoints_agree_with_log_status_and_verify() {
    let f = fixture();
    let served = serve(f, &f.ws);
    let status = get_ok(&served, "/api/status");
    let cli_status = cli_json(f, &["status", "demo-ws", "--json"]);
    for key in [
        "experiment",
        "by_status",
        "spent_usd",
        "budget_usd",
        "generations",
    ] {
        assert_eq!(status[key], cli_status[key], "{key}: {status}");
    }
    assert_eq!(status["champion"]["genid"], cli_status["champion"]["genid"]);
    assert_eq!(status["champion"]["score"], cli_status["champion"]["score"]);
    assert_eq!(status["recipe"]["name"], "local-demo");
    assert!(status["champion"]["sealed_anchor"].is_number(), "{status}");
    assert!(status["genesis"]["sealed_anchor"].is_number(), "{status}");
    let verify = cli_json(f, &["verify", "demo-ws", "--json"]);
    assert_eq!(verify["ok"], true);
    assert_eq!(status["integrity"]["verdict"], "ok");
    assert_eq!(status["integrity"]["lines"], verify["lines"]);
    assert_eq!(status["integrity"]["certified"], verify["certified"]);

    let gens = get_ok(&served, "/api/generations");
    let log = cli_json(f, &["log", "demo-ws", "--json"]);
    let (gens, log) = (gens.as_array().unwrap(), log.as_array().unwrap());
    assert_eq!(gens.len(), log.len());
    assert!(gens.len() >= 9, "gen 0 and eight generations: {gens:?}");
    for (g, l) in gens.iter().zip(log) {
        for key in [
            "genid",
            "parent",
            "status",
            "score",
            "verdict",
            "eligible",
            "champion",
            "changed_paths",
        ] {
            assert_eq!(g[key], l[key], "{key} of gen {}", l["genid"]);
        }
        let expected = match (l["status"].as_str(), l["verdict"].as_str()) {
            (Some("benchmark_complete"), Some("keep")) => "kept",
            (Some("benchmark_complete"), Some("discard")) => "discarded",
            _ => g["class"].as_str().unwrap(),
        };
        assert_eq!(g["class"], expected, "{g}");
    }
}

#[test]
fn a_generation_shows_operators_trials_logs_and_its_diff() {
    let f = fixture();
    let served = serve(f, &f.ws);
    let status = get_ok(&served, "/api/status");
    let champion = status["champion"]["genid"].as_str().unwrap().to_string();
    assert_ne!(champion, "0", "the demo improves on its seed: {status}");
    let g = get_ok(&served, &format!("/api/generations/{champion}"));
    assert_eq!(g["champion"], true);
    assert_eq!(g["class"], "kept");

    // The mutate binding: the recipe's operator, gen/0's frozen digest, and the digest the
    // call recorded in its run directory.
    let mutate = g["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["stage"] == "mutate")
        .unwrap_or_else(|| panic!("no mutate binding: {g}"));
    assert_eq!(mutate["operator"], "perturb");
    assert_eq!(mutate["called"], true);
    let result: Value = serde_json::from_slice(
        &std::fs::read(f.ws.join(format!("runs/gen-{champion}/mutate/result.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(mutate["component_sha256"], result["component_sha256"]);
    let manifest = read_committed(&f.ws, "gen/0", "operators/manifest.json");
    let manifest: Value = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(
        mutate["frozen_sha256"],
        manifest["components"]["mutate"]["sha256"]
    );
    assert!(mutate["logs"]["stdout"].is_object() || mutate["logs"]["stderr"].is_object());

    // The trial table has one row per trial of the certified evaluation.
    let eval = &g["evaluation"];
    assert_eq!(eval["outcome"], "benchmark_complete");
    let events = g["events"].as_array().unwrap();
    let stamped = events
        .iter()
        .rev()
        .find(|e| e["type"] == "evaluation" && e["body"]["purpose"] == "candidate")
        .unwrap();
    assert_eq!(
        eval["trials"].as_array().unwrap().len() as u64,
        stamped["body"]["trials"].as_u64().unwrap()
    );
    assert!(!g["anchors"].as_array().unwrap().is_empty(), "final anchor");

    // Its diff against its parent: the changed parameter file, with the child's lines added.
    let diff = get_ok(&served, &format!("/api/generations/{champion}/diff"));
    assert_eq!(diff["available"], true);
    assert_eq!(diff["from"], g["parent"]);
    let paths: Vec<&str> = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["target/params.json"]);
    let child = String::from_utf8(read_committed(
        &f.ws,
        &format!("gen/{champion}"),
        "target/params.json",
    ))
    .unwrap();
    let text = diff["text"].as_str().unwrap();
    assert!(
        text.starts_with("diff --git a/target/params.json"),
        "{text}"
    );
    for added in text
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
    {
        assert!(
            child.lines().any(|l| l == &added[1..]),
            "{added:?} not in {child}"
        );
    }

    // The cumulative diff of the champion against gen/0.
    let cumulative = get_ok(&served, "/api/champion/diff");
    assert_eq!(cumulative["from"], "0");
    assert_eq!(cumulative["to"], champion.as_str());
    assert!(
        cumulative["text"]
            .as_str()
            .unwrap()
            .contains("target/params.json")
    );
    // gen 0 has no parent to diff against: said, not an error.
    let seed = get_ok(&served, "/api/generations/0/diff");
    assert_eq!(seed["available"], false);
    assert!(seed["why"].as_str().unwrap().contains("no parent"));
}

/// The content of `path` in the commit `tag` names, read with libgit2.
fn read_committed(ws: &Path, tag: &str, path: &str) -> Vec<u8> {
    let store = evolve_snapshot::Store::open(ws).unwrap();
    let commit = store.tag_target(tag).unwrap().unwrap();
    store.read_blob(commit, path, 1 << 20).unwrap().unwrap()
}

#[test]
fn unknown_ids_and_paths_are_404_with_a_message() {
    let f = fixture();
    let served = serve(f, &f.ws);
    for path in [
        "/api/generations/nope",
        "/api/generations/nope/diff",
        "/api/generations/..%2F..%2F.evolve%2Farchive.jsonl",
        "/api/generations/0%2F..%2F..",
        "/.evolve/archive.jsonl",
        "/runs/gen-1/mutate/result.json",
        "/api/nothing",
    ] {
        let r = get(&served, path);
        assert_eq!(r.status, 404, "GET {path}: {}", r.body);
        let message = r.json()["error"].as_str().unwrap().to_string();
        assert!(!message.is_empty(), "GET {path}");
    }
    let r = get(&served, "/api/generations/nope");
    assert!(r.json()["error"].as_str().unwrap().contains("`nope`"));
}

#[test]
fn only_get_is_answered_and_only_on_127_0_0_1() {
    let f = fixture();
    let served = serve(f, &f.ws);
    for method in ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"] {
        for path in ["/", "/api/status", "/api/generations/1"] {
            let r = request(
                served.port,
                method,
                path,
                &format!("127.0.0.1:{}", served.port),
            );
            assert_eq!(r.status, 405, "{method} {path}");
            assert_eq!(r.headers.get("allow").map(String::as_str), Some("GET"));
        }
    }
    // A page elsewhere whose name resolves to 127.0.0.1 is refused.
    let r = request(served.port, "GET", "/api/status", "attacker.example");
    assert_eq!(r.status, 421, "{}", r.body);
    let r = request(
        served.port,
        "GET",
        "/api/status",
        &format!("localhost:{}", served.port),
    );
    assert_eq!(r.status, 200);
    // The page and its assets, with their types.
    for (path, kind) in [
        ("/", "text/html"),
        ("/viewer.js", "text/javascript"),
        ("/viewer.css", "text/css"),
    ] {
        let r = get(&served, path);
        assert_eq!(r.status, 200, "{path}");
        assert!(r.headers["content-type"].starts_with(kind), "{path}");
    }
    // The listening socket is bound to 127.0.0.1 (the kernel's own table says so).
    let sockets = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_hex = format!("{:04X}", served.port);
    let listening: Vec<&str> = sockets
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.get(3) == Some(&"0A") && cols[1].ends_with(&format!(":{port_hex}")))
                .then_some(cols[1])
        })
        .collect();
    assert_eq!(listening, [format!("0100007F:{port_hex}")]);
    assert!(served.url.starts_with("http://127.0.0.1:"));
}

/// A socket opened and left silent, and one that sends half a request head, are closed by
/// the server once `HEADER_READ_TIMEOUT` has passed (not held open), and a request sent at
/// once is still answered.
#[test]
fn a_connection_without_a_whole_head_is_closed_after_the_header_timeout() {
    let f = fixture();
    let served = serve(f, &f.ws);
    let timeout = evolve::viewer::HEADER_READ_TIMEOUT;
    let started = Instant::now();
    let silent = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    let mut partial = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    write!(
        partial,
        "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n",
        served.port
    )
    .unwrap();
    for (what, mut socket) in [("silent", silent), ("half a head", partial)] {
        socket.set_read_timeout(Some(timeout * 3)).unwrap();
        let mut answer = Vec::new();
        let read = socket.read_to_end(&mut answer);
        let waited = started.elapsed();
        let still_open = matches!(&read, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
        assert!(!still_open, "{what}: still open after {waited:?}");
        assert!(
            waited >= timeout.saturating_sub(Duration::from_secs(1)) && waited < timeout * 2,
            "{what}: closed after {waited:?}, the timeout is {timeout:?}"
        );
        assert!(
            !String::from_utf8_lossy(&answer).contains("200 OK"),
            "{what}: answered"
        );
    }
    assert_eq!(get(&served, "/api/status").status, 200);
}

// ------------------------------------------------------------------ read-only, live

/// Every file under `dir` with its size and modification time.
fn listing(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.path().symlink_metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.insert(e.path(), (m.len(), m.modified().unwrap()));
        }
    }
    out
}

#[test]
fn a_run_in_progress_is_read_without_a_lock_and_nothing_is_written() {
    let f = fixture();
    // A copy of the workspace as a live run leaves it: a child being built, and the next
    // archive line half written.
    let live = f.dir.join(format!("live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&live);
    let cp = Command::new("cp")
        .args(["-a", f.ws.to_str().unwrap(), live.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(cp.status.success(), "{}", text(&cp));
    std::fs::create_dir_all(live.join("runs/worktrees/gen-9/target")).unwrap();
    let archive = live.join(".evolve/archive.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&archive)
        .unwrap();
    file.write_all(br#"{"at":"2030-01-01T00:00:00Z","body":{"parent":"#)
        .unwrap();
    drop(file);

    let before = listing(&live);
    let served = serve(f, &live);
    let status = get_ok(&served, "/api/status");
    assert_eq!(status["in_progress"], json!(["9"]));
    let complete = get_ok(&serve(f, &f.ws), "/api/status");
    assert_eq!(
        status["rows"], complete["rows"],
        "the torn line is not a row"
    );
    let kinds: Vec<&str> = status["integrity"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["torn_tail"],
        "as `evolve verify` reports it: {status}"
    );
    let gens = get_ok(&served, "/api/generations");
    for g in gens.as_array().unwrap() {
        let id = g["genid"].as_str().unwrap();
        get_ok(&served, &format!("/api/generations/{id}"));
        get_ok(&served, &format!("/api/generations/{id}/diff"));
    }
    get_ok(&served, "/api/champion/diff");
    assert_eq!(listing(&live), before, "the viewer wrote to the workspace");
    // No lock is held while it serves: a run could take it now.
    let lock = evolve_archive::RunLock::acquire(&live);
    assert!(lock.is_ok(), "{:?}", lock.err());
    drop(served);
    let _ = std::fs::remove_dir_all(&live);
}

// ------------------------------------------------------------------ headless Chromium

/// A minimal Chrome DevTools protocol client (one websocket, flat sessions).
struct Cdp {
    ws: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next: u64,
    session: Option<String>,
}

impl Cdp {
    fn connect(url: &str) -> Cdp {
        let (mut ws, _) = tungstenite::connect(url).unwrap();
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_mut() {
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        }
        Cdp {
            ws,
            next: 0,
            session: None,
        }
    }

    /// Send one command and wait for its answer (events in between are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let mut msg = json!({"id": self.next, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .unwrap();
        loop {
            let m = self.ws.read().unwrap();
            let Ok(text) = m.to_text() else { continue };
            let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
            if v["id"] == json!(self.next) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Evaluate a JavaScript expression in the page; its value (awaited if a promise).
    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// Poll `expr` until it is true.
    fn wait_until(&mut self, what: &str, expr: &str) {
        let start = Instant::now();
        while self.eval(expr) != json!(true) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "timed out waiting for {what} ({expr})"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A real mouse click (pressed and released) at the centre of the element `selector`.
    fn click(&mut self, selector: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        let at = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); e.scrollIntoView({{block: 'center', inline: 'center'}}); const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }})()"
        ));
        let (x, y) = (at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }
}

/// Debian's Chromium, if installed.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
}

/// Chromium, or `None` (the test then skips) outside CI when it is not installed.
fn chromium_or_skip() -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is required in CI: host/tests/viewer-setup.sh installs it"
        );
        eprintln!(
            "skipping the browser test: no `chromium` on PATH (run host/tests/viewer-setup.sh)"
        );
    }
    found
}

/// A headless Chromium with a DevTools port; killed when dropped.
struct Browser {
    child: Child,
    ws_url: String,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn launch(binary: &Path) -> Browser {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(binary)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--remote-debugging-port=0",
            "--window-size=1440,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in stderr.lines().map_while(Result::ok) {
            if !sent && let Some(url) = line.strip_prefix("DevTools listening on ") {
                let _ = tx.send(url.trim().to_string());
                sent = true;
            }
        }
    });
    let ws_url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("chromium printed no DevTools address");
    Browser {
        child,
        ws_url,
        _profile: profile,
    }
}

/// A page of `browser` at 1440×1000, navigated to `url`.
fn open_page(browser: &Browser, url: &str) -> Cdp {
    let mut cdp = Cdp::connect(&browser.ws_url);
    let target = cdp.call("Target.createTarget", json!({"url": "about:blank"}));
    let session = cdp.call(
        "Target.attachToTarget",
        json!({"targetId": target["targetId"], "flatten": true}),
    );
    cdp.session = Some(session["sessionId"].as_str().unwrap().to_string());
    cdp.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1440, "height": 1000, "deviceScaleFactor": 1, "mobile": false}),
    );
    cdp.call("Page.enable", json!({}));
    cdp.call("Page.navigate", json!({"url": url}));
    cdp
}

#[test]
fn in_chromium_the_tree_has_a_node_per_generation_and_a_click_shows_the_diff() {
    let Some(binary) = chromium_or_skip() else {
        return;
    };
    let f = fixture();
    let served = serve(f, &f.ws);
    let log = cli_json(f, &["log", "demo-ws", "--json"]);
    let log = log.as_array().unwrap();
    let browser = launch(&binary);
    let mut cdp = open_page(&browser, &served.url);

    // The page loads: the status bar and one tree node per generation.
    cdp.wait_until(
        "the lineage tree",
        &format!(
            "document.querySelectorAll('#tree .node').length === {}",
            log.len()
        ),
    );
    let ids = cdp.eval("[...document.querySelectorAll('#tree .node')].map(n => n.dataset.genid)");
    let mut ids: Vec<&str> = ids
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = log.iter().map(|r| r["genid"].as_str().unwrap()).collect();
    ids.sort();
    expected.sort();
    assert_eq!(ids, expected);
    let champion = log.iter().find(|r| r["champion"] == true).unwrap()["genid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        cdp.eval(
            "[...document.querySelectorAll('#tree .node.champion')].map(n => n.dataset.genid)"
        ),
        json!([champion])
    );
    let kept = log
        .iter()
        .filter(|r| r["status"] == "benchmark_complete" && r["verdict"] == "keep")
        .count();
    assert_eq!(
        cdp.eval("document.querySelectorAll('#tree .node.kept').length"),
        json!(kept)
    );
    let status_bar = cdp.eval("document.getElementById('status').textContent");
    assert!(
        status_bar.as_str().unwrap().contains("local-demo"),
        "{status_bar}"
    );
    // The demo ran all eight: said as `evolve status` says it, never "8 of 8".
    assert!(
        status_bar
            .as_str()
            .unwrap()
            .contains("8 · the recipe's limit (8) is reached"),
        "{status_bar}"
    );
    assert_eq!(
        cdp.eval("document.getElementById('integrity').textContent.startsWith('verify ok')"),
        json!(true)
    );
    cdp.wait_until(
        "the score chart",
        "document.querySelectorAll('#chart .point').length > 0 && document.querySelectorAll('#chart .anchor').length >= 2",
    );

    // The page opens on the champion; a real click on another node shows that one's diff
    // against its parent.
    cdp.wait_until(
        "the champion's detail",
        &format!("document.getElementById('diff').dataset.genid === '{champion}'"),
    );
    let other = log
        .iter()
        .rev()
        .map(|r| r["genid"].as_str().unwrap())
        .find(|g| *g != "0" && *g != champion)
        .unwrap()
        .to_string();
    cdp.click(&format!("#tree .node[data-genid=\"{other}\"]"));
    cdp.wait_until(
        "the diff panel",
        &format!(
            "document.getElementById('diff').dataset.state === 'loaded' && document.getElementById('diff').dataset.genid === '{other}'"
        ),
    );
    let shown = cdp.eval("document.getElementById('diff').textContent");
    let api = get_ok(&served, &format!("/api/generations/{other}/diff"));
    assert_eq!(api["available"], true);
    let want: String = api["text"].as_str().unwrap().split('\n').collect();
    assert_eq!(shown.as_str().unwrap(), want);
    assert!(want.contains("target/params.json"));
    let title = cdp.eval("document.getElementById('detail-title').textContent");
    assert!(
        title
            .as_str()
            .unwrap()
            .starts_with(&format!("Generation {other}")),
        "{title}"
    );
    assert_eq!(
        cdp.eval(
            "[...document.querySelectorAll('#tree .node.selected')].map(n => n.dataset.genid)"
        ),
        json!([other])
    );

    // Back to the champion for the screenshot.
    cdp.click(&format!("#tree .node[data-genid=\"{champion}\"]"));
    cdp.wait_until(
        "the champion's diff",
        &format!(
            "document.getElementById('diff').dataset.state === 'loaded' && document.getElementById('diff').dataset.genid === '{champion}'"
        ),
    );
    if let Some(path) = std::env::var_os("EVOLVE_VIEWER_SCREENSHOT") {
        let shot = cdp.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64_decode(shot["data"].as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG"));
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot saved to {}", PathBuf::from(path).display());
    }

    // 600 generations drawn by the page's own code: one node each, labels dropped.
    let big = cdp.eval(
        "(() => { const gens = []; for (let i = 0; i < 600; i++) gens.push({genid: String(i), generation: i, parent: i === 0 ? null : String(i % 7 === 0 || i < 7 ? Math.max(0, i - 7) : i - 1), status: 'benchmark_complete', class: i % 3 ? 'discarded' : 'kept', score: i / 600, verdict: 'keep', eligible: i % 3 === 0, champion: i === 597, sealed_anchor: null}); state.gens = gens; state.byId = new Map(gens.map(g => [g.genid, g])); renderTree(); renderChart(); return [document.querySelectorAll('#tree .node').length, document.querySelectorAll('#tree .label').length, document.querySelectorAll('#chart .point').length]; })()",
    );
    assert_eq!(big, json!([600, 0, 600]));
}

// ------------------------------------------------------------------ hostile text

/// The bidi override: it shows `fdp.exe` as `exe.pdf` and, left open, reverses whatever
/// follows it up to the end of its line.
const RLO: char = '\u{202E}';

/// How the page must show it: a visible escape.
const RLO_SHOWN: &str = "\\u{202E}";

/// A gate that keeps every child, with a reason and a stderr line holding an override.
const HOSTILE_GATE: &str = "fn decide(ctx, child, parent) {\n  print(\"gate stderr \\u202Eevil\");\n  #{verdict: \"keep\", reason: \"kept \\u202Esdrawkcab\"}\n}\n";

/// A run whose generation 1 carries text chosen to reorder the page: a changed file named
/// `target/hostile/\u{202E}fdp.exe` (holding one more override), task names ending in `\u{202E}fdp.exe`, a gate reason and
/// gate stderr with an override, and a record note whose open override would reverse the
/// annotation fields after it (and the archive event's).
fn hostile_run() -> ws::Exp {
    let e = ws::Exp::new(&ws::Spec {
        mutate: json!({"action": "write", "path": format!("hostile/{RLO}fdp.exe"), "content": format!("x {RLO}abc, after\n")}),
        gate: (
            "script".into(),
            json!({"source": "operators/gate/hostile.rhai"}),
        ),
        surface: vec!["target/**".into()],
        generations: 1,
        ..ws::Spec::default()
    });
    let root = e.root().to_path_buf();
    for task in std::fs::read_dir(root.join("tasks")).unwrap().flatten() {
        let name = task.file_name().into_string().unwrap();
        std::fs::rename(
            task.path(),
            root.join("tasks").join(format!("{name}-{RLO}fdp.exe")),
        )
        .unwrap();
    }
    let script = root.join("operators/gate/hostile.rhai");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::write(script, HOSTILE_GATE).unwrap();
    let recipe = std::fs::read_to_string(root.join("recipe.yaml")).unwrap();
    let note = json!({"note": format!("note {RLO}abc")});
    let recipe = recipe.replace(
        "  record: {operator: notes}",
        &format!("  record: {{operator: notes, config: {note}}}"),
    );
    assert!(recipe.contains("abc"), "{recipe}");
    std::fs::write(root.join("recipe.yaml"), recipe).unwrap();
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    e
}

/// A page function: the first element matching `selector` whose text holds `needle`, with
/// its `innerText` and, for each character of `needle` there, the left and top of its box.
const LAYOUT_JS: &str = r#"((selector, needle) => {
  const el = [...document.querySelectorAll(selector)].find((e) => e.textContent.includes(needle));
  if (!el) return null;
  const nodes = [];
  let text = "";
  const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) { nodes.push([n, text.length]); text += n.data; }
  const at = text.indexOf(needle);
  const boxes = [];
  for (let i = at; i < at + needle.length; i++) {
    const [node, start] = nodes.filter(([, s]) => s <= i).pop();
    const r = document.createRange();
    r.setStart(node, i - start);
    r.setEnd(node, i - start + 1);
    const b = r.getBoundingClientRect();
    boxes.push([b.left, b.top]);
  }
  return { innerText: el.innerText, boxes };
})"#;

/// The boxes of `needle`'s characters in the first `selector` element holding it, and
/// that element's `innerText`; fails when no such element exists.
fn layout_of(cdp: &mut Cdp, what: &str, selector: &str, needle: &str) -> (String, Vec<(f64, f64)>) {
    let args = format!("{}, {}", json!(selector), json!(needle));
    let found = cdp.eval(&format!("{LAYOUT_JS}({args})"));
    assert!(found.is_object(), "{what}: no {selector} holds {needle:?}");
    let boxes = found["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b[0].as_f64().unwrap(), b[1].as_f64().unwrap()))
        .collect();
    (found["innerText"].as_str().unwrap().to_string(), boxes)
}

/// `needle`'s characters in the first `selector` element holding it are laid out in
/// logical order: each to the right of the one before it on the same line.
fn assert_in_logical_order(cdp: &mut Cdp, what: &str, selector: &str, needle: &str) {
    let (_, boxes) = layout_of(cdp, what, selector, needle);
    let same_line: Vec<_> = boxes
        .windows(2)
        .filter(|w| (w[0].1 - w[1].1).abs() < 1.0)
        .collect();
    assert!(
        same_line.len() * 2 >= needle.chars().count(),
        "{what}: {needle:?} is scattered over lines: {boxes:?}"
    );
    for w in same_line {
        assert!(
            w[1].0 > w[0].0,
            "{what}: {needle:?} is drawn out of order: {boxes:?}"
        );
    }
}

/// Text from evolved code and the candidate tree (a changed path, task names, a gate reason,
/// operator stderr, an annotation's note and the archive event that records it) is drawn
/// in logical order in real Chromium: each bidi override shown as a visible `\u{202E}`
/// escape, and the fields after a note not reversed.
#[test]
fn in_chromium_bidi_controls_in_workspace_text_are_shown_not_obeyed() {
    let Some(binary) = chromium_or_skip() else {
        return;
    };
    let e = hostile_run();
    let row = e.log().into_iter().find(|r| r["genid"] == "1").unwrap();
    assert_eq!(row["verdict"], "keep", "{row}");
    let served = serve_with(e.evolve(&["view", "ws", "--json"]).command());
    let browser = launch(&binary);
    let mut cdp = open_page(&browser, &format!("{}#gen-1", served.url));
    cdp.wait_until(
        "generation 1's detail",
        // Null-safe: the first polls can run before the page has replaced about:blank.
        "(() => { const d = document.getElementById('diff'); return !!d && d.dataset.state === 'loaded' && d.dataset.genid === '1' && document.querySelector('#detail table.trials') !== null; })()",
    );
    cdp.eval("document.querySelectorAll('details').forEach((d) => { d.open = true; })");

    // Each value: the text before its override, and the text after it, which the override
    // would draw reversed (and, in the annotations and the event, the fields after the note).
    for (what, selector, before, after) in [
        (
            "changed paths",
            "#detail-summary pre",
            "added target/hostile/",
            "fdp.exe",
        ),
        ("the diff", "#diff", "+x ", "abc, after"),
        ("a task name", "#detail table.trials td", "-", "fdp.exe"),
        (
            "the gate reason",
            "#detail-summary td",
            "keep — kept ",
            "sdrawkcab",
        ),
        ("gate stderr", "#detail details pre", "gate stderr ", "evil"),
        (
            "the annotations",
            "#detail-summary td",
            r#"{"note":"note "#,
            r#"abc","predicted_fixes":[]}"#,
        ),
        (
            "the record event",
            "#detail details pre",
            r#""annotations":{"note":"note "#,
            r#"abc","predicted_fixes":[]}"#,
        ),
    ] {
        assert_in_logical_order(&mut cdp, what, selector, after);
        let shown = format!("{before}{RLO_SHOWN}{after}");
        let (inner, _) = layout_of(&mut cdp, what, selector, after);
        assert!(inner.contains(&shown), "{what}: {inner:?} lacks {shown:?}");
        assert_in_logical_order(&mut cdp, what, selector, &shown);
    }
    // No bidi control is left anywhere in the page's text, and each escape is marked.
    let raw = cdp
        .eval(r"/[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/.test(document.body.textContent)");
    assert_eq!(raw, json!(false), "a bidi control is drawn raw");
    let escapes = cdp.eval(
        "[...document.querySelectorAll('.bidi-escape')].map((e) => [e.textContent, getComputedStyle(e.closest('bdi')).unicodeBidi])",
    );
    let escapes = escapes.as_array().unwrap();
    assert!(escapes.len() >= 6, "{escapes:?}");
    for esc in escapes {
        assert_eq!(esc, &json!([RLO_SHOWN, "isolate"]));
    }
}

/// Standard base64 (the screenshot's encoding), without a dependency for it.
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').map(value).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, v)| n | (u32::from(*v) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

// ------------------------------------------------------------------ a rejected proposal

/// A candidate rejected before its commit: the API and the page say why, and show the
/// diff of the tree it proposed (kept on `refs/evolve/proposed/1`), not "nothing to diff".
#[test]
fn a_rejected_candidate_shows_its_reason_and_the_tree_it_proposed() {
    let e = ws::Exp::new(&ws::Spec {
        generations: 1,
        mutate: json!({"action": "write", "path": "other.txt", "content": "0.9"}),
        ..ws::Spec::default()
    });
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let served = serve_with(e.evolve(&["view", "ws", "--json"]).command());
    let g = get_ok(&served, "/api/generations/1");
    assert_eq!(g["status"], "invalid_proposal");
    assert_eq!(g["proposal"]["ref"], "refs/evolve/proposed/1", "{g:#}");
    assert_eq!(g["proposal"]["certified"], true);
    assert!(g["commit"].is_null() && g["tag"].is_null());
    let d = get_ok(&served, "/api/generations/1/diff");
    assert_eq!(d["available"], true, "{d:#}");
    assert_eq!(
        (&d["stopped"], &d["proposed"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(d["failure_stage"], "surface");
    assert!(
        d["reason"].as_str().unwrap().contains("target/other.txt"),
        "{d:#}"
    );
    assert_eq!(
        d["changes"],
        json!([{"path": "target/other.txt", "change": "added"}])
    );
    assert!(d["text"].as_str().unwrap().contains("+0.9"), "{d:#}");
    assert!(get_ok(&served, "/api/generations/0")["proposal"].is_null());

    let Some(binary) = chromium_or_skip() else {
        return;
    };
    let browser = launch(&binary);
    let mut cdp = open_page(&browser, &served.url);
    cdp.wait_until(
        "the lineage tree",
        "document.querySelectorAll('#tree .node').length === 2",
    );
    cdp.click("#tree .node[data-genid=\"1\"]");
    cdp.wait_until(
        "gen 1's diff",
        "document.getElementById('diff').dataset.state === 'loaded' && document.getElementById('diff').dataset.genid === '1'",
    );
    let stop = cdp.eval("document.querySelector('#diff .stop').textContent");
    let stop = stop.as_str().unwrap();
    assert!(stop.contains("Rejected before its commit"), "{stop}");
    assert!(stop.contains("invalid_proposal at surface"), "{stop}");
    assert!(stop.contains("target/other.txt"), "{stop}");
    assert!(stop.contains("refs/evolve/proposed/1"), "{stop}");
    let shown = cdp.eval("document.getElementById('diff').textContent");
    assert!(shown.as_str().unwrap().contains("+0.9"), "{shown}");
    let summary = cdp.eval("document.getElementById('detail-summary').textContent");
    assert!(
        summary.as_str().unwrap().contains("proposed tree"),
        "{summary}"
    );
}

#[test]
fn a_trials_trajectory_is_served_with_its_messages_and_tokens() {
    use super::agent_model::{evolve as with_key, experiment};
    let upstream = super::upstream::Upstream::start(
        (0..20)
            .map(|_| super::upstream::answer("0.6", (10, 5)))
            .collect(),
    );
    let e = experiment(
        &upstream,
        &super::ws::Spec {
            budget_usd: 10.0,
            generations: 1,
            ..super::ws::Spec::default()
        },
    );
    with_key(&e, &["init", "ws", "--recipe", "recipe.yaml"]).ok();
    with_key(&e, &["run", "ws"]).ok();
    let served = serve_with(e.evolve(&["view", "ws", "--json"]).command());
    let gen0 = get_ok(&served, "/api/generations/0");
    let ev = &gen0["evaluation"];
    let trial = ev["trials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["trajectory"] == true)
        .unwrap_or_else(|| panic!("no trial with a trajectory: {ev}"));
    let path = format!(
        "/api/generations/0/evaluations/{}/trials/{}/{}",
        ev["line"],
        trial["task"].as_str().unwrap(),
        trial["trial"]
    );
    let shown = get_ok(&served, &path);
    assert_eq!(shown["available"], true, "{shown}");
    let text = shown["trajectory"].to_string();
    assert!(
        text.contains("A number near"),
        "the request's message: {text}"
    );
    assert!(text.contains("0.6"), "the model's answer: {text}");
    assert!(
        shown["counts"].to_string().contains("15"),
        "10 + 5 tokens: {shown}"
    );
    let missing = get(
        &served,
        &format!(
            "/api/generations/0/evaluations/{}/trials/nope/0",
            ev["line"]
        ),
    );
    assert_eq!(missing.status, 404);
}
