//! Samples and their order statistics.

use serde::Serialize;
use std::time::{Duration, Instant};

/// The median and 95th percentile of `n` timed samples, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stat {
    pub median_ms: f64,
    pub p95_ms: f64,
    pub samples: usize,
}

impl Stat {
    /// Order statistics of `samples` (nearest-rank percentiles). `None` when empty.
    pub fn of(mut samples: Vec<Duration>) -> Option<Stat> {
        if samples.is_empty() {
            return None;
        }
        samples.sort();
        let n = samples.len();
        // Nearest rank: the smallest sample with at least p·n samples at or below it.
        let rank = |p: f64| ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Some(Stat {
            median_ms: ms(samples[rank(0.5)]),
            p95_ms: ms(samples[rank(0.95)]),
            samples: n,
        })
    }
}

/// Run `f` `n` times (at least once), timing each call; the first error stops it.
pub fn time<T, E>(n: usize, mut f: impl FnMut(usize) -> Result<T, E>) -> Result<Stat, E> {
    let mut v = Vec::with_capacity(n.max(1));
    for i in 0..n.max(1) {
        let t = Instant::now();
        std::hint::black_box(f(i)?);
        v.push(t.elapsed());
    }
    Ok(Stat::of(v).expect("at least one sample"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn nearest_rank_percentiles() {
        let s = Stat::of(ms(&(1..=20).rev().collect::<Vec<_>>())).unwrap();
        assert_eq!((s.median_ms, s.p95_ms, s.samples), (10.0, 19.0, 20));
        let one = Stat::of(ms(&[7])).unwrap();
        assert_eq!((one.median_ms, one.p95_ms), (7.0, 7.0));
        let two = Stat::of(ms(&[1, 3])).unwrap();
        assert_eq!((two.median_ms, two.p95_ms), (1.0, 3.0));
        assert!(Stat::of(vec![]).is_none());
    }

    #[test]
    fn time_stops_at_the_first_error() {
        let mut calls = 0;
        let r: Result<Stat, String> = time(5, |i| {
            calls += 1;
            if i == 2 {
                Err("boom".to_string())
            } else {
                Ok(i)
            }
        });
        assert_eq!((r.unwrap_err().as_str(), calls), ("boom", 3));
    }
}
