//! `evolve view DIR`: a read-only local web viewer of a workspace.
//!
//! An axum router, served on `127.0.0.1` only (a free port unless `--port` names one) by
//! hyper's HTTP/1 server with a header-read timeout ([`HEADER_READ_TIMEOUT`]), answers with
//! three embedded files (plain HTML, CSS and JavaScript, no build step, nothing from a CDN)
//! and the JSON endpoints they read ([`data`]; documented in `docs/viewer.md`). The page
//! draws every value from the workspace with its bidi controls shown, not obeyed, each
//! value in an isolate of its own (`value()` in `assets/viewer.js`).
//!
//! Read-only by construction: the workspace is opened with [`Workspace::open`] (which
//! creates nothing and takes no lock), every answer comes from reading the archive, the
//! tags, the repository's objects and the `runs/` records, and only `GET` is accepted.
//! A run may be in progress: [`data::audit`] tolerates a half-written final line.
//! No request names a file: generation ids are looked up among the archived rows.

pub mod data;
pub mod trajectory;

use crate::command::{CliError, CliResult};
use crate::workspace::Workspace;
use axum::Router;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Args;
use data::{ApiError, Audit, Fingerprint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::{Value, json};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const INDEX_HTML: &str = include_str!("assets/index.html");
const VIEWER_CSS: &str = include_str!("assets/viewer.css");
const VIEWER_JS: &str = include_str!("assets/viewer.js");

#[derive(Args)]
#[command(
    after_help = "Examples:\n  evolve view evolve-demo              # prints http://127.0.0.1:<port>/ and serves until Ctrl-C\n  evolve view ws --port 8080 --json    # {\"url\": \"http://127.0.0.1:8080/\", ...}\n\nThe server listens on 127.0.0.1 only, answers GET only, and never writes to the\nworkspace, so it can watch a run in progress. See docs/viewer.md."
)]
pub struct ViewArgs {
    /// The workspace (default: the current directory).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Listen on this port of 127.0.0.1 (default: a free port, printed).
    #[arg(long)]
    pub port: Option<u16>,
    /// Print the URL as one line of JSON.
    #[arg(long)]
    pub json: bool,
}

/// The workspace and the last audit of it, shared by the handlers.
pub struct Viewer {
    inner: Mutex<Inner>,
}

struct Inner {
    ws: Workspace,
    cached: Option<Arc<Audit>>,
}

impl Viewer {
    pub fn new(ws: Workspace) -> Viewer {
        Viewer {
            inner: Mutex::new(Inner { ws, cached: None }),
        }
    }

    /// Run `f` on the workspace and a current audit (re-read only when the archive, the
    /// champion cache or a `gen/*` tag changed since the last one).
    fn with<T>(&self, f: impl FnOnce(&Workspace, &Audit) -> T) -> T {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let current = Fingerprint::of(&inner.ws);
        let audit = match &inner.cached {
            Some(a) if a.fingerprint == current => a.clone(),
            _ => {
                let fresh = Arc::new(data::audit(&inner.ws));
                inner.cached = Some(fresh.clone());
                fresh
            }
        };
        f(&inner.ws, &audit)
    }
}

/// The router: the page, its assets, the JSON endpoints; `GET` only, loopback `Host` only.
pub fn router(viewer: Arc<Viewer>, port: u16) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/viewer.css",
            get(|| async { asset("text/css; charset=utf-8", VIEWER_CSS) }),
        )
        .route(
            "/viewer.js",
            get(|| async { asset("text/javascript; charset=utf-8", VIEWER_JS) }),
        )
        .route("/api/status", get(status))
        .route("/api/generations", get(generations))
        .route("/api/generations/{genid}", get(generation))
        .route("/api/generations/{genid}/diff", get(generation_diff))
        .route(
            "/api/generations/{genid}/evaluations/{line}/trials/{task}/{trial}",
            get(trial),
        )
        .route(
            "/api/generations/{genid}/stages/{stage}/trajectory",
            get(stage_trajectory),
        )
        .route("/api/champion/diff", get(champion_diff))
        .fallback(not_found)
        .with_state(viewer)
        .layer(middleware::from_fn(move |req, next| guard(req, next, port)))
}

/// Refuse anything but `GET`, and any `Host` but this server's loopback address (a page on
/// another site that resolves its own name to 127.0.0.1 must not read the workspace).
async fn guard(req: Request, next: Next, port: u16) -> Response {
    if req.method() != Method::GET {
        let mut r = error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!(
                "{} is not allowed: the viewer is read-only and answers GET only",
                req.method()
            ),
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return r;
    }
    if !host_allowed(req.headers(), port) {
        return error(
            StatusCode::MISDIRECTED_REQUEST,
            &format!("the viewer answers only requests for 127.0.0.1:{port} or localhost:{port}"),
        );
    }
    next.run(req).await
}

fn host_allowed(headers: &HeaderMap, port: u16) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    [format!("127.0.0.1:{port}"), format!("localhost:{port}")]
        .iter()
        .any(|ok| host.eq_ignore_ascii_case(ok))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'",
            ),
        ],
        body,
    )
        .into_response()
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        serde_json::to_string(v).unwrap_or_else(|_| "null".into()),
    )
        .into_response()
}

