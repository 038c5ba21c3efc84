//! The Lua state: the sandbox, the `redis` API, and running scripts.
//!
//! Redis 7.0 patches its Lua to mark tables read-only; stock Lua 5.1 cannot,
//! so the global table and every library table are empty proxies whose
//! metatables read through to the real tables and refuse writes. The
//! functions that would see through a proxy (`rawset`, `rawget`, `next`,
//! `pairs`, `ipairs`, `setmetatable`) are wrapped to act on the real table or
//! refuse. The proxy of the global table is the state's global table, so
//! chunks from `loadstring` see it too.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use mlua::{
    chunk::ChunkMode, Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value,
    VmState,
};
use parking_lot::Mutex;

use super::convert::{self, as_number, fmt_g, reply_to_lua};
use super::registry::Registry;
use super::{sha1::sha1_hex, shebang, Host, KillHandle, KillState, ScriptFlags};
use crate::command::flag;
use crate::command::table::{self, CommandSpec, LastLookup};
use crate::protocol::reply::Reply;

/// Chunk name of the engine's own Lua code: its frames are skipped when an
/// error is located in the user's code.
pub(crate) const INTERNAL: &str = "=cairn";

/// How often (in VM instructions) the kill flag is checked, as Redis's hook
/// does: rare enough to cost nothing measurable.
const HOOK_EVERY: u32 = 100_000;

/// How long FUNCTION LOAD may run library code, as in Redis.
const LOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);
/// How long a script runs on a connection thread before that thread's
/// other connections are handed to another (see `release_worker`).
const HAND_OFF_AFTER: std::time::Duration = std::time::Duration::from_millis(10);
/// How often a long script tries that hand-off again.
const HAND_OFF_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// The engine's own Lua code, run once at start-up: removes what Redis
/// removes, wraps `pcall`/`xpcall`/`coroutine.resume`/`loadstring`, and
/// installs the read-only proxies. Receives the real global table and a
/// table of Rust helpers; returns the global proxy and the two runners.
const SETUP: &str = r#"
local G, R = ...
local error, type, tostring, setmetatable, getmetatable, rawget, rawset, next, pairs, ipairs, pcall, xpcall, loadstring =
      error, type, tostring, setmetatable, getmetatable, rawget, rawset, next, pairs, ipairs, pcall, xpcall, loadstring

for _, name in ipairs({'dofile', 'loadfile', 'print', 'getfenv', 'setfenv', 'newproxy',
                       'module', 'require', 'package', 'os', 'io', 'debug'}) do
  G[name] = nil
end
G.redis, G.cjson, G.cmsgpack, G.bit, G.struct = R.redis, R.cjson, R.cmsgpack, R.bit, R.struct
G.math.random, G.math.randomseed = R.random, R.randomseed
G.__redis__err__handler = R.handler

-- Redis's pcall turns an error table {err=...} into its text, and a killed
-- script must not be able to swallow its kill.
local fix, xp_err, check_kill = R.fix_err, R.xp_err, R.check_kill
local function pcall_ret(ok, ...)
  if ok then return true, ... end
  return false, fix((...))
end
G.pcall = function(f, ...) return pcall_ret(pcall(f, ...)) end
local function xpcall_ret(ok, ...)
  if not ok then check_kill() end
  return ok, ...
end
G.xpcall = function(f, h)
  return xpcall_ret(xpcall(f, function(e) return h(xp_err(e)) end))
end
local resume = G.coroutine.resume
local function resume_ret(ok, ...)
  if ok then return true, ... end
  check_kill()
  return false, xp_err((...))
end
G.coroutine.resume = function(co, ...) return resume_ret(resume(co, ...)) end

-- Redis's Lua compiles any string as text: bytecode is a syntax error.
G.loadstring = function(s, name)
  if type(s) == 'string' and s:byte(1) == 27 then
    local _, e = loadstring('=', name or s)
    return nil, (e:gsub("'='$", "'char(27)'"))
  end
  return loadstring(s, name)
end

local real_of = {}
local function ro() error('Attempt to modify a readonly table', 2) end
local function view(mt_shown)
  local v = setmetatable({}, {__index = mt_shown, __newindex = ro, __metatable = false})
  real_of[v] = mt_shown
  return v
end
local function protect(t)
  local p = {}
  local mt = {__index = t, __newindex = ro, __metatable = view({__index = p, __newindex = ro})}
  setmetatable(p, mt)
  real_of[p] = t
  return p, mt
end
for _, name in ipairs({'string', 'table', 'math', 'coroutine', 'redis', 'cjson', 'cmsgpack', 'bit', 'struct'}) do
  G[name] = protect(G[name])
end
local smt = getmetatable('')
smt.__index = G.string
smt.__metatable = view({__index = G.string})

G.rawset = function(t, k, v)
  if real_of[t] then error('Attempt to modify a readonly table', 0) end
  return rawset(t, k, v)
end
G.setmetatable = function(t, m)
  if real_of[t] then error('Attempt to modify a readonly table', 0) end
  return setmetatable(t, m)
end
G.rawget = function(t, k) return rawget(real_of[t] or t, k) end
G.next = function(t, k) return next(real_of[t] or t, k) end
G.pairs = function(t)
  local r = real_of[t]
  if r then return next, r, nil end
  return pairs(t)
