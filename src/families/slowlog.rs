//! The slow log (SLOWLOG GET / LEN / RESET / HELP) and what runs after
//! every command: its statistics, its latency sample and its slow log
//! entry.
//!
//! # What the time covers
//! A command's time is measured by the connection from dispatch until its
//! reply is ready, less the time a blocking command waited for data. In a
//! batch of pipelined commands, each after the first starts when the one
//! before it ended (one clock read a command, not two): what lies between
//! is the parsing of its arguments. A write, or a plan across shards,
//! only starts there: it runs later, in its shard's batch (on this
//! connection's thread or another's, or on the shard's actor) or in the
//! coordinator's round (see DESIGN-NOTES), and it times itself where it
//! runs ([`write_ran`]). That run is its command's time in INFO
//! commandstats, and past the thresholds it is sampled by the latency
//! monitor and logged with the command's arguments, so a slow
//! SUNIONSTORE is found in the slow log as in Redis; the connection
//! counts the call and its dispatch, and logs nothing of it. The batch's
//! commit (its log append, an fsync under `always`) is no command's time,
//! as Redis's AOF write is not. Reads and jobs (DEBUG SLEEP among them)
//! are awaited, so their time is all in.
//! What a command does for the commands before it is not its time: waiting
//! for their replies (a read behind the pipeline's writes in flight) or
//! running the writes and scripts collected before it on its thread. (It
//! was: under EVALSHA at pipeline 16 a script waiting for the one before
//! it on the other shard counted that wait, 160 µs a call in INFO
//! commandstats against 5.5 µs of its own, and the slow log took ~300
//! entries of 10-20 ms in 300k calls.)
//!
//! A script's run is timed where it runs, whichever thread and batch that
//! is ([`script_ran`]): it is added to its command's time in INFO
//! commandstats, and a run past the thresholds is logged, and sampled by
//! the latency monitor, as its command, as Redis times the whole script.
//! The connection leaves every script run on its task out of the command
//! it is timing ([`run_time_here`]), its own included, so no run counts
//! twice; what it counts of a script command is the rest (its dispatch
//! and queueing), and it logs none that dispatched a run
//! ([`logged_by_its_run`]). EXEC is timed the same way: its unit's run is
//! added to its time and logged as its commands (a script among them
//! with them). The commands a script calls are counted in
//! INFO commandstats, but not timed alone (their time is the script's),
//! and logged only with a threshold of 0.
//!
//! # Cost
//! The log sits behind one mutex taken only to add an entry or answer
//! SLOWLOG. A write's run costs two clock reads (with the rest of its
//! report, ~1.5% of the server's samples under INCR -c 50 -P 16). A fast
//! command costs one comparison against an atomic threshold, plus, while
//! the log is on, a reference to its request frame (a command made inside
//! the server: a copy of its argument handles, into a reused vector) so
//! that a slow one can be logged after its arguments were consumed.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

use bytes::Bytes;

use crate::command::flag;
use crate::command::{self, Args, CommandSpec};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::server::ClientEntry;

/// Most arguments an entry keeps (the last one says how many were cut).
const MAX_ARGC: usize = 32;
/// Longest argument an entry keeps, in bytes.
const MAX_STRING: usize = 128;

/// One logged command.
#[derive(Debug)]
struct Entry {
    id: u64,
    /// Unix time in seconds.
    time: u64,
    usec: u64,
    argv: Vec<Bytes>,
    peer: String,
    name: String,
}

/// The slow log, newest entry first.
#[derive(Debug)]
pub struct SlowLog {
    /// `slowlog-log-slower-than` in µs; `u64::MAX` while the log is off
    /// (a negative threshold).
    slower_than: AtomicU64,
    max_len: AtomicUsize,
    next_id: AtomicU64,
    entries: parking_lot::Mutex<VecDeque<Entry>>,
}

impl Default for SlowLog {
    fn default() -> SlowLog {
        SlowLog {
            slower_than: AtomicU64::new(10_000),
            max_len: AtomicUsize::new(128),
            next_id: AtomicU64::new(0),
            entries: Default::default(),
        }
    }
}

impl SlowLog {
    /// Takes `slowlog-log-slower-than` and `slowlog-max-len`. A shorter
    /// length trims the log at its next entry, as in Redis.
    pub fn configure(&self, slower_than: i64, max_len: i64) {
        // With a length of 0 entries are still added, and trimmed away at
        // once, as in Redis.
        self.slower_than
            .store(u64::try_from(slower_than).unwrap_or(u64::MAX), Relaxed);
        self.max_len.store(max_len.max(0) as usize, Relaxed);
    }

