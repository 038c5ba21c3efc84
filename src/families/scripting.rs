//! Lua scripts: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT.
//!
//! The engines (`crate::scripting`) run the Lua; this module decides where
//! a script's commands run and keeps it atomic. A script whose declared
//! keys are on one shard runs inside that shard's batch, on that shard's
//! Lua state; any other runs as one coordinator plan holding every shard,
//! on the plan state: a blocking thread runs the Lua, and each `redis.call`
//! builds the command's action exactly as a client's command would and
//! runs it inside the locked shards' open transactions (`net::atomic`), so
//! the script reads its own writes and all of them commit together, or
//! none if the script is stopped by SHUTDOWN.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::command::args::is;
use crate::command::flag;
use crate::command::table::CommandSpec;
use crate::command::{self, Args};
use crate::net::atomic::Atomic;
use crate::net::session::{Action, Session, ANY_SHARD};
use crate::protocol::Reply;
use crate::scripting::{Engines, Host, KillHandle, Label, ScriptFlags, ScriptVm};
use crate::server::{ClientEntry, Server};
use crate::shard::coordinator::CoordError;
use crate::storage::StoreError;

/// EVAL script numkeys [key ...] [arg ...]
pub fn eval(s: &mut Session, a: Args) -> Action {
    eval_generic(s, a, false, false)
}

/// EVALSHA sha1 numkeys [key ...] [arg ...]
pub fn evalsha(s: &mut Session, a: Args) -> Action {
    eval_generic(s, a, true, false)
}

/// EVAL_RO script numkeys [key ...] [arg ...]
pub fn eval_ro(s: &mut Session, a: Args) -> Action {
    eval_generic(s, a, false, true)
}

/// EVALSHA_RO sha1 numkeys [key ...] [arg ...]
pub fn evalsha_ro(s: &mut Session, a: Args) -> Action {
    eval_generic(s, a, true, true)
}

