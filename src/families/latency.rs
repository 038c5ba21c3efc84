//! The latency monitor (LATENCY LATEST / HISTORY / RESET / GRAPH / DOCTOR)
//! and the per-command latency histograms (LATENCY HISTOGRAM, INFO
//! latencystats), as Redis 7.0 keeps them.
//!
//! # Events
//! A sample is kept only when it reaches `latency-monitor-threshold`
//! milliseconds (0 turns the monitor off), one per event and second (the
//! worst of that second), 160 per event. cairn records these events, with
//! Redis's name where the meaning matches:
//!
//! | event | what cairn measured |
//! | --- | --- |
//! | `command`, `fast-command` | a command, as its slow log time; `fast-command` for commands flagged `fast` |
//! | `aof-fsync-always` | a shard's commit under `durability = always` (the write and its fsync, which redb does together) |
//! | `aof-write`, `aof-write-alone` | a shard's commit under `everysec` / `no` (written, not fsynced; cairn never has an fsync or a child running beside it, hence always `-alone` too, as Redis records both) |
//! | `expire-cycle` | one reaper slice of a shard (active expiry and garbage collection) |
//! | `shard-sync` | cairn only: a shard's periodic fsync under `everysec` / `no`, which Redis runs in a background thread and does not monitor |
//!
//! # Histograms
//! Each command's histogram has the layout of the HDR histogram Redis uses
//! (1 ns to 1 s, two significant digits: 128 linear sub-buckets per power
//! of two), so percentiles and the power-of-two buckets of LATENCY
//! HISTOGRAM come out as Redis computes them. Like Redis, a call is
//! recorded as its whole microseconds times 1000. The counters are
//! allocated on a command's first recorded call: one relaxed increment per
//! call afterwards.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::OnceLock;
use std::time::Instant;

use crate::command::{self, Args, CommandSpec};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::server::{Runtime, Server};

/// Samples kept per event (Redis's LATENCY_TS_LEN).
pub const SERIES_LEN: usize = 160;

/// Event: a command not flagged `fast` reached the threshold.
pub const COMMAND: &str = "command";
/// Event: a command flagged `fast` reached the threshold.
pub const FAST_COMMAND: &str = "fast-command";
/// Event: a shard commit with its fsync (`durability = always`).
pub const FSYNC_ALWAYS: &str = "aof-fsync-always";
/// Event: a shard commit without fsync.
pub const WRITE: &str = "aof-write";
/// Event: the same commit, with nothing else writing or syncing beside it.
pub const WRITE_ALONE: &str = "aof-write-alone";
/// Event: a reaper slice.
pub const EXPIRE_CYCLE: &str = "expire-cycle";
/// Event (cairn only): a shard's periodic fsync.
pub const SHARD_SYNC: &str = "shard-sync";

/// One sample: the worst latency (ms) seen in one second.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    /// Unix time in seconds; 0 = an empty slot.
    time: u64,
    latency: u64,
}

/// The samples of one event, a ring of `SERIES_LEN`.
#[derive(Debug)]
struct Series {
    samples: [Sample; SERIES_LEN],
    /// The slot the next new second goes to.
    idx: usize,
    /// All-time maximum.
    max: u64,
}

impl Series {
    fn new() -> Series {
        Series {
            samples: [Sample::default(); SERIES_LEN],
            idx: 0,
            max: 0,
        }
    }

    /// The filled samples, oldest first.
    fn in_order(&self) -> impl Iterator<Item = &Sample> {
        (0..SERIES_LEN)
            .map(move |j| &self.samples[(self.idx + j) % SERIES_LEN])
            .filter(|s| s.time != 0)
    }

    fn latest(&self) -> Sample {
        self.samples[(self.idx + SERIES_LEN - 1) % SERIES_LEN]
    }
}