    /// Whether commands are being logged at all.
    fn armed(&self) -> bool {
        self.slower_than.load(Relaxed) != u64::MAX
    }

    /// Whether a command of `usec` must be logged.
    fn wants(&self, usec: u64) -> bool {
        usec >= self.slower_than.load(Relaxed)
    }

    fn push(&self, usec: u64, argv: &[Bytes], spec: &CommandSpec, session: &Session) {
        let name = session.entry.info.lock().name.clone();
        self.push_as(usec, argv, spec, session.entry.addr.clone(), name);
    }

    fn push_as(&self, usec: u64, argv: &[Bytes], spec: &CommandSpec, peer: String, name: String) {
        let entry = Entry {
            id: self.next_id.fetch_add(1, Relaxed),
            time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            usec,
            argv: trimmed(&redacted(spec, argv)),
            peer,
            name,
        };
        let max = self.max_len.load(Relaxed);
        let mut entries = self.entries.lock();
        entries.push_front(entry);
        entries.truncate(max);
    }
}

/// A command's arguments kept for the slow log until it has run.
pub enum Kept {
    /// The log is off.
    Nothing,
    /// The command's own arguments.
    Command(Vec<Bytes>),
    /// The request frame holding the command's arguments.
    Frame(Bytes),
    /// EXEC: the commands it runs (EXEC itself is never logged).
    Exec(ExecCommands),
}