end
G.ipairs = function(t) return ipairs(real_of[t] or t) end

local env, env_mt = protect(G)
G._G = env
local function nonexistent(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end
setmetatable(G, {__index = nonexistent})

-- FUNCTION LOAD runs library code with only this API visible: globals
-- resolve through it instead of G while loading.
local load_redis = {register_function = R.register_function, log = R.redis.log,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REDIS_VERSION = R.redis.REDIS_VERSION, REDIS_VERSION_NUM = R.redis.REDIS_VERSION_NUM}
setmetatable(load_redis, {__index = nonexistent, __newindex = ro})
local load_api = setmetatable({redis = load_redis}, {__index = nonexistent})
local function set_loading(on)
  if on then env_mt.__index = load_api else env_mt.__index = G end
end

local function run_script(f, h) return xpcall(f, h) end
local function run_function(f, h, keys, args)
  return xpcall(function() return f(keys, args) end, h)
end
return env, run_script, run_function, set_loading
"#;

/// An error raised from Rust the way Redis raises its `{err=...}` tables:
/// the text is final (code included) and gets no position prefix.
#[derive(Debug)]
pub(crate) enum Raise {
    /// An error reply (from a command or the `redis` API).
    Reply(String),
    /// SCRIPT KILL / FUNCTION KILL.
    Killed(&'static str),
}

impl std::fmt::Display for Raise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Raise::Reply(s) => f.write_str(s),
            Raise::Killed(by) => write!(f, "ERR Script killed by user with {by}..."),
        }
    }
}

impl std::error::Error for Raise {}

/// Raises an error reply (`ERR ...` text included) from a Rust function.
pub(crate) fn raise(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::external(Raise::Reply(msg.into()))
}

/// A Lua error as `luaL_error` makes it: the caller's position, then `msg`.
pub(crate) fn lua_error(lua: &Lua, msg: impl std::fmt::Display) -> mlua::Error {
    mlua::Error::RuntimeError(format!("{}{msg}", where_(lua, 1)))
}

/// `bad argument #n to 'name' (msg)`, as `luaL_argerror` words it.
pub(crate) fn arg_error(lua: &Lua, n: usize, msg: impl std::fmt::Display) -> mlua::Error {
    let name = lua
        .inspect_stack(0, |d| d.names().name.map(|n| n.into_owned()))
        .flatten()
        .unwrap_or_else(|| "?".to_owned());
    lua_error(lua, format!("bad argument #{n} to '{name}' ({msg})"))
}

/// Argument `n` as a string, as `luaL_checklstring` takes it: a string, or
/// a number in its `tostring` form; anything else is the "string expected"
/// argument error.
pub(crate) fn check_string(lua: &Lua, v: Option<&Value>, n: usize) -> mlua::Result<Vec<u8>> {
    match v {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(v @ (Value::Integer(_) | Value::Number(_))) => Ok(super::convert::lua_number_string(
            super::convert::as_number(v).unwrap_or(0.0),
        )
        .into_bytes()),
        v => Err(arg_error(
            lua,
            n,
            format!("string expected, got {}", type_name(v)),
        )),
    }
}

/// `luaL_typename` of an argument (`no value` when it is missing).
pub(crate) fn type_name(v: Option<&Value>) -> &'static str {
    match v {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::Integer(_) | Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(_) => "userdata",
    }
}

/// `luaL_where`: "source:line: " for a Lua function at `level`, else "".
fn where_(lua: &Lua, level: usize) -> String {
    lua.inspect_stack(level, |d| match d.current_line() {
        Some(line) if line > 0 => {
            let src = d
                .source()
                .short_src
                .map(|s| s.into_owned())
                .unwrap_or_default();
            format!("{src}:{line}: ")
        }
        _ => String::new(),
    })
    .unwrap_or_default()
}

/// The root of an mlua error chain (callback errors wrap their cause).
fn root(e: &mlua::Error) -> &mlua::Error {
    match e {
        mlua::Error::CallbackError { cause, .. } => root(cause),
        e => e,
    }
}

/// The text a Lua-visible error carries (no "runtime error:" decoration).
fn error_message(e: &mlua::Error) -> String {
    match root(e) {
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::ExternalError(x) => x.to_string(),
        e => e.to_string(),
    }
}

fn raised(e: &mlua::Error) -> Option<&Raise> {
    match root(e) {
        mlua::Error::ExternalError(x) => x.downcast_ref::<Raise>(),
        _ => None,
    }
}

