//! The signals that ask `evolve` to stop: SIGINT (Ctrl-C), SIGTERM (`kill`, a service
//! manager, a CI runner's timeout) and SIGHUP (the terminal went away).
//!
//! All three are handled alike, because the default action of each is to end the process
//! at once and leave its trials behind: a jailed phase would die with it, but a Docker
//! container would keep running and spending. Handled, the work in flight is cancelled, its
//! processes and containers are removed, and the process exits with 128 plus the signal's
//! number, the status a shell reports for a process that signal ended.

use std::io;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// Which signal asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Interrupt,
    Terminate,
    Hangup,
}

impl Stop {
    /// The signal's conventional name.
    pub fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
            Stop::Hangup => "SIGHUP",
        }
    }

    /// 128 plus the signal's number (SIGHUP 1, SIGINT 2, SIGTERM 15 on Linux).
    pub fn exit_code(self) -> u8 {
        match self {
            Stop::Interrupt => 130,
            Stop::Terminate => 143,
            Stop::Hangup => 129,
        }
    }
}

/// Handlers for the three signals. Installing them replaces the default action (end the
/// process) for the rest of the process's life, so install them before the work starts:
/// a signal that arrives earlier still ends the process the default way.
pub struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl StopSignals {
    /// Install the handlers; needs a Tokio runtime with its signal driver enabled.
    pub fn install() -> io::Result<StopSignals> {
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next stop signal. Pending forever if every stream has closed (never on Linux).
    pub async fn next(&mut self) -> Stop {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Stop::Interrupt,
            Some(()) = self.terminate.recv() => Stop::Terminate,
            Some(()) = self.hangup.recv() => Stop::Hangup,
            else => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_the_shells() {
        for (stop, number) in [
            (Stop::Interrupt, rustix::process::Signal::INT),
            (Stop::Terminate, rustix::process::Signal::TERM),
            (Stop::Hangup, rustix::process::Signal::HUP),
        ] {
            assert_eq!(i32::from(stop.exit_code()), 128 + number.as_raw());
        }
    }
}