/// The latency monitor: thresholds read on every command, and the events'
/// samples behind a lock taken only when a sample is kept or asked for.
#[derive(Debug)]
pub struct LatencyMonitor {
    /// `latency-monitor-threshold` in ms; `u64::MAX` when it is 0 (off),
    /// so the check is one comparison.
    threshold: AtomicU64,
    /// `latency-tracking`: whether command histograms are recorded.
    tracking: AtomicBool,
    /// Events in the order they first appeared.
    events: parking_lot::Mutex<Vec<(&'static str, Series)>>,
}

impl Default for LatencyMonitor {
    fn default() -> LatencyMonitor {
        LatencyMonitor {
            threshold: AtomicU64::new(u64::MAX),
            tracking: AtomicBool::new(true),
            events: Default::default(),
        }
    }
}

impl LatencyMonitor {
    /// Keeps `ms` as a sample of `event` if it reaches the threshold.
    pub fn observe(&self, event: &'static str, ms: u64) {
        if ms >= self.threshold.load(Relaxed) {
            self.add(event, ms);
        }
    }

    /// Keeps the time since `started` as a sample of `event` if it
    /// reaches the threshold.
    pub fn observe_since(&self, event: &'static str, started: Instant) {
        self.observe(event, started.elapsed().as_millis() as u64);
    }

    /// Reports a shard commit that began at `started`: `fsynced` under
    /// `durability = always` (see the module doc for the event names).
    pub fn commit_took(&self, fsynced: bool, started: Instant) {
        let ms = started.elapsed().as_millis() as u64;
        if ms < self.threshold.load(Relaxed) {
            return;
        }
        if fsynced {
            self.add(FSYNC_ALWAYS, ms);
        } else {
            self.add(WRITE_ALONE, ms);
            self.add(WRITE, ms);
        }
    }

    /// The threshold in ms, `u64::MAX` while the monitor is off: a caller
    /// compares first and names the event only for a slow one.
    pub fn threshold_now(&self) -> u64 {
        self.threshold.load(Relaxed)
    }

    /// Whether command histograms are recorded (`latency-tracking`).
    pub fn tracking(&self) -> bool {
        self.tracking.load(Relaxed)
    }

    fn add(&self, event: &'static str, ms: u64) {
        let now = unix_secs();
        let mut events = self.events.lock();
        let series = match events.iter().position(|(e, _)| *e == event) {
            Some(i) => &mut events[i].1,
            None => {
                events.push((event, Series::new()));
                &mut events.last_mut().expect("just pushed").1
            }
        };
        series.max = series.max.max(ms);
        // One sample per second: the worst one.
        let prev = (series.idx + SERIES_LEN - 1) % SERIES_LEN;
        if series.samples[prev].time == now {
            series.samples[prev].latency = series.samples[prev].latency.max(ms);
            return;
        }
        series.samples[series.idx] = Sample {
            time: now,
            latency: ms,
        };
        series.idx = (series.idx + 1) % SERIES_LEN;
    }