/// The server's host, valid only while `run` executes (see `HostGuard`).
struct HostPtr(*mut (dyn Host + 'static));

// SAFETY: the pointer is only dereferenced by redis.call on the thread that
// is inside `ScriptVm::run`, which holds the `&mut dyn Host` it came from.
unsafe impl Send for HostPtr {}

/// State of the script that runs now, shared with the Rust callbacks.
#[derive(Default)]
pub(crate) struct RunState {
    host: Option<HostPtr>,
    /// `redis.setresp(3)` was called.
    pub(crate) resp3: bool,
    /// Writes are refused (EVAL_RO, FCALL_RO, `no-writes`).
    ro: bool,
    /// Where the error handler located the error: (text, source, line).
    pub(crate) error: Option<(String, String, i64)>,
    /// Functions registered so far by the library being loaded.
    pub(crate) loading: Option<Vec<super::functions::Registered>>,
    /// The command scripts called last: a script calling one command over
    /// and over finds it with one comparison.
    last: LastLookup,
}

/// Clears the host pointer and the running flag however `run` ends.
struct HostGuard<'a> {
    run: &'a Mutex<RunState>,
    kill: &'a KillState,
}

impl Drop for HostGuard<'_> {
    fn drop(&mut self) {
        self.run.lock().host = None;
        self.kill.running.store(false, Ordering::Release);
        self.kill.started.clear();
    }
}

pub(crate) struct Script {
    /// The compiled chunk, in a registry slot (see `rawcall`).
    func: mlua::RegistryKey,
    flags: ScriptFlags,
}

/// What this state has compiled, and from which registry state.
#[derive(Default)]
pub(crate) struct Inner {
    /// Hashed with foldhash: every EVALSHA looks its sha up here, and the
    /// standard SipHash of 40 bytes cost twice foldhash's (the keys are
    /// SHA1 digests, which clients cannot choose to collide).
    scripts: HashMap<String, Script, foldhash::fast::RandomState>,
    /// The registry's epoch `scripts` were compiled under.
    epoch: u64,
    /// FUNCTION libraries by name.
    pub(crate) libraries: HashMap<String, super::functions::Library>,
    /// Function name, lower-cased (names are case-insensitive) -> its
    /// library's name.
    pub(crate) functions: HashMap<String, String>,
    /// The registry's generation `libraries` were loaded from.
    pub(crate) generation: u64,
}

/// One Lua state, sandboxed as Redis does, compiling scripts and loading
/// libraries from a [`Registry`] it may share with other states.
/// Thread-safe; entry points serialize on a lock.
pub struct ScriptVm {
    pub(crate) lua: Lua,
    pub(crate) inner: Mutex<Inner>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) run: Arc<Mutex<RunState>>,
    pub(crate) kill: Arc<KillState>,
    pub(crate) handler: Function,
    pub(crate) run_script: Function,
    pub(crate) run_function: Function,
    /// Switches global lookups to the FUNCTION LOAD API and back.
    pub(crate) set_loading: Function,
    /// Bytes the state used after its last script or change (INFO reads
    /// it without waiting for a running script).
    lua_bytes: std::sync::atomic::AtomicUsize,
    /// How scripts are run (see `rawcall`).
    raw: super::rawcall::RawCall,
}

impl ScriptVm {
    /// A fresh VM with the Redis 7.0 sandbox and libraries, and a registry
    /// of its own.
    pub fn new() -> mlua::Result<ScriptVm> {
        ScriptVm::with_registry(Arc::default())
    }

    /// A fresh VM sharing `registry` (its scripts and libraries) with others.
    pub fn with_registry(registry: Arc<Registry>) -> mlua::Result<ScriptVm> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        let run = Arc::new(Mutex::new(RunState::default()));
        let kill = Arc::new(KillState::default());
        let globals = lua.globals();

        let helpers = lua.create_table()?;
        helpers.set("redis", redis_table(&lua, &run)?)?;
        helpers.set("cjson", super::cjson::create(&lua)?)?;
        helpers.set("cmsgpack", super::cmsgpack::create(&lua)?)?;
        helpers.set("bit", super::bit::create(&lua)?)?;
        helpers.set("struct", super::structlib::create(&lua)?)?;
        let (random, randomseed) = random_functions(&lua)?;
        helpers.set("random", random)?;
        helpers.set("randomseed", randomseed)?;
        let handler = error_handler(&lua, &run)?;
        helpers.set("handler", handler.clone())?;
        let k = kill.clone();
        helpers.set(
            "fix_err",
            lua.create_function(move |lua, e: Value| {
                check_kill(&k)?;
                pcall_error(lua, e)
            })?,
        )?;
        let k = kill.clone();
        helpers.set(
            "xp_err",
            lua.create_function(move |lua, e: Value| {
                check_kill(&k)?;
                Ok(match e {
                    Value::Error(err) => match raised(&err) {
                        Some(Raise::Reply(m)) => convert::error_table(lua, m)?,
                        _ => Value::String(lua.create_string(error_message(&err))?),
                    },
                    other => other,
                })
            })?,
        )?;
        let k = kill.clone();
        helpers.set(
            "check_kill",
            lua.create_function(move |_, ()| check_kill(&k))?,
        )?;

        helpers.set(
            "register_function",
            super::functions::register_function(&lua, &run)?,
        )?;
        let (env, run_script, run_function, set_loading): (Table, Function, Function, Function) =
            lua.load(SETUP)
                .set_name(INTERNAL)
                .set_mode(ChunkMode::Text)
                .call((globals.clone(), helpers))?;
        lua.set_globals(env)?;