/// Where the keys after `numkeys` (argv[2] of `argc` arguments) end, with
/// Redis's errors (EVAL's and FCALL's alike).
pub fn keys_end(numkeys: i64, argc: usize) -> Result<usize, Reply> {
    if numkeys > (argc - 3) as i64 {
        return Err(Reply::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    if numkeys < 0 {
        return Err(Reply::err("Number of keys can't be negative"));
    }
    Ok(3 + numkeys as usize)
}

fn eval_generic(s: &mut Session, a: Args, by_sha: bool, ro: bool) -> Action {
    let split = match a.int(2).and_then(|n| keys_end(n, a.len())) {
        Ok(n) => n,
        Err(r) => return r.into(),
    };
    let sha = if by_sha {
        // A digest is ASCII: the plain check is much cheaper than a lossy
        // conversion (which walked it as UTF-8 chunks, ~1% of an EVALSHA).
        match std::str::from_utf8(a.get(1)) {
            Ok(text) => text.to_ascii_lowercase(),
            Err(_) => String::from_utf8_lossy(a.get(1)).to_ascii_lowercase(),
        }
    } else {
        crate::scripting::sha1_hex(a.get(1))
    };
    // The command's arguments, shared by the run, its fallback and what
    // FUNCTION STATS shows.
    let label: Label = Arc::new((sha, a.into_vec()));
    let l = label.clone();
    // A state is entered on a shard thread or a blocking thread, never on
    // a connection thread: it is locked for as long as a script runs.
    let run = move |vm: &ScriptVm, host: &mut dyn Host| {
        let (keys, argv) = (&l.1[3..split], &l.1[split..]);
        if by_sha {
            return vm.run(&l.0, keys, argv, ro, host);
        }
        match vm.load(&l.1[1]) {
            Ok(sha) => vm.run(&sha, keys, argv, ro, host),
            Err(r) => r,
        }
    };
    dispatch(s, false, label, split, run)
}

/// The shard every one of `keys` is on, if there is one (and a key).
fn one_shard(server: &Server, keys: &[Bytes]) -> Option<usize> {
    let (first, rest) = keys.split_first()?;
    let shard = server.shards.shard_of_key(first);
    rest.iter()
        .all(|k| server.shards.shard_of_key(k) == shard)
        .then_some(shard)
}

/// Who runs a script: the calling client and its database, what the
/// script's reads make it track, and the command it called.
#[derive(Clone)]
pub struct Caller {
    entry: Arc<ClientEntry>,
    db: u8,
    /// See [`Session::script_tracks`].
    tracks: Option<Vec<Bytes>>,
    /// EVAL, FCALL..., whose time the script's run is.
    command: &'static CommandSpec,
    /// Whether the run is reported as its command's (not in EXEC, which
    /// reports its commands itself).
    report: bool,
}

impl Caller {
    /// The client of `s` running, with `command`, a script that declares
    /// `keys`.
    pub fn of(s: &Session, command: &'static CommandSpec, keys: &[Bytes]) -> Caller {
        Caller {
            entry: s.entry.clone(),
            db: s.db,
            tracks: crate::families::tracking::script_keys(s, keys),
            command,
            report: !s.in_exec,
        }
    }

    /// Counts a run of the script of `label` that took `took` as its
    /// command's time (see `families::slowlog`) if the run `stands`; an
    /// attempt given up (run again holding every shard, or stopped by
    /// shutdown) is only left out of the time of the command its thread
    /// was timing, so the command is not logged twice.
    fn ran(&self, server: &Server, label: &Label, took: std::time::Duration, stands: bool) {
        if !stands {
            crate::families::slowlog::timed_itself(took);
            return;
        }
        let run = (self.command, label.1.as_slice(), self.report);
        crate::families::slowlog::script_ran(server, run, &self.entry, took);
    }

    /// The session the script's commands run in.
    fn session(&self, server: &Arc<Server>) -> Session {
        let mut s = Session::for_script(server.clone(), self.entry.clone(), self.db);
        s.script_tracks = self.tracks.clone();
        s
    }
}

/// Where the script of `label` (a command whose declared keys are its
/// arguments 3 to `split`) runs for the client of `s`: inside the shard of
/// its declared keys when they are all on one shard and the script has not
/// been seen to reach other shards, else as a plan holding every shard
/// (see `Action::Script`).
pub fn dispatch(
    s: &Session,
    function: bool,
    label: Label,
    split: usize,
    body: impl Fn(&ScriptVm, &mut dyn Host) -> Reply + Clone + Send + 'static,
) -> Action {
    let server = s.server.clone();
    let declared = &label.1[3..split];
    // The label holds the command as the client sent it.
    let command = command::lookup(&label.1[0]).expect("a script's command is known");
    let caller = Caller::of(s, command, declared);
    let one = one_shard(&server, declared);
    let seen_nonlocal = server
        .nonlocal_scripts
        .contains_key(&*nonlocal_id(function, &label.0));
    let Some(shard) = one.filter(|_| !seen_nonlocal) else {
        return run_script(server, body, caller, label);
    };
    let slow: crate::net::session::SlowScript = {
        let (server, body, caller, label) =
            (server.clone(), body.clone(), caller.clone(), label.clone());
        Box::new(move || run_script(server, body, caller, label))
    };
    let fell_back = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = fell_back.clone();
    let f: crate::shard::WriteFn = Box::new(move |w| {
        w.begin_undo();
        let vm = server.scripts.shard(shard);
        let mut host = LocalHost {
            w,
            shard,
            session: caller.session(&server),
            run: vm.kill_handle(),
            nonlocal: false,
        };
        let (reply, took) = run_labelled(vm, label.clone(), |vm| body(vm, &mut host));
        let nonlocal = host.nonlocal;
        let aborted = host.run.take_abort();
        caller.ran(&server, &label, took, !(nonlocal || aborted));
        if nonlocal || aborted {
            // Nothing of this attempt may stay.
            w.rollback()?;
            if nonlocal {
                let id = nonlocal_id(function, &label.0).into_owned();
                server.nonlocal_scripts.insert(id, ());
                flag.store(true, Ordering::Release);
            }
            return Ok(Reply::err("script stopped by shutdown"));
        }
        w.end_undo();
        Ok(reply)
    });
    Action::Script {
        shard,
        f,
        fell_back,
        slow,
    }
}

/// How [`Server::nonlocal_scripts`] names a script (by its sha) or a
/// function (apart from scripts, whatever its name).
fn nonlocal_id(function: bool, name: &str) -> std::borrow::Cow<'_, str> {
    if function {
        format!("function:{name}").into()
    } else {
        name.into()
    }
}

/// What a script's `redis.call` runs through inside one shard's batch.
struct LocalHost<'a, 'w> {
    w: &'a mut crate::storage::WriteCtx<'w>,
    shard: usize,
    session: Session,
    /// The state's handle: marks writes, kills the attempt.
    run: KillHandle,
    /// A command needed another shard: the attempt is given up.
    nonlocal: bool,
}

/// Runs `body` on `vm`, shown by FUNCTION STATS as `label` meanwhile; its
/// reply, and how long it ran.
fn run_labelled(
    vm: &ScriptVm,
    label: Label,
    body: impl FnOnce(&ScriptVm) -> Reply,
) -> (Reply, std::time::Duration) {
    let handle = vm.kill_handle();
    // In a shard's batch the run begins where the item before it ended,
    // and its end is where the next one begins: one clock read a script
    // (see `slowlog::run_began`).
    let began = crate::families::slowlog::run_began();
    handle.set_running(Some((label, began.0)));
    let reply = body(vm);
    handle.set_running(None);
    (reply, crate::families::slowlog::run_took(began))
}

/// Cluster mode's checks before a script runs (Redis's
/// scriptPrepareForRun and the slot rule of scriptVerifyClusterState): a
/// `no-cluster` script is refused; a script with a shebang and without
/// `allow-cross-slot-keys` may only use one slot, its declared keys' (or
/// the first one it uses). Scripts without a shebang may cross slots.
fn begin_in_cluster(session: &mut Session, flags: ScriptFlags, keys: &[Bytes]) -> Option<Reply> {
    session.server.cluster.as_ref()?;
    if flags.no_cluster {
        return Some(Reply::err(
            "Can not run script on cluster, 'no-cluster' flag is set.",
        ));
    }
    session.script_slot = (!flags.eval_compat && !flags.allow_cross_slot_keys)
        .then(|| keys.first().map(|k| crate::cluster::key_slot(k)));
    None
}

/// Whether the scripts of either host may call commands flagged
/// `noscript` (DEBUG SET-DISABLE-DENY-SCRIPTS).
fn noscript_allowed(session: &Session) -> bool {
    session.server.deny_scripts_disabled.load(Ordering::Relaxed)
}

impl Host for LocalHost<'_, '_> {
    fn allows_noscript(&mut self) -> bool {
        noscript_allowed(&self.session)
    }

    fn begin(&mut self, flags: ScriptFlags, keys: &[Bytes]) -> Option<Reply> {
        begin_in_cluster(&mut self.session, flags, keys)
    }

    fn acl_check(&mut self, argv: &[Bytes]) -> bool {
        crate::acl::check::allows(&self.session, argv)
    }

    fn call(&mut self, spec: &'static CommandSpec, argv: Vec<Bytes>, resp3: bool) -> Reply {
        let (counted, action) = script_action(&mut self.session, spec, argv, resp3, &self.run);
        let out = match action.into_shard_op(&self.session.server) {
            // Each command counts its own changes, as alone.
            Ok((shard, f)) if shard == self.shard || shard == ANY_SHARD => self.w.counting(f),
            Err(Action::Reply(r)) => Ok(r),
            _ => {
                // Give up at once, whatever the script does with the
                // error: the attempt is taken back and run holding every
                // shard.
                self.nonlocal = true;
                self.run.kill();
                return Reply::err("script needs other shards");
            }
        };
        match out {
            Ok(r) => {
                ran(&self.session.server, counted);
                r
            }
            Err(e) => {
                // A storage failure: the attempt is given up too; the plan
                // form will meet it again and report it.
                self.nonlocal = true;
                self.run.kill();
                Reply::err(e)
            }
        }
    }
}

/// Runs `body` (which runs the Lua with a host) as one plan holding every
/// shard, on a blocking thread, on the plan state.
fn run_script(
    server: Arc<Server>,
    body: impl FnOnce(&ScriptVm, &mut dyn Host) -> Reply + Send + 'static,
    caller: Caller,
    label: Label,
) -> Action {
    let ids: Vec<usize> = (0..server.shards.len()).collect();
    crate::net::atomic::blocking_plan(ids, "script", move |at| {
        let vm = server.scripts.plan();
        let mut host = ScriptHost {
            at,
            session: caller.session(&server),
            run: vm.kill_handle(),
            failure: None,
        };
        let (reply, took) = run_labelled(vm, label.clone(), |vm| body(vm, &mut host));
        let aborted = host.run.take_abort();
        caller.ran(&server, &label, took, host.failure.is_none() && !aborted);
        if let Some(e) = host.failure {
            return Err(e);
        }
        // Stopped by SHUTDOWN NOSAVE: none of it may stay.
        if aborted {
            return Err(CoordError::Store(StoreError::Internal(
                "script stopped by shutdown".into(),
            )));
        }
        Ok(Ok(reply))
    })
}

/// What a script's `redis.call` runs through.
struct ScriptHost<'a> {
    at: &'a Atomic,
    /// The script's own session: its database (SELECT inside a script does
    /// not change the caller's) and protocol.
    session: Session,
    /// The plan state's handle: marks writes.
    run: KillHandle,
    /// A storage failure: the whole script rolls back.
    failure: Option<CoordError>,
}