    /// Forgets the named events (case-insensitively), or all; how many.
    fn reset(&self, names: &[bytes::Bytes]) -> i64 {
        let mut events = self.events.lock();
        let before = events.len();
        if names.is_empty() {
            events.clear();
        } else {
            events.retain(|(e, _)| !names.iter().any(|n| n.eq_ignore_ascii_case(e.as_bytes())));
        }
        (before - events.len()) as i64
    }
}

/// Takes the thresholds from the configuration (at start and after CONFIG
/// SET): the slow log's and the latency monitor's.
pub fn configure(slowlog: &super::slowlog::SlowLog, latency: &LatencyMonitor, rt: &Runtime) {
    slowlog.configure(rt.int("slowlog-log-slower-than"), rt.int("slowlog-max-len"));
    let ms = rt.int("latency-monitor-threshold");
    latency
        .threshold
        .store(if ms <= 0 { u64::MAX } else { ms as u64 }, Relaxed);
    latency
        .tracking
        .store(rt.get("latency-tracking") == "yes", Relaxed);
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

// ---------------------------------------------------------------------------
// Per-command histograms.

/// Sub-buckets per power of two past the first 256 values.
const HALF: usize = 128;
/// Counters: 1 ns to 1 s at two significant digits.
const COUNTS: usize = 3072;
/// Largest recorded value (ns); longer calls count as this.
const MAX_NS: u64 = 1_000_000_000;

/// The power-of-two bucket of `v` (0 for the first 256 values).
fn bucket_of(v: u64) -> u32 {
    (64 - (v | 255).leading_zeros()) - 8
}

/// The counter of value `v`.
fn index_of(v: u64) -> usize {
    let b = bucket_of(v);
    ((b as usize + 1) * HALF + (v >> b) as usize - HALF).min(COUNTS - 1)
}

/// The smallest value counter `i` holds.
fn value_at(i: usize) -> u64 {
    let (mut bucket, mut sub) = ((i / HALF) as i64 - 1, (i % HALF + HALF) as u64);
    if bucket < 0 {
        sub -= HALF as u64;
        bucket = 0;
    }
    sub << bucket
}

/// The largest value that counts the same as `v`.
fn highest_equivalent(v: u64) -> u64 {
    let width = 1u64 << bucket_of(v);
    (v & !(width - 1)) + width - 1
}

/// One command's latency distribution (see the module doc). Each thread
/// records into counts of its own (see `util::stripe`), allocated on its
/// first call of the command; a snapshot sums them.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [OnceLock<Box<[AtomicU64]>>; crate::util::stripe::STRIPES],
    /// What the counters summed to at the last reset (the counters are
    /// their threads' own to write: see `util::stripe`).
    base: parking_lot::Mutex<Option<Vec<u64>>>,
}

impl Histogram {
    /// Records one call of `usec` microseconds.
    pub fn record(&self, usec: u64) {
        self.record_ns(usec.saturating_mul(1000));
    }

    /// Records one call of `ns` nanoseconds.
    pub fn record_ns(&self, ns: u64) {
        let ns = ns.clamp(1, MAX_NS);
        let stripe = crate::util::stripe::stripe();
        let counts = self.counts[stripe.index]
            .get_or_init(|| (0..COUNTS).map(|_| AtomicU64::new(0)).collect());
        stripe.add(&counts[index_of(ns)], 1);
    }

    /// Forgets every call (CONFIG RESETSTAT): what the counters hold
    /// becomes their baseline.
    pub fn reset(&self) {
        let mut base = self.base.lock();
        *base = Some(self.sums());
    }

    /// The counters summed over the threads, reset or not.
    fn sums(&self) -> Vec<u64> {
        let mut sum = vec![0u64; COUNTS];
        for counts in self.counts.iter().filter_map(OnceLock::get) {
            for (s, c) in sum.iter_mut().zip(counts.iter()) {
                *s = s.wrapping_add(c.load(Relaxed));
            }
        }
        sum
    }