        let k = kill.clone();
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| {
                check_kill(&k)?;
                release_worker(&k);
                if k.loading.load(Ordering::Acquire)
                    && k.started.get().is_some_and(|t| t.elapsed() > LOAD_TIMEOUT)
                {
                    return Err(raise("ERR FUNCTION LOAD timeout"));
                }
                Ok(VmState::Continue)
            },
        )?;

        let raw = super::rawcall::RawCall::new(&lua, &globals, &run_script, &handler)?;
        Ok(ScriptVm {
            raw,
            lua,
            inner: Mutex::new(Inner::default()),
            registry,
            run,
            kill,
            handler,
            run_script,
            run_function,
            set_loading,
            lua_bytes: Default::default(),
        })
        .inspect(|vm| vm.note_memory())
    }

    /// The scripts and libraries this state compiles from.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Bytes the Lua state uses, as of its last script or change
    /// (`used_memory_lua`).
    pub fn lua_bytes(&self) -> usize {
        self.lua_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn note_memory(&self) {
        self.lua_bytes
            .store(self.lua.used_memory(), Ordering::Relaxed);
    }

    /// Parses shebang flags and compiles the body as a function, caching it
    /// in the registry; returns its sha1 hex (lowercase) or the exact Redis
    /// error reply. Loading a script this state has compiled only returns
    /// its id.
    pub fn load(&self, body: &[u8]) -> Result<String, Reply> {
        let sha = sha1_hex(body);
        let mut inner = self.inner.lock();
        self.drop_flushed_scripts(&mut inner);
        if !inner.scripts.contains_key(&sha) {
            let flags = self.compile_script(&mut inner, &sha, body)?;
            self.registry.insert_script(&sha, body, flags);
        }
        Ok(sha)
    }

    /// Compiles a script into this state (not into the registry: a body
    /// taken from the registry must not come back after a SCRIPT FLUSH).
    fn compile_script(
        &self,
        inner: &mut Inner,
        sha: &str,
        body: &[u8],
    ) -> Result<ScriptFlags, Reply> {
        let (flags, code) = match shebang::parse(body, false)? {
            Some(s) => (s.flags, &body[s.code_start..]),
            None => (
                ScriptFlags {
                    eval_compat: true,
                    ..ScriptFlags::default()
                },
                body,
            ),
        };
        let func = self
            .compile(code, "@user_script")
            .and_then(|f| self.lua.create_registry_value(f).map_err(|e| e.to_string()))
            .map_err(|e| Reply::err(format!("Error compiling script (new function): {e}")))?;
        inner.scripts.insert(sha.to_owned(), Script { func, flags });
        self.note_memory();
        Ok(flags)
    }

    /// Forgets what this state compiled before the last SCRIPT FLUSH.
    fn drop_flushed_scripts(&self, inner: &mut Inner) {
        let epoch = self.registry.epoch();
        if inner.epoch != epoch {
            inner.scripts.clear();
            inner.epoch = epoch;
            let _ = self.lua.gc_collect();
            self.note_memory();
        }
    }

    /// Compiles `code` as text (never bytecode) under `name`; the error is
    /// Lua's message, e.g. `user_script:1: '=' expected near 'end'`.
    pub(crate) fn compile(&self, code: &[u8], name: &str) -> Result<Function, String> {
        self.lua
            .load(code)
            .set_name(name)
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| match e {
                mlua::Error::SyntaxError { message, .. } => message,
                e => error_message(&e),
            })
    }

    /// SCRIPT FLUSH on this state's registry; this state forgets its
    /// scripts now, others before they next run one (or now, through
    /// [`ScriptVm::forget_flushed`]).
    pub fn flush(&self) {
        self.registry.flush_scripts();
        self.forget_flushed(true);
    }

    /// Frees what this state compiled before the last SCRIPT FLUSH: now,
    /// or, unless `wait`, before its next script when one runs now.
    pub fn forget_flushed(&self, wait: bool) {
        let inner = match wait {
            true => Some(self.inner.lock()),
            false => self.inner.try_lock(),
        };
        if let Some(mut inner) = inner {
            self.drop_flushed_scripts(&mut inner);
        }
    }

    /// Whether a script or function runs now (asked before every command:
    /// no handle is made for it).
    pub fn running(&self) -> bool {
        self.kill.running.load(std::sync::atomic::Ordering::Acquire)
    }

    /// A handle for SCRIPT KILL / FUNCTION KILL and BUSY decisions.
    pub fn kill_handle(&self) -> KillHandle {
        KillHandle {
            state: self.kill.clone(),
        }
    }

    /// Runs a cached script with KEYS/ARGV and returns its reply. `ro` is set
    /// for EVAL_RO/EVALSHA_RO; a `no-writes` script is read-only anyway, and
    /// a script with a shebang but without `no-writes` is refused under
    /// `ro` as Redis refuses it. Unknown sha: the NOSCRIPT error.
    pub fn run(
        &self,
        sha: &str,
        keys: &[Bytes],
        argv: &[Bytes],
        ro: bool,
        host: &mut dyn Host,
    ) -> Reply {
        let lower;
        let sha = if sha.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = sha.to_ascii_lowercase();
            &lower
        } else {
            sha
        };
        let mut inner = self.inner.lock();
        self.drop_flushed_scripts(&mut inner);
        if !inner.scripts.contains_key(sha) {
            let Some(cached) = self.registry.script(sha) else {
                return Reply::Error("NOSCRIPT No matching script. Please use EVAL.".to_owned());
            };
            if let Err(r) = self.compile_script(&mut inner, sha, &cached.body) {
                return r;
            }
        }
        let script = &inner.scripts[sha];
        if ro && !script.flags.eval_compat && !script.flags.no_writes {
            return Reply::err("Can not execute a script with write flag using *_ro command.");
        }
        let ro = ro || script.flags.no_writes;
        if let Some(refused) = host.begin(script.flags, keys) {
            return refused;
        }
        let func = &script.func;
        // SAFETY: `inner` is held, so no other thread is in the state, and
        // this is not a callback; the script was compiled here.
        self.execute(sha, false, ro, host, || unsafe {
            self.raw.run(&self.lua, func, keys, argv)
        })
    }

    /// Two arrays of strings (a function's keys and arguments), made in
    /// one protected call: through mlua's safe API every table and string
    /// is a protected call of its own.
    pub(crate) fn string_arrays(&self, a: &[Bytes], b: &[Bytes]) -> mlua::Result<(Table, Table)> {
        // SAFETY: see `push_array`; two arrays and one element take three
        // of the LUA_MINSTACK slots a C function is given.
        unsafe {
            self.lua.exec_raw((), |state| {
                push_array(state, a);
                push_array(state, b);
            })
        }
    }

    /// Runs Lua under the error handler with `host` installed; `name` goes
    /// into error texts ("script: <name>, on ...").
    pub(crate) fn execute(
        &self,
        name: &str,
        is_function: bool,
        ro: bool,
        host: &mut dyn Host,
        call: impl FnOnce() -> mlua::Result<(bool, Value)>,
    ) -> Reply {
        // SAFETY: the lifetime is erased only to park the pointer in
        // RunState; HostGuard clears it before this function returns, and
        // only this thread runs Lua meanwhile (the caller holds `inner`).
        let ptr: *mut (dyn Host + '_) = host;
        let ptr: *mut (dyn Host + 'static) = unsafe { std::mem::transmute(ptr) };
        {
            let mut st = self.run.lock();
            st.host = Some(HostPtr(ptr));
            st.resp3 = false;
            st.ro = ro;
            st.error = None;
        }
        self.kill.kill.store(false, Ordering::Release);
        self.kill.wrote.store(false, Ordering::Release);
        self.kill.is_function.store(is_function, Ordering::Release);
        self.kill.start_clock();
        self.kill.running.store(true, Ordering::Release);
        let _guard = HostGuard {
            run: &self.run,
            kill: &self.kill,
        };
        let result = call();
        self.note_memory();
        let mut st = self.run.lock();
        match result {
            Ok((true, v)) => convert::lua_to_reply(&v, st.resp3),
            Ok((false, _)) => match st.error.take() {
                Some((msg, source, line)) => {
                    Reply::Error(format!("{msg} script: {name}, on {source}:{line}."))
                }
                None => Reply::err("Error running script"),
            },
            Err(e) => Reply::err(error_message(&e)),
        }
    }
}

/// Pushes an array of `items` as Lua strings.
///
/// # Safety
/// `state` is a Lua state inside a protected call (`Lua::exec_raw`, or
/// `rawcall`'s), so a memory error Lua raises here unwinds to that call,
/// with two free stack slots.
pub(super) unsafe fn push_array(state: *mut mlua::ffi::lua_State, items: &[Bytes]) {
    use mlua::ffi;
    ffi::lua_createtable(state, items.len().try_into().unwrap_or(0), 0);
    for (i, item) in (1..).zip(items) {
        ffi::lua_pushlstring(state, item.as_ptr().cast(), item.len());
        ffi::lua_rawseti(state, -2, i);
    }
}

/// A script may run on a thread of the connections' tokio runtime (a write
/// that a connection runs itself while its shard is free: `shard::actor`).
/// Once it has run for [`HAND_OFF_AFTER`], the thread gives its other work
/// to another thread (`block_in_place`) and goes on with the script alone,
/// so a script that runs until SCRIPT KILL never holds the connections that
/// would send the KILL. Elsewhere (a shard's actor, a current-thread
/// runtime) there is nothing to hand over.
///
/// The thread taking the work over may not have started when the pause
/// ends (with every core busy running scripts, it often has not), and then
/// this thread keeps it: so the hand-off is tried again, but only every
/// [`HAND_OFF_RETRY`], not in every hook of a long script (each try
/// pauses the script).
fn release_worker(kill: &KillState) {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let Some(ran) = kill.started.get().map(|t| t.elapsed()) else {
        return;
    };
    let ms = ran.as_millis() as u64;
    let last = kill.released_ms.load(Ordering::Acquire);
    if ran <= HAND_OFF_AFTER || (last != 0 && ms < last + HAND_OFF_RETRY.as_millis() as u64) {
        return;
    }
    kill.released_ms.store(ms, Ordering::Release);
    if Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread) {
        // The pause lets the thread that takes the work over start first.
        tokio::task::block_in_place(|| std::thread::sleep(std::time::Duration::from_micros(200)));
    }
}

