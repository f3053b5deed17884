//! Bounded capture of an operator's stdout and stderr.
//!
//! wasmtime-wasi's `MemoryOutputPipe` reports "closed" once full, which makes a Rust
//! guest's `println!` panic: one chatty operator would fail for logging too much. This
//! pipe instead keeps the first `cap` bytes, silently drops the rest and counts what
//! it dropped, so the operator keeps running and the log says it was truncated.

use bytes::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

#[derive(Clone)]
pub struct CappedOutput {
    inner: Arc<Mutex<Captured>>,
}

struct Captured {
    bytes: Vec<u8>,
    cap: usize,
    dropped: u64,
}

/// What a stream captured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedOutput {
    pub bytes: Vec<u8>,
    /// Bytes written past the cap and discarded.
    pub dropped: u64,
}

impl CappedOutput {
    pub fn new(cap: usize) -> Self {
        CappedOutput {
            inner: Arc::new(Mutex::new(Captured {
                bytes: Vec::new(),
                cap,
                dropped: 0,
            })),
        }
    }

    pub fn take(&self) -> CapturedOutput {
        let mut c = self.lock();
        CapturedOutput {
            bytes: std::mem::take(&mut c.bytes),
            dropped: c.dropped,
        }
    }

    fn append(&self, data: &[u8]) {
        let mut c = self.lock();
        let room = c.cap.saturating_sub(c.bytes.len());
        let kept = room.min(data.len());
        c.bytes.extend_from_slice(&data[..kept]);
        c.dropped += (data.len() - kept) as u64;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Captured> {
        // A poisoned lock only means another writer panicked mid-append; the bytes
        // are still plain data, so keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl IsTerminal for CappedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for CappedOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.append(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CappedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_bytes_and_counts_the_rest() {
        let out = CappedOutput::new(4);
        out.append(b"abc");
        out.append(b"defg");
        let got = out.take();
        assert_eq!(got.bytes, b"abcd");
        assert_eq!(got.dropped, 3);
    }
}