fn error(status: StatusCode, message: &str) -> Response {
    json_response(status, &json!({"error": message}))
}

async fn not_found(uri: axum::http::Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        &format!(
            "no such page or endpoint: {}; see docs/viewer.md",
            uri.path()
        ),
    )
}

/// Run `f` on a blocking thread (the audit reads files and verifies signatures).
async fn answer(
    viewer: Arc<Viewer>,
    f: impl FnOnce(&Workspace, &Audit) -> Result<Value, ApiError> + Send + 'static,
) -> Response {
    match tokio::task::spawn_blocking(move || viewer.with(f)).await {
        Ok(Ok(v)) => json_response(StatusCode::OK, &v),
        Ok(Err(e)) => error(
            StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &e.message,
        ),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the request failed: {e}"),
        ),
    }
}

async fn status(State(v): State<Arc<Viewer>>) -> Response {
    answer(v, |ws, a| Ok(data::status(ws, a))).await
}

async fn generations(State(v): State<Arc<Viewer>>) -> Response {
    answer(v, |_, a| Ok(data::generations(a))).await
}

async fn generation(State(v): State<Arc<Viewer>>, UrlPath(genid): UrlPath<String>) -> Response {
    answer(v, move |ws, a| data::generation(ws, a, &genid)).await
}

async fn generation_diff(
    State(v): State<Arc<Viewer>>,
    UrlPath(genid): UrlPath<String>,
) -> Response {
    answer(v, move |ws, a| data::diff(ws, a, &genid)).await
}

/// The path's parts as text: a line or trial that is not a number is a 404 with a
/// message (`data::trial`), not axum's plain-text 400.
async fn trial(
    State(v): State<Arc<Viewer>>,
    UrlPath((genid, line, task, trial)): UrlPath<(String, String, String, String)>,
) -> Response {
    answer(v, move |ws, a| {
        data::trial(ws, a, &genid, &line, &task, &trial)
    })
    .await
}

async fn stage_trajectory(
    State(v): State<Arc<Viewer>>,
    UrlPath((genid, stage)): UrlPath<(String, String)>,
) -> Response {
    answer(v, move |ws, a| {
        data::stage_trajectory(ws, a, &genid, &stage)
    })
    .await
}

async fn champion_diff(State(v): State<Arc<Viewer>>) -> Response {
    answer(v, data::champion_diff).await
}

/// Bind `127.0.0.1:<port>` (0: a free port).
pub async fn bind(port: u16) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await
}

/// How long a connection may take to send a request's head (its request line and
/// headers), counted from when the server starts waiting for one: on a new connection
/// and between the requests of a kept-alive one. A socket opened and left silent, or fed
/// a byte at a time, is closed after this instead of being held; a browser on the
/// loopback sends a whole head at once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve `viewer` on `listener` until Ctrl-C.
///
/// Each connection is served by hyper's HTTP/1 server with a timer and
/// [`HEADER_READ_TIMEOUT`]. `axum::serve` (0.8) gives hyper no timer, so its connections
/// have no header timeout at all; hyper-util's auto (HTTP/1 or 2) builder would first
/// wait, unbounded, for the bytes that tell the versions apart. Plain HTTP/1 is all the
/// page needs.
pub async fn serve(listener: tokio::net::TcpListener, viewer: Arc<Viewer>) -> std::io::Result<()> {
    let port = listener.local_addr()?.port();
    let app = router(viewer, port);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            _ = &mut stop => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // A connection that failed before it was accepted, or no file descriptor
                // to spare: a pause (so the loop does not spin), then the next one.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let conn =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        // A connection that ends in an error (a timed-out head, a reset) only ends itself.
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}

/// `evolve view DIR [--port N] [--json]`.
pub fn view_cmd(a: ViewArgs) -> CliResult {
    let ws = Workspace::open(&a.dir)?;
    let root = ws.root().to_path_buf();
    let rt = crate::command::runtime()?;
    rt.block_on(async {
        let listener = bind(a.port.unwrap_or(0)).await.map_err(|e| {
            CliError::usage(format!("cannot listen on 127.0.0.1: {e}"))
                .at(format!("port {}", a.port.unwrap_or(0)))
                .hint("choose another --port, or omit it for a free one")
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| CliError::usage(format!("cannot read the listening address: {e}")))?
            .port();
        let url = format!("http://127.0.0.1:{port}/");
        if a.json {
            println!("{}", json!({"url": url, "port": port, "workspace": root}));
        } else {
            println!("evolve view: {url}");
            println!("  workspace {} (read-only; Ctrl-C stops)", root.display());
        }
        let _ = std::io::stdout().flush();
        serve(listener, Arc::new(Viewer::new(ws)))
            .await
            .map_err(|e| CliError::usage(format!("the viewer stopped: {e}")))
    })?;
    Ok(ExitCode::SUCCESS)
}