    /// The counters since the last reset, or `None` before a call was
    /// recorded.
    fn snapshot(&self) -> Option<Vec<u64>> {
        let mut sum = self.sums();
        if let Some(base) = &*self.base.lock() {
            for (s, b) in sum.iter_mut().zip(base) {
                *s = s.saturating_sub(*b);
            }
        }
        (sum.iter().sum::<u64>() > 0).then_some(sum)
    }
}

/// The value (ns) at percentile `p` of `counts`, as HDR computes it.
fn percentile(counts: &[u64], p: f64) -> u64 {
    let total: u64 = counts.iter().sum();
    let want = ((p.min(100.0) / 100.0 * total as f64 + 0.5) as u64).max(1);
    let mut seen = 0;
    for (i, &c) in counts.iter().enumerate() {
        seen += c;
        if seen >= want {
            let v = value_at(i);
            return if p == 0.0 { v } else { highest_equivalent(v) };
        }
    }
    0
}

/// LATENCY HISTOGRAM's map for one command: its calls, and the cumulative
/// count at each power-of-two bucket (1024 ns, 2048 ns...) that adds any,
/// keyed by the bucket's upper end in microseconds.
fn cdf(counts: &[u64]) -> Reply {
    let total: u64 = counts.iter().sum();
    let mut buckets = Vec::new();
    let (mut at, mut cumulative, mut previous) = (0, 0, 0);
    let mut level: u64 = 1024;
    while previous < total {
        let last = index_of(level);
        while at <= last && at < COUNTS {
            cumulative += counts[at];
            at += 1;
        }
        if level >= 2 * MAX_NS {
            cumulative = total;
        }
        if cumulative > previous {
            buckets.push((
                Reply::Int((highest_equivalent(level) / 1000) as i64),
                Reply::Int(cumulative as i64),
            ));
        }
        previous = cumulative;
        level *= 2;
    }
    Reply::Map(vec![
        (Reply::bulk("calls"), Reply::Int(total as i64)),
        (Reply::bulk("histogram_usec"), Reply::Map(buckets)),
    ])
}

/// INFO's `# Latencystats` lines: the configured percentiles of every
/// command with recorded calls (nothing while `latency-tracking` is off).
pub fn info_section(server: &Server, out: &mut String) {
    out.push_str("# Latencystats\r\n");
    if !server.latency.tracking() {
        return;
    }
    let percentiles: Vec<(String, f64)> = server
        .runtime
        .read()
        .get("latency-tracking-info-percentiles")
        .split_whitespace()
        .filter_map(|w| Some((w.to_string(), w.parse().ok()?)))
        .collect();
    for (spec, stat) in command::all_specs().zip(&server.command_stats) {
        let Some(counts) = stat.latency.snapshot() else {
            continue;
        };
        let values: Vec<String> = percentiles
            .iter()
            .map(|(name, p)| format!("p{name}={:.3}", percentile(&counts, *p) as f64 / 1000.0))
            .collect();
        let _ = write!(
            out,
            "latency_percentiles_usec_{}:{}\r\n",
            spec.name,
            values.join(",")
        );
    }
}

// ---------------------------------------------------------------------------
// The LATENCY command.

const HELP: &[&str] = &[
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
    "    Prints this help.",
];

/// LATENCY DOCTOR|GRAPH|HISTORY|LATEST|RESET|HISTOGRAM|HELP
pub fn latency(s: &mut Session, a: Args) -> Action {
    let sub = String::from_utf8_lossy(a.get(1)).to_ascii_lowercase();
    let monitor = &s.server.latency;
    let reply = match sub.as_str() {
        "help" => super::help_reply(HELP),
        "latest" => {
            let events = monitor.events.lock();
            Reply::Array(
                events
                    .iter()
                    .map(|(name, series)| {
                        let last = series.latest();
                        Reply::Array(vec![
                            Reply::bulk(*name),
                            Reply::Int(last.time as i64),
                            Reply::Int(last.latency as i64),
                            Reply::Int(series.max as i64),
                        ])
                    })
                    .collect(),
            )
        }
        "history" => {
            let events = monitor.events.lock();
            let samples = events
                .iter()
                .find(|(e, _)| e.as_bytes() == a.get(2).as_ref())
                .map(|(_, series)| {
                    series
                        .in_order()
                        .map(|s| {
                            Reply::Array(vec![
                                Reply::Int(s.time as i64),
                                Reply::Int(s.latency as i64),
                            ])
                        })
                        .collect()
                });
            Reply::Array(samples.unwrap_or_default())
        }
        "graph" => {
            let events = monitor.events.lock();
            match events
                .iter()
                .find(|(e, _)| e.as_bytes() == a.get(2).as_ref())
            {
                Some((name, series)) => Reply::Verbatim(graph(name, series)),
                None => Reply::err(format!(
                    "No samples available for event '{}'",
                    String::from_utf8_lossy(a.get(2))
                )),
            }
        }
        "reset" => Reply::Int(monitor.reset(a.from(2))),
        "doctor" => Reply::Verbatim(super::latency_doctor::report(&s.server)),
        "histogram" => histogram(&s.server, a.from(2)),
        _ => return super::server::unknown_subcommand(a.get(1), "LATENCY"),
    };
    reply.into()
}

/// LATENCY HISTOGRAM [command ...]: every command with recorded calls, or
/// the named ones (a container names its subcommands); unknown names and
/// commands without calls are left out.
fn histogram(server: &Server, names: &[bytes::Bytes]) -> Reply {
    let of = |spec: &'static CommandSpec| {
        server.command_stats[command::index_of(spec)]
            .latency
            .snapshot()
            .map(|counts| (Reply::bulk(spec.name), cdf(&counts)))
    };
    let mut out = Vec::new();
    if names.is_empty() {
        out.extend(command::all_specs().filter_map(of));
    } else {
        for name in names {
            let Some(spec) = command::lookup_with_subcommands(&name.to_ascii_lowercase()) else {
                continue;
            };
            out.extend(of(spec));
            if command::is_container(spec) {
                out.extend(command::subcommands_of(spec.name).filter_map(of));
            }
        }
    }
    Reply::Map(out)
}

