//! FUNCTION LOAD libraries and FCALL, on the same VM as scripts.
//!
//! Library code runs once at load time with only `redis.register_function`,
//! `redis.log` and the version/log constants visible (global lookups go to
//! a load-time API table); the callbacks it registers later run with the
//! normal script globals.
//!
//! A change is made on one state ([`ScriptVm::edit_libraries`]) and
//! published whole to the registry; every other state runs the published
//! code again before its next FCALL (see `registry`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use mlua::{Function, Lua, MultiValue, Value};
use parking_lot::Mutex;

use super::convert::{as_number, lua_number_string};
use super::vm::{raise, Inner, RunState, ScriptVm};
use super::{shebang, Host, ScriptFlags};
use crate::protocol::reply::Reply;

/// One function as `redis.register_function` recorded it.
pub(crate) struct Registered {
    name: String,
    func: Function,
    flags: ScriptFlags,
    description: Option<String>,
}

/// A loaded library (kept by the VM).
pub(crate) struct Library {
    code: Bytes,
    functions: Vec<Registered>,
}

/// One function of a library, as FUNCTION LIST shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionInfo {
    /// Function name.
    pub name: String,
    /// `description` given at registration, if any.
    pub description: Option<String>,
    /// Its flags (`eval_compat` is always false).
    pub flags: ScriptFlags,
}

/// A library as FUNCTION LOAD created it and FUNCTION LIST shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LibraryInfo {
    /// Library name.
    pub name: String,
    /// The code given to FUNCTION LOAD (for WITHCODE and DUMP).
    pub code: Bytes,
    /// Its functions, in registration order.
    pub functions: Vec<FunctionInfo>,
}

const BAD_NAME: &str =
    "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// `redis.register_function`, available while a library loads.
pub(crate) fn register_function(lua: &Lua, run: &Arc<Mutex<RunState>>) -> mlua::Result<Function> {
    let run = run.clone();
    lua.create_function(move |lua, args: MultiValue| {
        let as_text = |v: &Value| -> Option<String> {
            match v {
                Value::String(s) => Some(s.to_string_lossy()),
                Value::Integer(_) | Value::Number(_) => {
                    Some(lua_number_string(as_number(v).unwrap_or(0.0)))
                }
                _ => None,
            }
        };
        let (name, func, flags, description) = match args.len() {
            2 => {
                let name = as_text(&args[0]).ok_or_else(|| {
                    raise("ERR first argument to redis.register_function must be a string")
                })?;
                let Value::Function(f) = &args[1] else {
                    return Err(raise(
                        "ERR second argument to redis.register_function must be a function",
                    ));
                };
                (name, f.clone(), ScriptFlags::default(), None)
            }
            1 => {
                let Value::Table(t) = &args[0] else {
                    return Err(raise("ERR calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments)."));
                };
                let (mut name, mut func, mut flags, mut description) =
                    (None, None, ScriptFlags::default(), None);
                for pair in t.pairs::<Value, Value>() {
                    let (k, v) = pair?;
                    let key = match &k {
                        Value::String(s) => s.as_bytes().to_vec(),
                        _ => Vec::new(),
                    };
                    match key.as_slice() {
                        b"function_name" => {
                            name = Some(as_text(&v).ok_or_else(|| {
                                raise("ERR function_name argument given to redis.register_function must be a string")
                            })?)
                        }
                        b"description" => {
                            description = Some(as_text(&v).ok_or_else(|| {
                                raise("ERR description argument given to redis.register_function must be a string")
                            })?)
                        }
                        b"callback" => match v {
                            Value::Function(f) => func = Some(f),
                            _ => {
                                return Err(raise(
                                    "ERR callback argument given to redis.register_function must be a function",
                                ))
                            }
                        },
                        b"flags" => {
                            let Value::Table(ft) = v else {
                                return Err(raise("ERR flags argument to redis.register_function must be a table representing function flags"));
                            };
                            for f in ft.sequence_values::<Value>() {
                                let ok = match f? {
                                    Value::String(s) => flags.set(&s.as_bytes()),
                                    _ => false,
                                };
                                if !ok {
                                    return Err(raise("ERR unknown flag given"));
                                }
                            }
                        }
                        _ => {
                            return Err(raise(
                                "ERR unknown argument given to redis.register_function",
                            ))
                        }
                    }
                }
                let name = name.ok_or_else(|| {
                    raise("ERR redis.register_function must get a function name argument")
                })?;
                let func = func.ok_or_else(|| {
                    raise("ERR redis.register_function must get a callback argument")
                })?;
                (name, func, flags, description)
            }
            _ => return Err(raise("ERR wrong number of arguments to redis.register_function")),
        };
        if !valid_name(name.as_bytes()) {
            return Err(raise(format!("ERR {BAD_NAME}")));
        }
        let _ = lua;
        let mut st = run.lock();
        let Some(list) = st.loading.as_mut() else {
            return Err(raise("ERR redis.register_function can only be called on FUNCTION LOAD command"));
        };
        // Within a library names are compared exactly (Redis 7.0 takes
        // `f` and `F`); across libraries, case-insensitively.
        if list.iter().any(|r| r.name == name) {
            return Err(raise("ERR Function already exists in the library"));
        }
        list.push(Registered {
            name,
            func,
            flags,
            description,
        });
        Ok(())
    })
}