fn check_kill(kill: &KillState) -> mlua::Result<()> {
    if kill.kill.load(Ordering::Acquire) {
        let by = if kill.is_function.load(Ordering::Acquire) {
            "FUNCTION KILL"
        } else {
            "SCRIPT KILL"
        };
        return Err(mlua::Error::external(Raise::Killed(by)));
    }
    Ok(())
}

/// What the script's `pcall` returns for a caught error: Redis replaces an
/// error table by its `err` field; Rust errors become their text.
fn pcall_error(lua: &Lua, e: Value) -> mlua::Result<Value> {
    Ok(match e {
        Value::Error(err) => Value::String(lua.create_string(match raised(&err) {
            Some(r) => r.to_string(),
            None => error_message(&err),
        })?),
        Value::Table(t) => match t.get::<Value>("err")? {
            v @ (Value::String(_) | Value::Integer(_) | Value::Number(_)) => v,
            _ => Value::Table(t),
        },
        other => other,
    })
}

/// The handler every script runs under: records the error's text and the
/// user-code position Redis reports ("on @user_script:1.").
fn error_handler(lua: &Lua, run: &Arc<Mutex<RunState>>) -> mlua::Result<Function> {
    let run = run.clone();
    lua.create_function(move |lua, e: Value| {
        let msg = match &e {
            Value::Error(err) => match raised(err) {
                Some(r) => r.to_string(),
                None => format!("ERR {}", error_message(err)),
            },
            Value::Table(t) => match t.get::<Value>("err")? {
                Value::String(s) => s.to_string_lossy(),
                v @ (Value::Integer(_) | Value::Number(_)) => {
                    convert::lua_number_string(as_number(&v).unwrap_or(0.0))
                }
                _ => "ERR unknown error".to_owned(),
            },
            Value::String(s) => format!("ERR {}", s.to_string_lossy()),
            Value::Nil => "ERR nil".to_owned(),
            Value::Boolean(b) => format!("ERR {b}"),
            v @ (Value::Integer(_) | Value::Number(_)) => {
                format!(
                    "ERR {}",
                    convert::lua_number_string(as_number(v).unwrap_or(0.0))
                )
            }
            other => format!("ERR {}", type_name(Some(other))),
        };
        let mut found = (String::from("?"), 0i64);
        for level in 0.. {
            let frame = lua.inspect_stack(level, |d| {
                let src = d.source();
                let source = src.source.map(|s| s.into_owned()).unwrap_or_default();
                let line = d.current_line().map_or(-1, |l| l as i64);
                (src.what, source, line)
            });
            match frame {
                None => break,
                Some((what, source, line)) if what != "C" && source != INTERNAL => {
                    found = (source, line);
                    break;
                }
                Some(_) => {}
            }
        }
        run.lock().error = Some((msg, found.0, found.1));
        Ok(())
    })
}