/// Columns of LATENCY GRAPH.
const GRAPH_COLS: usize = 80;
/// Rows of LATENCY GRAPH's chart.
const GRAPH_ROWS: usize = 4;

/// LATENCY GRAPH's text: a header, a rule, and Redis's sparkline of the
/// samples (oldest first), each labelled with how long ago it was.
fn graph(name: &str, series: &Series) -> String {
    let now = unix_secs();
    let points: Vec<(u64, String)> = series
        .in_order()
        .map(|s| {
            let ago = now.saturating_sub(s.time);
            let label = match ago {
                0..=59 => format!("{ago}s"),
                60..=3599 => format!("{}m", ago / 60),
                3600..=86399 => format!("{}h", ago / 3600),
                _ => format!("{}d", ago / 86400),
            };
            (s.latency, label)
        })
        .collect();
    let high = points.iter().map(|p| p.0).max().unwrap_or(0);
    let low = points.iter().map(|p| p.0).min().unwrap_or(0);
    let mut out = format!(
        "{name} - high {high} ms, low {low} ms (all time high {} ms)\n",
        series.max
    );
    out.push_str(&"-".repeat(GRAPH_COLS));
    out.push('\n');
    for (j, chunk) in points.chunks(GRAPH_COLS).enumerate() {
        if j != 0 {
            out.push('\n');
        }
        sparkline(&mut out, chunk, low, high);
    }
    out
}

/// Draws one chunk of samples the way Redis's filled sparkline does:
/// `GRAPH_ROWS` rows of three levels each (`_`, `o`, `#`, with `|` below
/// a full cell), a blank row, then the labels written downwards.
fn sparkline(out: &mut String, points: &[(u64, String)], low: u64, high: u64) {
    const FILL: [char; 3] = ['_', 'o', '#'];
    let steps = (FILL.len() * GRAPH_ROWS) as i64;
    let range = if high == low {
        1.0
    } else {
        (high - low) as f64
    };
    let step_of = |v: u64| {
        let rel = (v - low) as f64;
        (((rel * steps as f64) as i64) as f64 / range) as i64
    };
    for row in 0..GRAPH_ROWS as i64 {
        for (v, _) in points {
            let step = step_of(*v).clamp(0, steps - 1);
            let at = step - (GRAPH_ROWS as i64 - row - 1) * FILL.len() as i64;
            out.push(if at < 0 {
                ' '
            } else if (at as usize) < FILL.len() {
                FILL[at as usize]
            } else {
                '|'
            });
        }
        out.push('\n');
    }
    // A blank row between the chart and its labels.
    out.push_str(&" ".repeat(points.len()));
    out.push('\n');
    let longest = points.iter().map(|p| p.1.len()).max().unwrap_or(0);
    for i in 0..longest {
        for (_, label) in points {
            out.push(label.as_bytes().get(i).map_or(' ', |&b| b as char));
        }
        out.push('\n');
    }
}