/// The action of a command a script calls (`spec`, found by the VM), built
/// as a client's command would be, in the script's session, and the spec
/// its call counts as once it has run (`None`: refused, not counted); a
/// write marks the script as having written (UNKILLABLE).
fn script_action(
    session: &mut Session,
    spec: &'static CommandSpec,
    argv: Vec<Bytes>,
    resp3: bool,
    run: &KillHandle,
) -> (Option<&'static CommandSpec>, Action) {
    let args = Args::new(argv);
    let counted = command::call_spec(spec, &args).unwrap_or(spec);
    if let Some(r) = crate::acl::check::script_refusal(session, counted, &args) {
        return (None, r.into());
    }
    let server = session.server.clone();
    // A read-only replica refuses a script's writes as its clients'.
    if counted.has(flag::WRITE) && server.replication.refuses_writes(&server) {
        return (
            None,
            Reply::Error(crate::replication::READONLY.into()).into(),
        );
    }
    // A script without a shebang meets NOREPLICAS at its first write (one
    // that has written already goes on: it cannot be undone).
    if counted.has(flag::WRITE) && !run.wrote() {
        if let Some(r) = server.writes_refused() {
            return (None, r.into());
        }
    }
    if let Some(cluster) = &server.cluster {
        let refused =
            crate::cluster::routing::check_in_script(&server, cluster, (counted, args.all()));
        if let Some(r) = refused {
            return (None, r.into());
        }
        // One slot per script unless it may cross them.
        if let Some(allowed) = &mut session.script_slot {
            let used = counted
                .routing_key_positions(args.all())
                .first()
                .map(|&i| crate::cluster::key_slot(args.get(i)));
            match (*allowed, used) {
                (Some(a), Some(u)) if a != u => {
                    let r = Reply::err(
                        "Script attempted to access keys that do not hash to the same slot",
                    );
                    return (None, r.into());
                }
                (None, Some(u)) => *allowed = Some(u),
                _ => {}
            }
        }
    }
    if counted.has(flag::WRITE) {
        run.mark_wrote();
    }
    if counted.has(flag::READONLY) {
        if let Some(keys) = session.script_tracks.take() {
            server.pubsub.tracking.remember_all(session.entry.id, &keys);
        }
    }
    session.resp3 = resp3;
    let monitors = &server.pubsub.monitors;
    if monitors.active() {
        monitors.feed(counted, session.db, "lua", args.all());
    }
    crate::families::slowlog::script_call(&server, counted, args.all());
    (Some(counted), (spec.handler)(session, args))
}