/// Parses a library's `#!lua name=...` line with Redis's errors; returns
/// the name and where the code starts.
fn library_header(code: &[u8]) -> Result<(String, usize), Reply> {
    if !code.starts_with(b"#!") {
        return Err(Reply::err("Missing library metadata"));
    }
    if !code.contains(&b'\n') {
        return Err(Reply::err("Invalid library metadata"));
    }
    let line_end = code.iter().position(|&c| c == b'\n').unwrap_or(code.len());
    let names = code[..line_end]
        .split(|c| c.is_ascii_whitespace())
        .filter(|w| w.starts_with(b"name="))
        .count();
    if names > 1 {
        return Err(Reply::err(
            "Invalid metadata value, name argument was given multiple times",
        ));
    }
    let parsed = shebang::parse(code, true)?.expect("starts with #!");
    let Some(name) = parsed.name else {
        return Err(Reply::err("Library name was not given"));
    };
    if !valid_name(&name) {
        return Err(Reply::err(BAD_NAME));
    }
    Ok((
        String::from_utf8_lossy(&name).into_owned(),
        parsed.code_start,
    ))
}

/// A function's key in `Inner::functions`: names are case-insensitive
/// across libraries and in FCALL, as in Redis 7.0.
fn function_key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// One change of the libraries, made on one state and published whole
/// when it succeeds ([`ScriptVm::edit_libraries`]).
pub struct LibraryEdit<'a> {
    vm: &'a ScriptVm,
    inner: &'a mut Inner,
    changed: bool,
}