/// The events with their samples, for the doctor's report.
pub(crate) fn event_stats(server: &Server) -> Vec<EventStats> {
    let now = unix_secs();
    server
        .latency
        .events
        .lock()
        .iter()
        .map(|(name, series)| {
            let samples: Vec<&Sample> = series.in_order().collect();
            let n = samples.len() as u64;
            let sum: u64 = samples.iter().map(|s| s.latency).sum();
            let avg = sum.checked_div(n).unwrap_or(0);
            let deviation: u64 = samples.iter().map(|s| s.latency.abs_diff(avg)).sum();
            let mad = deviation.checked_div(n).unwrap_or(0);
            let oldest = samples.iter().map(|s| s.time).min().unwrap_or(now);
            EventStats {
                name,
                samples: n,
                avg,
                mad,
                period: now.saturating_sub(oldest).max(1),
                max: series.max,
            }
        })
        .collect()
}

/// What the doctor reports about one event.
pub(crate) struct EventStats {
    /// The event.
    pub name: &'static str,
    /// Samples kept.
    pub samples: u64,
    /// Their average (ms).
    pub avg: u64,
    /// Their mean absolute deviation (ms).
    pub mad: u64,
    /// Seconds since the oldest sample (at least 1).
    pub period: u64,
    /// All-time maximum (ms).
    pub max: u64,
}

/// `latency-monitor-threshold` as configured (0 = off).
pub(crate) fn threshold_ms(server: &Server) -> u64 {
    match server.latency.threshold.load(Relaxed) {
        u64::MAX => 0,
        ms => ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hdr_layout() {
        assert_eq!(index_of(100), 100);
        assert_eq!(value_at(index_of(300)), 300);
        assert_eq!(index_of(1024), 512);
        assert!(index_of(MAX_NS) < COUNTS);
        assert_eq!(highest_equivalent(1000), 1003);
        assert_eq!(highest_equivalent(3000), 3007);
        assert_eq!(highest_equivalent(32768) / 1000, 33);
    }

    #[test]
    fn percentiles_and_buckets() {
        let h = Histogram::default();
        assert!(h.snapshot().is_none());
        for usec in [1, 1, 6, 30] {
            h.record(usec);
        }
        let counts = h.snapshot().unwrap();
        assert_eq!(percentile(&counts, 50.0), 1003);
        assert_eq!(percentile(&counts, 99.0), 30079);
        let Reply::Map(fields) = cdf(&counts) else {
            panic!()
        };
        let Reply::Map(buckets) = &fields[1].1 else {
            panic!()
        };
        let pairs: Vec<(i64, i64)> = buckets
            .iter()
            .map(|(k, v)| match (k, v) {
                (Reply::Int(k), Reply::Int(v)) => (*k, *v),
                _ => panic!(),
            })
            .collect();
        assert_eq!(pairs, vec![(1, 2), (8, 3), (33, 4)]);
        h.reset();
        assert!(h.snapshot().is_none());
    }

    #[test]
    fn one_sample_graph() {
        let mut series = Series::new();
        series.samples[0] = Sample {
            time: unix_secs(),
            latency: 46,
        };
        series.idx = 1;
        series.max = 46;
        let g = graph("command", &series);
        let expected = format!(
            "command - high 46 ms, low 46 ms (all time high 46 ms)\n{}\n \n \n \n_\n \n0\ns\n",
            "-".repeat(80)
        );
        assert_eq!(g, expected);
    }
}
