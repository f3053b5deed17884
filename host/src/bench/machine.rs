//! What the numbers were measured on, read from `/proc` (best effort: a field that
//! cannot be read is `None`, never an error).

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: Option<String>,
    pub cores: usize,
    pub memory_gib: Option<f64>,
    pub kernel: Option<String>,
    /// The 1-minute load average when the measurement ended: other work on the machine.
    pub load_average: Option<f64>,
    /// `release` or `debug` (a debug build is many times slower).
    pub build: &'static str,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

impl Machine {
    pub fn read() -> Machine {
        let cpu = read("/proc/cpuinfo").and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        });
        let memory_gib = read("/proc/meminfo").and_then(|s| {
            let kib: f64 = s
                .lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((kib / 1024.0 / 1024.0 * 10.0).round() / 10.0)
        });
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            memory_gib,
            kernel: read("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()),
            load_average: read("/proc/loadavg")
                .and_then(|s| s.split_whitespace().next()?.parse().ok()),
            build: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        }
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        let mut parts = vec![
            self.cpu.clone().unwrap_or_else(|| "unknown CPU".into()),
            format!("{} cores", self.cores),
        ];
        if let Some(m) = self.memory_gib {
            parts.push(format!("{m} GiB"));
        }
        if let Some(k) = &self.kernel {
            parts.push(format!("Linux {k}"));
        }
        if let Some(l) = self.load_average {
            parts.push(format!("load average {l:.2}"));
        }
        parts.push(format!("{} build", self.build));
        parts.join(", ")
    }
}