/// Counts a call a script made (`counted`, from [`script_action`]) that
/// has run. It is not timed alone (two clock reads a call were 1.5% of an
/// EVALSHA's time): its time is the script's.
fn ran(server: &Server, counted: Option<&'static CommandSpec>) {
    if let Some(spec) = counted {
        server.record_call(spec, 0, true);
    }
}

impl Host for ScriptHost<'_> {
    fn allows_noscript(&mut self) -> bool {
        noscript_allowed(&self.session)
    }

    fn begin(&mut self, flags: ScriptFlags, keys: &[Bytes]) -> Option<Reply> {
        begin_in_cluster(&mut self.session, flags, keys)
    }

    fn acl_check(&mut self, argv: &[Bytes]) -> bool {
        crate::acl::check::allows(&self.session, argv)
    }

    fn call(&mut self, spec: &'static CommandSpec, argv: Vec<Bytes>, resp3: bool) -> Reply {
        if self.failure.is_some() {
            return Reply::err("storage failure earlier in this script");
        }
        let (counted, action) = script_action(&mut self.session, spec, argv, resp3, &self.run);
        match self.at.run(action, &self.session.server) {
            Ok(r) => {
                ran(&self.session.server, counted);
                r
            }
            Err(e) => {
                let r = Reply::err(&e);
                self.failure = Some(e);
                r
            }
        }
    }
}