/// The arguments of `redis.call` and friends, converted as Redis does:
/// strings as they are, numbers as `%.17g` (what Redis sends for
/// `redis.call('set', k, 0.1)`), anything else refused with Redis's error,
/// as is a call without arguments.
struct CallArgs(Result<Vec<Bytes>, String>);

const NO_ARGS: &str = "ERR Please specify at least one argument for this redis lib call";
const BAD_ARG: &str = "ERR Lua redis lib command arguments must be strings or integers";

impl mlua::FromLuaMulti for CallArgs {
    fn from_lua_multi(args: MultiValue, _: &Lua) -> mlua::Result<CallArgs> {
        if args.is_empty() {
            return Ok(CallArgs(Err(NO_ARGS.to_owned())));
        }
        let argv = args
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(Bytes::copy_from_slice(&s.as_bytes())),
                Value::Integer(_) | Value::Number(_) => {
                    Ok(Bytes::from(fmt_g(as_number(v).unwrap_or(0.0), 17)))
                }
                _ => Err(BAD_ARG.to_owned()),
            })
            .collect();
        Ok(CallArgs(argv))
    }

    /// The same, read straight off the stack. mlua's default makes each
    /// argument a `Value` first (a registry reference for a string), then
    /// reads the string back through it under mlua's lock: that was 4% of
    /// an EVALSHA calling one command. (This hook is hidden in mlua's
    /// docs; Cargo.lock holds the version, and a change to the hook fails
    /// to build.)
    unsafe fn from_stack_multi(
        n: std::ffi::c_int,
        lua: &mlua::state::RawLua,
    ) -> mlua::Result<CallArgs> {
        use mlua::ffi;
        if n == 0 {
            return Ok(CallArgs(Err(NO_ARGS.to_owned())));
        }
        // SAFETY: mlua calls this with the `n` arguments on top of the
        // stack of `state`; a string's bytes are copied while it is there,
        // and nothing is pushed or popped.
        let state = lua.state();
        let argv = (-n..0)
            .map(|i| match ffi::lua_type(state, i) {
                ffi::LUA_TSTRING => {
                    let mut len = 0;
                    let data = ffi::lua_tolstring(state, i, &mut len);
                    Ok(Bytes::copy_from_slice(std::slice::from_raw_parts(
                        data.cast(),
                        len,
                    )))
                }
                ffi::LUA_TNUMBER => Ok(Bytes::from(fmt_g(ffi::lua_tonumber(state, i), 17))),
                _ => Err(BAD_ARG.to_owned()),
            })
            .collect();
        Ok(CallArgs(argv))
    }
}