/// The commands of a transaction, kept for the slow log: each one's spec
/// and argument count, and all their arguments in one vector (two
/// allocations per EXEC rather than one per command).
pub struct ExecCommands {
    specs: Vec<(&'static CommandSpec, usize)>,
    argv: Vec<Bytes>,
}

impl ExecCommands {
    fn each(&self) -> impl Iterator<Item = (&'static CommandSpec, &[Bytes])> {
        let mut rest = self.argv.as_slice();
        self.specs.iter().map(move |&(spec, n)| {
            let (argv, tail) = rest.split_at(n);
            rest = tail;
            (spec, argv)
        })
    }
}

thread_local! {
    /// Emptied vectors, reused so keeping arguments does not allocate.
    static SPARE: RefCell<Vec<Vec<Bytes>>> = const { RefCell::new(Vec::new()) };
}

/// Before a command runs: keeps its arguments if the log is on (or the
/// command is CONFIG SET, which may turn it on and is then logged).
pub fn keep(session: &Session, checked: &'static CommandSpec, args: &Args) -> Kept {
    let log = &session.server.slowlog;
    if !log.armed() && checked.name != "config|set" {
        return Kept::Nothing;
    }
    if checked.name == "exec" {
        // The commands are logged only if the transaction will run them.
        let Some(multi) = &session.multi else {
            return Kept::Nothing;
        };
        if multi.failed || session.watching.failed(crate::shard::now_ms()) {
            return Kept::Nothing;
        }
        let mut kept = ExecCommands {
            specs: Vec::with_capacity(multi.queue.len()),
            argv: Vec::with_capacity(multi.queue.iter().map(|(_, a)| a.len()).sum()),
        };
        for (spec, a) in &multi.queue {
            kept.specs
                .push((command::call_spec(spec, a).unwrap_or(spec), a.len()));
            kept.argv.extend_from_slice(a.all());
        }
        return Kept::Exec(kept);
    }
    if let Some(frame) = args.frame() {
        return Kept::Frame(frame.clone());
    }
    let mut argv = SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default();
    argv.extend_from_slice(args.all());
    Kept::Command(argv)
}

/// After a command ran for `usec` µs: counts the call, keeps a latency
/// sample if it reached the monitor's threshold, and logs it if it
/// reached the slow log's.
/// `sampled`: whether `usec` is the command's latency sample (not for a
/// write, whose run samples itself: [`write_ran`]).
pub fn after_call(
    session: &Session,
    checked: &'static CommandSpec,
    (usec, sampled): (u64, bool),
    kept: Kept,
) {
    let server = &session.server;
    server.record_call(checked, usec, sampled);
    observe_command(server, checked, usec);
    let log = &server.slowlog;
    match kept {
        Kept::Nothing => {}
        Kept::Command(mut argv) => {
            if log.wants(usec) && !checked.has(flag::SKIP_SLOWLOG) {
                log.push(usec, &argv, checked, session);
            }
            argv.clear();
            SPARE.with(|s| {
                let mut spare = s.borrow_mut();
                if spare.len() < 4 {
                    spare.push(argv);
                }
            });
        }
        Kept::Frame(frame) => {
            if log.wants(usec) && !checked.has(flag::SKIP_SLOWLOG) {
                let argv = crate::protocol::request::split_frame(&frame);
                log.push(usec, &argv, checked, session);
            }
        }
        Kept::Exec(commands) => log_exec(log, &commands, usec, &session.entry),
    }
}

/// What a write or a plan needs to report its run as its command's time
/// (see [`write_ran`]): the command's arguments, kept for the slow log,
/// and its client.
pub struct WriteRun {
    spec: &'static CommandSpec,
    kept: Kept,
    client: Option<Arc<ClientEntry>>,
}

/// Moves what `kept` holds of a write (`checked`) into its run, which
/// reports itself once it has run ([`write_ran`]): the connection, which
/// only queues the write, then logs nothing of it.
pub fn write_run(session: &Session, checked: &'static CommandSpec, kept: &mut Kept) -> WriteRun {
    let kept = std::mem::replace(kept, Kept::Nothing);
    let client = (!matches!(kept, Kept::Nothing)).then(|| session.entry.clone());
    WriteRun {
        spec: checked,
        kept,
        client,
    }
}

/// A write (or a plan) that ran in a shard's batch, wherever that was,
/// took `took`: it is its command's time in INFO commandstats, and past
/// the thresholds it is sampled by the latency monitor and logged, as
/// Redis times a command's execution (a slow SUNIONSTORE is found in the
/// slow log). A connection whose task ran it leaves it out of the
/// command it is timing ([`timed_itself`]).
pub fn write_ran(server: &crate::server::Server, run: WriteRun, took: std::time::Duration) {
    let usec = run_counted(server, run.spec, took);
    server.sample_run(run.spec, took);
    observe_command(server, run.spec, usec);
    let log = &server.slowlog;
    let Some(client) = run.client.filter(|_| log.wants(usec)) else {
        return;
    };
    if run.spec.has(flag::SKIP_SLOWLOG) {
        return;
    }
    let argv = match &run.kept {
        Kept::Command(argv) => std::borrow::Cow::Borrowed(argv.as_slice()),
        Kept::Frame(frame) => std::borrow::Cow::Owned(crate::protocol::request::split_frame(frame)),
        Kept::Nothing | Kept::Exec(_) => return,
    };
    push_for(log, usec, &argv, run.spec, &client);
}

/// A latency sample of command `spec`, which took `usec` µs, if it
/// reached the monitor's threshold (a fast command's event is its own).
fn observe_command(server: &crate::server::Server, spec: &CommandSpec, usec: u64) {
    let ms = usec / 1000;
    let latency = &server.latency;
    if ms >= latency_threshold(latency) {
        let event = if spec.has(flag::FAST) {
            super::latency::FAST_COMMAND
        } else {
            super::latency::COMMAND
        };
        latency.observe(event, ms);
    }
}

/// Logs command `spec` (`argv`) of `client`, which ran where the client's
/// own session is not at hand (a write's batch, a script's run).
fn push_for(
    log: &SlowLog,
    usec: u64,
    argv: &[Bytes],
    spec: &'static CommandSpec,
    client: &ClientEntry,
) {
    let name = client.info.lock().name.clone();
    log.push_as(usec, argv, spec, client.addr.clone(), name);
}

/// EXEC's commands, logged once its transaction has run `usec` µs (which
/// may be after EXEC returned to the connection: a transaction spanning
/// shards runs later, as a plan); `None` unless `kept` holds them.
pub fn exec_when_run(session: &Session, kept: &mut Kept) -> Option<impl FnOnce(u64) + Send> {
    let Kept::Exec(commands) = std::mem::replace(kept, Kept::Nothing) else {
        return None;
    };
    let (server, client) = (session.server.clone(), session.entry.clone());
    Some(move |usec| log_exec(&server.slowlog, &commands, usec, &client))
}

/// Logs a transaction's commands: it runs as one unit, so each is given
/// an even share of its time.
fn log_exec(log: &SlowLog, commands: &ExecCommands, usec: u64, client: &ClientEntry) {
    let share = usec / commands.specs.len().max(1) as u64;
    if !log.wants(share) {
        return;
    }
    let name = client.info.lock().name.clone();
    for (spec, argv) in commands.each() {
        if !spec.has(flag::SKIP_SLOWLOG) {
            log.push_as(share, argv, spec, client.addr.clone(), name.clone());
        }
    }
}

tokio::task_local! {
    /// Time a connection's task has spent on runs that time themselves
    /// (scripts and transactions: its client's, or others' it found
    /// queued on a shard it took), all told. Kept per task, not per
    /// thread: the task moves between threads as it waits.
    static RUN_TIME: std::cell::Cell<std::time::Duration>;
}

thread_local! {
    /// While a shard runs writes back to back (a batch, a round's steps on
    /// one shard): when the last of them ended, which is when the next
    /// one starts, so a write's run reads the clock once, not twice.
    static RUNS_MARK: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// A shard is about to run writes back to back on this thread (see
/// [`run_began`]); [`runs_end`] when it is done.
pub fn runs_begin() {
    runs_begin_at(std::time::Instant::now());
}

/// [`runs_begin`] with the clock read at `at` (just now) by the caller.
pub fn runs_begin_at(at: std::time::Instant) {
    RUNS_MARK.set(Some(at));
}

/// The writes [`runs_begin`] announced have run.
pub fn runs_end() {
    RUNS_MARK.set(None);
}

/// Runs one of the items [`runs_begin`] announced: one that does not time
/// itself as a write (a script, which times itself, or an expiry's
/// deletion) moves the mark past its own time, so that the write after
/// it does not count it.
pub fn run_item<T>(item: impl FnOnce() -> T) -> T {
    let before = RUNS_MARK.get();
    let out = item();
    if before.is_some() && RUNS_MARK.get() == before {
        RUNS_MARK.set(Some(std::time::Instant::now()));
    }
    out
}

/// When a write's run begins: where the one before it in the same run of
/// writes ended, else now. Hand it to [`run_took`] once the write ran.
pub fn run_began() -> (std::time::Instant, bool) {
    match RUNS_MARK.take() {
        Some(at) => (at, true),
        None => (std::time::Instant::now(), false),
    }
}

/// How long a write that began at `began` ([`run_began`]) took.
pub fn run_took((at, chained): (std::time::Instant, bool)) -> std::time::Duration {
    let now = std::time::Instant::now();
    if chained {
        RUNS_MARK.set(Some(now));
    }
    now.duration_since(at)
}

/// Runs a connection's task, `serve`, keeping its [`run_time_here`].
pub async fn counting_runs<F: std::future::Future>(serve: F) -> F::Output {
    RUN_TIME
        .scope(std::cell::Cell::new(std::time::Duration::ZERO), serve)
        .await
}

/// Time the calling connection's task has spent on runs that time
/// themselves so far (zero outside one): a connection timing a command
/// leaves out what this grew by meanwhile, which the runs counted for
/// their own commands ([`timed_itself`]).
pub fn run_time_here() -> std::time::Duration {
    RUN_TIME.try_with(std::cell::Cell::get).unwrap_or_default()
}

/// A script or transaction that took `took` counted it for its own
/// command: the connection whose task ran it, if one did, leaves it out
/// of the command it is timing.
pub fn timed_itself(took: std::time::Duration) {
    // Outside a connection's task (a shard's thread, a plan's blocking
    // thread, the coordinator) no command is being timed around the run.
    let _ = RUN_TIME.try_with(|t| t.set(t.get() + took));
}

/// A run of command `spec` (a script or a transaction) that took `took`
/// is its command's time: added to it in INFO commandstats and left out
/// of what the connection running it, if one does, is timing. Its
/// microseconds, for the slow log.
pub fn run_counted(
    server: &crate::server::Server,
    spec: &'static CommandSpec,
    took: std::time::Duration,
) -> u64 {
    timed_itself(took);
    server.add_time(spec, took);
    took.as_micros() as u64
}

/// Whether the run `action` dispatches for command `checked` is a
/// script's, which logs the command when it has run ([`script_ran`]).
pub fn logged_by_its_run(checked: &CommandSpec, action: &Action) -> bool {
    matches!(action, Action::Script { .. } | Action::Plan { .. })
        && matches!(
            checked.name,
            "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
        )
}

/// A script run by command `spec` (`argv`) for `client` took `took`: its
/// command's time in INFO commandstats grows by it, and past the
/// thresholds it is logged and sampled as its command would be (see the
/// module doc); not in EXEC (`!report`), which times its commands, the
/// script's with them.
pub fn script_ran(
    server: &crate::server::Server,
    (spec, argv, report): (&'static CommandSpec, &[Bytes], bool),
    client: &ClientEntry,
    took: std::time::Duration,
) {
    if !report {
        return;
    }
    let usec = run_counted(server, spec, took);
    let ms = usec / 1000;
    if ms >= latency_threshold(&server.latency) {
        server.latency.observe(super::latency::COMMAND, ms);
    }
    let log = &server.slowlog;
    if log.wants(usec) && !spec.has(flag::SKIP_SLOWLOG) {
        push_for(log, usec, argv, spec, client);
    }
}

/// A command a script runs: logged as Redis logs it, from the script's
/// own client (`?:0`, no name). Keeping its arguments until it has run
/// would cost every call a copy, so it is logged before it runs, with 0
/// µs: only with a threshold of 0.
pub fn script_call(server: &crate::server::Server, spec: &'static CommandSpec, argv: &[Bytes]) {
    let log = &server.slowlog;
    if log.wants(0) && !spec.has(flag::SKIP_SLOWLOG) {
        log.push_as(0, argv, spec, "?:0".into(), String::new());
    }
}

/// The monitor's threshold, read without a lock (`u64::MAX` when off).
fn latency_threshold(m: &super::latency::LatencyMonitor) -> u64 {
    // Reading through `observe` would build the event name first; the
    // common case is a fast command and a monitor that is off.
    m.threshold_now()
}

/// Redis's redaction of secrets: AUTH's arguments, HELLO's AUTH pair,
/// sensitive CONFIG SET values, ACL SETUSER's rules, MIGRATE's AUTH.
fn redacted(spec: &CommandSpec, argv: &[Bytes]) -> Vec<Bytes> {
    const HIDDEN: Bytes = Bytes::from_static(b"(redacted)");
    let mut out = argv.to_vec();
    let is = |i: usize, w: &str| argv[i].eq_ignore_ascii_case(w.as_bytes());
    match spec.name {
        "auth" => out[1..].fill(HIDDEN),
        "acl|setuser" => out[2..].fill(HIDDEN),
        "hello" => {
            let mut j = 2;
            while j < argv.len() {
                if is(j, "auth") && j + 2 < argv.len() {
                    out[j + 1] = HIDDEN;
                    out[j + 2] = HIDDEN;
                    j += 3;
                } else if is(j, "setname") {
                    j += 2;
                } else {
                    j += 1;
                }
            }
        }
        "config|set" => {
            for j in (2..argv.len().saturating_sub(1)).step_by(2) {
                if ["masterauth", "masteruser", "requirepass"]
                    .iter()
                    .any(|p| is(j, p))
                {
                    out[j + 1] = HIDDEN;
                }
            }
        }
        "migrate" => {
            for j in 6..argv.len() {
                // What follows KEYS is key names.
                if is(j, "keys") {
                    break;
                }
                if is(j, "auth") && j + 1 < argv.len() {
                    out[j + 1] = HIDDEN;
                } else if is(j, "auth2") && j + 2 < argv.len() {
                    out[j + 1] = HIDDEN;
                    out[j + 2] = HIDDEN;
                }
            }
        }
        _ => {}
    }
    out
}

/// Redis's trimming: at most 32 arguments, the last saying how many more
/// there were, and each at most 128 bytes followed by how many more.
fn trimmed(argv: &[Bytes]) -> Vec<Bytes> {
    let keep = if argv.len() > MAX_ARGC {
        MAX_ARGC - 1
    } else {
        argv.len()
    };
    let mut out: Vec<Bytes> = argv[..keep]
        .iter()
        .map(|a| {
            if a.len() > MAX_STRING {
                let mut s = a[..MAX_STRING].to_vec();
                s.extend_from_slice(
                    format!("... ({} more bytes)", a.len() - MAX_STRING).as_bytes(),
                );
                Bytes::from(s)
            } else {
                a.clone()
            }
        })
        .collect();
    if keep < argv.len() {
        out.push(Bytes::from(format!(
            "... ({} more arguments)",
            argv.len() - keep
        )));
    }
    out
}

const HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
];

/// SLOWLOG GET [count] | LEN | RESET | HELP
pub fn slowlog(s: &mut Session, a: Args) -> Action {
    let sub = String::from_utf8_lossy(a.get(1)).to_ascii_lowercase();
    let log = &s.server.slowlog;
    let reply = match sub.as_str() {
        "help" => super::help_reply(HELP),
        "len" => Reply::Int(log.entries.lock().len() as i64),
        "reset" => {
            log.entries.lock().clear();
            Reply::Ok
        }
        "get" if a.len() <= 3 => {
            let count = match a.from(2).first() {
                None => 10,
                Some(c) => match crate::util::num::parse_i64(c) {
                    Some(-1) => usize::MAX,
                    Some(n) if n >= 0 => n as usize,
                    _ => return Reply::err("count should be greater than or equal to -1").into(),
                },
            };
            let entries = log.entries.lock();
            Reply::Array(entries.iter().take(count).map(entry_reply).collect())
        }
        "get" => super::subcommand_syntax(&a),
        _ => return super::server::unknown_subcommand(a.get(1), "SLOWLOG"),
    };
    reply.into()
}

fn entry_reply(e: &Entry) -> Reply {
    Reply::Array(vec![
        Reply::Int(e.id as i64),
        Reply::Int(e.time as i64),
        Reply::Int(e.usec as i64),
        Reply::Array(e.argv.iter().cloned().map(Reply::Bulk).collect()),
        Reply::bulk(e.peer.clone()),
        Reply::bulk(e.name.clone()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_like_redis() {
        let argv: Vec<Bytes> = (0..34).map(|i| Bytes::from(i.to_string())).collect();
        let t = trimmed(&argv);
        assert_eq!(t.len(), 32);
        assert_eq!(t[31], Bytes::from("... (3 more arguments)"));
        let long = vec![Bytes::from("a".repeat(130))];
        let t = trimmed(&long);
        assert_eq!(t[0].len(), 128 + "... (2 more bytes)".len());
        assert!(t[0].ends_with(b"... (2 more bytes)"));
    }

    #[test]
    fn redacts_secrets() {
        let v = |words: &[&str]| -> Vec<Bytes> {
            words.iter().map(|w| Bytes::from(w.to_string())).collect()
        };
        let spec = |name| command::lookup_with_subcommands(name).unwrap();
        let migrate = v(&[
            "MIGRATE", "h", "1", "", "0", "5000", "AUTH2", "u", "p", "KEYS", "auth", "k",
        ]);
        assert_eq!(
            redacted(spec(b"migrate"), &migrate),
            v(&[
                "MIGRATE",
                "h",
                "1",
                "",
                "0",
                "5000",
                "AUTH2",
                "(redacted)",
                "(redacted)",
                "KEYS",
                "auth",
                "k"
            ])
        );
        let hello = v(&["HELLO", "3", "SETNAME", "auth", "AUTH", "u", "p"]);
        assert_eq!(
            redacted(spec(b"hello"), &hello),
            v(&[
                "HELLO",
                "3",
                "SETNAME",
                "auth",
                "AUTH",
                "(redacted)",
                "(redacted)"
            ])
        );
        let set = v(&["CONFIG", "SET", "requirepass", "x", "maxclients", "10"]);
        assert_eq!(
            redacted(spec(b"config|set"), &set),
            v(&[
                "CONFIG",
                "SET",
                "requirepass",
                "(redacted)",
                "maxclients",
                "10"
            ])
        );
    }

    /// Writes run back to back read the clock once each: a write's run
    /// starts where the one before it ended, and an item that does not time
    /// itself as a write (a script, an expiry) is not counted by the write
    /// after it. Outside such a run a write reads the clock itself.
    #[test]
    fn writes_run_back_to_back_share_clock_reads() {
        use std::time::Duration;
        let write = |work: Duration| {
            let began = run_began();
            std::thread::sleep(work);
            (began.1, run_took(began))
        };
        runs_begin();
        run_item(|| std::thread::sleep(Duration::from_millis(30)));
        let (chained, took) = run_item(|| write(Duration::ZERO));
        assert!(chained);
        assert!(took < Duration::from_millis(30), "{took:?}");
        let (chained, took) = run_item(|| write(Duration::from_millis(10)));
        assert!(chained);
        assert!(took >= Duration::from_millis(10), "{took:?}");
        runs_end();
        let (chained, took) = write(Duration::from_millis(5));
        assert!(!chained);
        assert!(took >= Duration::from_millis(5), "{took:?}");
    }
}