impl LibraryEdit<'_> {
    /// FUNCTION LOAD [REPLACE]: runs the library code, which must register
    /// at least one function. Returns what was loaded, or Redis's error
    /// reply ("ERR Library 'x' already exists", "ERR Error compiling
    /// function: ...", "ERR Error registering functions: ...").
    pub fn load(&mut self, code: &[u8], replace: bool) -> Result<LibraryInfo, Reply> {
        let info = self.vm.load_into(self.inner, code, replace)?;
        self.changed = true;
        Ok(info)
    }

    /// FUNCTION DELETE: false when there is no such library.
    pub fn delete(&mut self, name: &str) -> bool {
        let Some(lib) = self.inner.libraries.remove(name) else {
            return false;
        };
        for f in lib.functions {
            self.inner.functions.remove(&function_key(&f.name));
        }
        self.changed = true;
        true
    }

    /// FUNCTION FLUSH.
    pub fn flush(&mut self) {
        self.inner.libraries.clear();
        self.inner.functions.clear();
        self.changed = true;
    }

    /// Every library as the change leaves it, sorted by name.
    pub fn list(&self) -> Vec<LibraryInfo> {
        let mut out: Vec<LibraryInfo> = self
            .inner
            .libraries
            .iter()
            .map(|(name, lib)| info(name, lib))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

impl ScriptVm {
    /// Changes the libraries as one step: `f` edits this state's libraries
    /// (as last published); if it succeeds, they are published to every
    /// state, else they go back to what was published (FUNCTION RESTORE is
    /// all-or-nothing). Other states never see part of a change. Changes
    /// must be serialized by the caller and made on one state.
    pub fn edit_libraries<R>(
        &self,
        f: impl FnOnce(&mut LibraryEdit<'_>) -> Result<R, Reply>,
    ) -> Result<R, Reply> {
        let mut inner = self.inner.lock();
        self.sync_libraries(&mut inner);
        let mut edit = LibraryEdit {
            vm: self,
            inner: &mut inner,
            changed: false,
        };
        let out = f(&mut edit);
        match (&out, edit.changed) {
            (Ok(_), true) => inner.generation = self.registry.publish(edit.list()),
            (Err(_), true) => self.reload_libraries(&mut inner),
            _ => {}
        }
        self.note_memory();
        out
    }

    /// FUNCTION LOAD [REPLACE] as a change of its own.
    pub fn load_library(&self, code: &[u8], replace: bool) -> Result<LibraryInfo, Reply> {
        self.edit_libraries(|e| e.load(code, replace))
    }

    /// FUNCTION DELETE as a change of its own: false when there is no such
    /// library.
    pub fn delete_library(&self, name: &str) -> bool {
        let deleted = |e: &mut LibraryEdit| match e.delete(name) {
            true => Ok(()),
            false => Err(Reply::Nil),
        };
        self.edit_libraries(deleted).is_ok()
    }

    /// FUNCTION FLUSH as a change of its own.
    pub fn flush_functions(&self) {
        let _ = self.edit_libraries(|e| {
            e.flush();
            Ok(())
        });
    }

    /// Every library, sorted by name, as last published.
    pub fn libraries(&self) -> Vec<LibraryInfo> {
        self.registry.libraries()
    }

    /// A function's flags, as last published.
    pub fn function_flags(&self, name: &str) -> Option<ScriptFlags> {
        self.registry.function_flags(name)
    }

    /// Brings this state's libraries to the last published change.
    fn sync_libraries(&self, inner: &mut Inner) {
        if inner.generation != self.registry.generation() {
            self.reload_libraries(inner);
        }
    }

    /// Loads the published libraries again, in place of this state's.
    fn reload_libraries(&self, inner: &mut Inner) {
        let (generation, codes) = self.registry.library_codes();
        inner.libraries.clear();
        inner.functions.clear();
        for code in codes {
            if let Err(e) = self.load_into(inner, &code, true) {
                tracing::error!(error = ?e, "a published library does not load in a Lua state");
            }
        }
        inner.generation = generation;
        self.note_memory();
    }

    /// Loads a library into this state only.
    fn load_into(
        &self,
        inner: &mut Inner,
        code: &[u8],
        replace: bool,
    ) -> Result<LibraryInfo, Reply> {
        let (name, start) = library_header(code)?;
        if !replace && inner.libraries.contains_key(&name) {
            return Err(Reply::err(format!("Library '{name}' already exists")));
        }
        let func = self
            .compile(&code[start..], "@user_function")
            .map_err(|e| Reply::err(format!("Error compiling function: {e}")))?;
        let registered = self.run_library_code(func)?;
        if registered.is_empty() {
            return Err(Reply::err("No functions registered"));
        }
        for r in &registered {
            if let Some(owner) = inner.functions.get(&function_key(&r.name)) {
                if *owner != name {
                    return Err(Reply::err(format!("Function {} already exists", r.name)));
                }
            }
        }
        if let Some(old) = inner.libraries.remove(&name) {
            for f in old.functions {
                inner.functions.remove(&function_key(&f.name));
            }
        }
        for r in &registered {
            inner.functions.insert(function_key(&r.name), name.clone());
        }
        let lib = Library {
            code: Bytes::copy_from_slice(code),
            functions: registered,
        };
        let info = info(&name, &lib);
        inner.libraries.insert(name, lib);
        Ok(info)
    }

    /// Runs library code in load mode and returns what it registered.
    fn run_library_code(&self, func: Function) -> Result<Vec<Registered>, Reply> {
        {
            let mut st = self.run.lock();
            st.loading = Some(Vec::new());
            st.error = None;
        }
        self.kill.start_clock();
        self.kill.loading.store(true, Ordering::Release);
        let result = self.set_loading.call::<()>(true).and_then(|_| {
            self.run_script
                .call::<(bool, Value)>((func, self.handler.clone()))
        });
        let _ = self.set_loading.call::<()>(false);
        self.kill.loading.store(false, Ordering::Release);
        self.kill.started.clear();
        let mut st = self.run.lock();
        let registered = st.loading.take().unwrap_or_default();
        match result {
            Ok((true, _)) => Ok(registered),
            Ok((false, _)) => {
                let msg = st.error.take().map(|e| e.0).unwrap_or_default();
                Err(Reply::err(format!("Error registering functions: {msg}")))
            }
            Err(e) => Err(Reply::err(format!("Error registering functions: {e}"))),
        }
    }

    /// FCALL / FCALL_RO: runs a registered function with its keys and
    /// arguments. `ro` refuses functions without `no-writes` as Redis does.
    pub fn call_function(
        &self,
        name: &str,
        keys: &[Bytes],
        args: &[Bytes],
        ro: bool,
        host: &mut dyn Host,
    ) -> Reply {
        let mut inner = self.inner.lock();
        self.sync_libraries(&mut inner);
        let found = inner
            .functions
            .get(&function_key(name))
            .and_then(|lib| inner.libraries.get(lib))
            .and_then(|lib| {
                lib.functions
                    .iter()
                    .find(|f| f.name.eq_ignore_ascii_case(name))
            });
        let Some(f) = found else {
            return Reply::err("Function not found");
        };
        if ro && !f.flags.no_writes {
            return Reply::err("Can not execute a script with write flag using *_ro command.");
        }
        let ro = ro || f.flags.no_writes;
        if let Some(refused) = host.begin(f.flags, keys) {
            return refused;
        }
        let (k, a) = match self.string_arrays(keys, args) {
            Ok(t) => t,
            Err(e) => return Reply::err(e),
        };
        let func = f.func.clone();
        // Errors name the function as registered, whatever case FCALL used.
        let registered = f.name.clone();
        self.execute(&registered, true, ro, host, || {
            let h = self.handler.clone();
            self.run_function.call::<(bool, Value)>((func, h, k, a))
        })
    }
}

fn info(name: &str, lib: &Library) -> LibraryInfo {
    LibraryInfo {
        name: name.to_owned(),
        code: lib.code.clone(),
        functions: lib
            .functions
            .iter()
            .map(|f| FunctionInfo {
                name: f.name.clone(),
                description: f.description.clone(),
                flags: f.flags,
            })
            .collect(),
    }
}