/// The command `argv` calls and the spec its checks go by: for a
/// container (CONFIG, OBJECT...) the subcommand's.
fn command_spec(
    last: &mut LastLookup,
    argv: &[Bytes],
) -> Option<(&'static CommandSpec, &'static CommandSpec)> {
    let spec = last.find(&argv[0])?;
    if argv.len() >= 2 && table::is_container(spec) {
        return Some((
            spec,
            table::subcommand_of(spec, &argv[1].to_ascii_lowercase())?,
        ));
    }
    Some((spec, spec))
}

/// Runs one `redis.call`/`redis.pcall`: checks as Redis does, then asks the
/// host. An error comes back as its reply text.
fn script_call(run: &Mutex<RunState>, args: CallArgs) -> Result<(Reply, bool), String> {
    let argv = args.0?;
    let mut st = run.lock();
    let (command, spec) = command_spec(&mut st.last, &argv)
        .ok_or_else(|| "ERR Unknown Redis command called from script".to_owned())?;
    if !spec.arity_ok(argv.len()) {
        return Err("ERR Wrong number of args calling Redis command from script".to_owned());
    }
    // Read-only scripts refuse what may replicate (PUBLISH, PFCOUNT's
    // cached cardinality) like writes, as Redis does.
    if st.ro && (spec.has(flag::WRITE) || spec.may_replicate()) {
        return Err("ERR Write commands are not allowed from read-only scripts.".to_owned());
    }
    let Some(HostPtr(ptr)) = st.host else {
        return Err("ERR redis.call is not available here".to_owned());
    };
    let resp3 = st.resp3;
    drop(st);
    // SAFETY: see HostPtr; the RunState lock is released so the host may
    // take as long as it needs.
    let host = unsafe { &mut *ptr };
    if spec.has(flag::NOSCRIPT) && !host.allows_noscript() {
        return Err("ERR This Redis command is not allowed from script".to_owned());
    }
    let reply = host.call(command, argv, resp3);
    Ok((reply, resp3))
}

/// Builds the `redis` table.
fn redis_table(lua: &Lua, run: &Arc<Mutex<RunState>>) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let r = run.clone();
    t.set(
        "call",
        lua.create_function(move |lua, args: CallArgs| match script_call(&r, args) {
            Ok((Reply::Error(e), _)) => Err(raise(e)),
            Ok((reply, resp3)) => reply_to_lua(lua, &reply, resp3),
            Err(e) => Err(raise(e)),
        })?,
    )?;
    let r = run.clone();
    t.set(
        "pcall",
        lua.create_function(move |lua, args: CallArgs| match script_call(&r, args) {
            Ok((reply, resp3)) => reply_to_lua(lua, &reply, resp3),
            Err(e) => convert::error_table(lua, &e),
        })?,
    )?;
    t.set(
        "sha1hex",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(raise("ERR wrong number of arguments"));
            }
            let data = match lua.coerce_string(args[0].clone()) {
                Ok(Some(s)) => s.as_bytes().to_vec(),
                _ => Vec::new(),
            };
            Ok(sha1_hex(&data))
        })?,
    )?;
    t.set(
        "error_reply",
        lua.create_function(|lua, args: MultiValue| match (args.len(), args.front()) {
            (1, Some(Value::String(s))) => {
                let s = s.to_string_lossy();
                let s = s.strip_prefix('-').unwrap_or(&s);
                // Without a space there is no error code: Redis adds ERR.
                let text = if s.contains(' ') {
                    s.to_owned()
                } else {
                    format!("ERR {s}")
                };
                convert::error_table(lua, &text)
            }
            _ => convert::error_table(lua, "ERR wrong number or type of arguments"),
        })?,
    )?;
    t.set(
        "status_reply",
        lua.create_function(|lua, args: MultiValue| match (args.len(), args.front()) {
            (1, Some(Value::String(s))) => {
                let t = lua.create_table()?;
                t.raw_set("ok", s.clone())?;
                Ok(Value::Table(t))
            }
            _ => convert::error_table(lua, "ERR wrong number or type of arguments"),
        })?,
    )?;
    t.set(
        "log",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() < 2 {
                return Err(raise("ERR redis.log() requires two arguments or more."));
            }
            let level = match lua.coerce_number(args[0].clone()) {
                Ok(Some(n)) => n,
                _ => return Err(raise("ERR First argument must be a number (log level).")),
            };
            if !(0.0..=3.0).contains(&level) || level.fract() != 0.0 {
                return Err(raise("ERR Invalid debug level."));
            }
            let parts: Vec<String> = args
                .iter()
                .skip(1)
                .map(|v| match v {
                    Value::String(s) => s.to_string_lossy(),
                    Value::Integer(_) | Value::Number(_) => {
                        convert::lua_number_string(as_number(v).unwrap_or(0.0))
                    }
                    _ => String::new(),
                })
                .collect();
            let msg = parts.join(" ");
            // Redis's four levels on tracing's, as `loglevel` maps them
            // (src/logging.rs).
            match level as i64 {
                0 => tracing::trace!(target: "lua", "{msg}"),
                1 => tracing::debug!(target: "lua", "{msg}"),
                2 => tracing::info!(target: "lua", "{msg}"),
                _ => tracing::warn!(target: "lua", "{msg}"),
            }
            Ok(())
        })?,
    )?;
    let r = run.clone();
    t.set(
        "setresp",
        lua.create_function(move |lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(raise("ERR redis.setresp() requires one argument."));
            }
            match lua.coerce_number(args[0].clone()) {
                Ok(Some(n)) if n == 2.0 || n == 3.0 => {
                    r.lock().resp3 = n == 3.0;
                    Ok(())
                }
                _ => Err(raise("ERR RESP version must be 2 or 3.")),
            }
        })?,
    )?;
    t.set(
        "set_repl",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(raise("ERR redis.set_repl() requires two arguments."));
            }
            let flags = lua.coerce_number(args[0].clone()).ok().flatten().unwrap_or(0.0) as i64;
            if flags & !3 != 0 {
                return Err(raise(
                    "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
                ));
            }
            // Effects replication is all cairn has: the flags change nothing.
            Ok(())
        })?,
    )?;
    t.set(
        "replicate_commands",
        lua.create_function(|_, _: MultiValue| Ok(true))?,
    )?;
    t.set(
        "breakpoint",
        lua.create_function(|_, _: MultiValue| Ok(false))?,
    )?;
    t.set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    let r = run.clone();
    t.set(
        "acl_check_cmd",
        lua.create_function(move |_, args: CallArgs| {
            let argv = args.0.map_err(raise)?;
            let mut st = r.lock();
            if command_spec(&mut st.last, &argv).is_none() {
                return Err(raise("ERR Invalid command passed to redis.acl_check_cmd()"));
            }
            let ptr = st.host.as_ref().map(|h| h.0);
            drop(st);
            Ok(match ptr {
                // SAFETY: see HostPtr.
                Some(p) => unsafe { (*p).acl_check(&argv) },
                None => true,
            })
        })?,
    )?;
    t.set("REDIS_VERSION", "7.0.15")?;
    t.set("REDIS_VERSION_NUM", 0x07000f)?;
    for (name, v) in [
        ("LOG_DEBUG", 0),
        ("LOG_VERBOSE", 1),
        ("LOG_NOTICE", 2),
        ("LOG_WARNING", 3),
        ("REPL_NONE", 0),
        ("REPL_AOF", 1),
        ("REPL_SLAVE", 2),
        ("REPL_REPLICA", 2),
        ("REPL_ALL", 3),
    ] {
        t.set(name, v)?;
    }
    Ok(t)
}