/// Runs `f` with the engines on a blocking thread (a state's lock is held
/// for as long as a script runs on it; a connection thread never waits on
/// it).
pub fn with_engines(server: &Server, f: impl FnOnce(&Engines) -> Reply + Send + 'static) -> Action {
    let engines = server.scripts.clone();
    Action::Job(Box::pin(async move {
        tokio::task::spawn_blocking(move || f(&engines))
            .await
            .unwrap_or_else(|e| Reply::err(format!("script engine failed: {e}")))
    }))
}

/// SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP
pub fn script(s: &mut Session, a: Args) -> Action {
    let sub = a.get(1);
    if is(sub, "load") {
        let body = a.get(2).clone();
        // Compiled on the plan state (to check it), cached for every state.
        return with_engines(&s.server, move |e| match e.plan().load(&body) {
            Ok(sha) => Reply::bulk(sha),
            Err(r) => r,
        });
    }
    if is(sub, "exists") {
        let registry = s.server.scripts.registry();
        let found = a
            .from(2)
            .iter()
            .map(|sha| Reply::Int(registry.exists(&String::from_utf8_lossy(sha)) as i64))
            .collect();
        return Reply::Array(found).into();
    }
    if is(sub, "flush") {
        if !super::sync_or_async(a.from(2)) {
            return Reply::err("SCRIPT FLUSH only support SYNC|ASYNC option").into();
        }
        return with_engines(&s.server, |e| {
            e.flush_scripts();
            Reply::Ok
        });
    }
    if is(sub, "kill") {
        return kill_running(&s.server, true).into();
    }
    super::help_reply(&[
        "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "EXISTS <sha1> [<sha1> ...]",
        "    Return information about the existence of the scripts in the script cache.",
        "FLUSH [ASYNC|SYNC]",
        "    Flush the Lua scripts cache. Very dangerous on replicas.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the scripts cache.",
        "    * SYNC: Synchronously flush the scripts cache.",
        "KILL",
        "    Kill the currently executing Lua script.",
        "LOAD <script>",
        "    Load a script into the scripts cache without executing it.",
        "HELP",
        "    Prints this help.",
    ])
    .into()
}

/// BUSY while a script runs (EVAL) and while a function runs (FCALL).
const BUSY_SCRIPT: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";

/// SCRIPT KILL (`eval`) and FUNCTION KILL: stops what runs, unless it has
/// written, or is of the other kind. When scripts run on several shards at
/// once, this is about the one that has run longest (see `Engines`).
pub fn kill_running(server: &Server, eval: bool) -> Reply {
    let Some(handle) = server.scripts.longest_running() else {
        return Reply::Error("NOTBUSY No scripts in execution right now.".into());
    };
    if handle.wrote() {
        return Reply::Error(
            "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command."
                .into(),
        );
    }
    match (eval, handle.is_function()) {
        (true, true) => return Reply::Error(BUSY_FUNCTION.into()),
        (false, false) => return Reply::Error(BUSY_SCRIPT.into()),
        _ => {}
    }
    handle.kill();
    Reply::Ok
}

/// Stops every running script for SHUTDOWN, whatever it wrote: their
/// writes are rolled back with them.
pub fn abort_for_shutdown(server: &Server) {
    for handle in server.scripts.handles() {
        handle.abort();
    }
}

/// The BUSY reply a command that arrived at `now` gets while a script
/// (any, on any shard) has run longer than `busy-reply-threshold`, unless
/// it is allowed then (`allow_busy`).
pub fn busy(server: &Server, spec: &command::CommandSpec, now: Instant) -> Option<Reply> {
    // Asked of every command: the cheap test, whether a script runs at
    // all, goes first.
    if !server.scripts.running() || spec.has(flag::ALLOW_BUSY) {
        return None;
    }
    busy_reply_at(server, now)
}

/// The BUSY error while a script or function runs past
/// `busy-reply-threshold`, whatever the command.
pub fn busy_reply(server: &Server) -> Option<Reply> {
    busy_reply_at(server, Instant::now())
}

/// [`busy_reply`] as of `now`. Under scripts at pipeline 16 nearly every
/// command finds one running on some shard: the command's own start
/// serves as the clock, and the scripts' starts are read without a lock.
fn busy_reply_at(server: &Server, now: Instant) -> Option<Reply> {
    if !server.scripts.running() {
        return None;
    }
    let handle = server.scripts.longest_running()?;
    let elapsed = handle.elapsed_at(now)?;
    let threshold = server.busy_reply_threshold_ms();
    if elapsed.as_millis() < threshold as u128 {
        return None;
    }
    Some(Reply::Error(if handle.is_function() {
        BUSY_FUNCTION.into()
    } else {
        BUSY_SCRIPT.into()
    }))
}

/// Whether EVAL, EVALSHA or FCALL may write (what CLIENT PAUSE WRITE holds
/// back, as Redis judges it from the script's flags): every script but one
/// declaring `no-writes`. A script or function not found may write: the
/// call waits, then fails as it would have.
pub fn may_write(server: &Server, name: &str, args: &Args) -> bool {
    !declared_flags(server, name, args).is_some_and(|f| f.no_writes)
}

/// Whether EVAL, EVALSHA, FCALL or a read-only form is a write command
/// for the checks made before it runs (Redis's evalGetCommandFlags and
/// fcallGetCommandFlags): a script with a shebang, or a function, that
/// does not declare `no-writes`. A script without a shebang is not: each
/// write it calls is checked as it comes. One not found is not either.
pub fn declares_writes(server: &Server, name: &str, args: &Args) -> bool {
    declared_flags(server, name, args).is_some_and(|f| !f.eval_compat && !f.no_writes)
}

/// The flags of the script or function a call names: an EVAL's from its
/// body, an EVALSHA's and an FCALL's from the cache and the libraries.
fn declared_flags(server: &Server, name: &str, args: &Args) -> Option<ScriptFlags> {
    let registry = server.scripts.registry();
    match name {
        "eval" | "eval_ro" => crate::scripting::script_flags(args.get(1)),
        "evalsha" | "evalsha_ro" => registry.flags(&String::from_utf8_lossy(args.get(1))),
        "fcall" | "fcall_ro" => registry.function_flags(&String::from_utf8_lossy(args.get(1))),
        _ => None,
    }
}