/// `math.random` / `math.randomseed` on Redis's generator (the 48-bit
/// linear congruential one of `drand48`), so seeded sequences match Redis.
fn random_functions(lua: &Lua) -> mlua::Result<(Function, Function)> {
    const A: u64 = 0x5DEECE66D;
    const MASK: u64 = (1 << 48) - 1;
    let seed = |s: i32| (((s as u32 as u64) << 16) | 0x330E) & MASK;
    let state = Arc::new(Mutex::new(seed(0)));
    let st = state.clone();
    let random = lua.create_function(move |lua, args: MultiValue| {
        let next = {
            let mut x = st.lock();
            *x = (x.wrapping_mul(A).wrapping_add(0xB)) & MASK;
            (*x >> 17) as i64
        };
        let max = i32::MAX as i64;
        let r = (next % max) as f64 / max as f64;
        let int_arg = |i: usize| -> mlua::Result<i64> {
            match as_number(&args[i]).or_else(|| lua.coerce_number(args[i].clone()).ok().flatten())
            {
                Some(n) => Ok(n as i64),
                None => Err(arg_error(
                    lua,
                    i + 1,
                    format!("number expected, got {}", type_name(args.get(i))),
                )),
            }
        };
        match args.len() {
            0 => Ok(r),
            1 => {
                let u = int_arg(0)?;
                if u < 1 {
                    return Err(arg_error(lua, 1, "interval is empty"));
                }
                Ok((r * u as f64).floor() + 1.0)
            }
            2 => {
                let (l, u) = (int_arg(0)?, int_arg(1)?);
                if l > u {
                    return Err(arg_error(lua, 2, "interval is empty"));
                }
                Ok((r * (u - l + 1) as f64).floor() + l as f64)
            }
            _ => Err(lua_error(lua, "wrong number of arguments")),
        }
    })?;
    let randomseed = lua.create_function(move |lua, args: MultiValue| {
        let n = args
            .front()
            .and_then(as_number)
            .or_else(|| {
                args.front()
                    .and_then(|v| lua.coerce_number(v.clone()).ok().flatten())
            })
            .ok_or_else(|| {
                arg_error(
                    lua,
                    1,
                    format!("number expected, got {}", type_name(args.front())),
                )
            })?;
        *state.lock() = seed(n as i64 as i32);
        Ok(())
    })?;
    Ok((random, randomseed))
}
