//! Functions: FUNCTION LOAD / DELETE / FLUSH / LIST / DUMP / RESTORE /
//! STATS / KILL / HELP, FCALL and FCALL_RO.
//!
//! Libraries live in the engines' registry (changed on the plan state,
//! published whole to every shard's state) and, to survive restarts, in
//! shard 0's `sys` table (`function/<library>` -> code). Every change
//! rewrites those rows from the published libraries in one write on shard
//! 0, acknowledged after its commit (durable under `always`); changes are
//! serialized by `Server::functions_lock`, so the rows always follow the
//! last change. FCALL runs like EVAL (`scripting::dispatch`).

use std::sync::Arc;

use bytes::Bytes;

use super::scripting::{dispatch, kill_running};
use crate::command::args::{is, Args};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::scripting::{Host, Label, LibraryEdit, LibraryInfo, ScriptVm};
use crate::server::Server;
use crate::storage::{KvRead, StoreError, Table, WriteCtx};
use crate::util::rdb;

/// Prefix of the `sys` rows that hold libraries.
const ROW_PREFIX: &[u8] = b"function/";

/// FCALL function numkeys [key ...] [arg ...]
pub fn fcall(s: &mut Session, a: Args) -> Action {
    fcall_generic(s, a, false)
}

/// FCALL_RO function numkeys [key ...] [arg ...]
pub fn fcall_ro(s: &mut Session, a: Args) -> Action {
    fcall_generic(s, a, true)
}

fn fcall_generic(s: &mut Session, a: Args, ro: bool) -> Action {
    let name = String::from_utf8_lossy(a.get(1)).into_owned();
    let split = a
        .int(2)
        .map_err(|_| Reply::err("Bad number of keys provided"))
        .and_then(|n| super::scripting::keys_end(n, a.len()));
    let split = match split {
        Ok(n) => n,
        // Redis looks the function up before it reads numkeys (a call that
        // runs fails there alike). In a transaction the lookup waits for
        // the commands queued before it, which may load or delete it.
        Err(bad_numkeys) => return not_found_or(s, name, bad_numkeys),
    };
    let label: Label = Arc::new((name, a.into_vec()));
    let l = label.clone();
    let run = move |vm: &ScriptVm, host: &mut dyn Host| {
        vm.call_function(&l.0, &l.1[3..split], &l.1[split..], ro, host)
    };
    dispatch(s, true, label, split, run)
}

/// "Function not found" if no function has `name`, else `other`: looked up
/// now, or in a transaction once the commands queued before have run.
fn not_found_or(s: &Session, name: String, other: Reply) -> Action {
    reading(s, move |server| {
        match server.scripts.registry().function_flags(&name) {
            None => Reply::err("Function not found"),
            Some(_) => other,
        }
    })
}

/// What FUNCTION LIST, STATS and DUMP answer: at once, or in a transaction
/// once the commands queued before (a FUNCTION LOAD...) have run.
fn reading(s: &Session, read: impl FnOnce(&Server) -> Reply + Send + 'static) -> Action {
    let server = s.server.clone();
    if s.in_exec {
        return Action::Job(Box::pin(async move { read(&server) }));
    }
    read(&server).into()
}

/// FUNCTION subcommand [arg ...]
pub fn function(s: &mut Session, a: Args) -> Action {
    let sub = a.get(1).clone();
    let server = s.server.clone();
    match String::from_utf8_lossy(&sub).to_ascii_lowercase().as_str() {
        "load" => load(server, s.in_exec, &a),
        "delete" => {
            let name = String::from_utf8_lossy(a.get(2)).into_owned();
            change(server, s.in_exec, move |libs| {
                if libs.delete(&name) {
                    Ok(Reply::Ok)
                } else {
                    Err(Reply::err("Library not found"))
                }
            })
        }
        "flush" => {
            if a.len() > 3 {
                return super::subcommand_syntax(&a).into();
            }
            if !super::sync_or_async(a.from(2)) {
                return Reply::err("FUNCTION FLUSH only supports SYNC|ASYNC option").into();
            }
            change(server, s.in_exec, |libs| {
                libs.flush();
                Ok(Reply::Ok)
            })
        }
        "list" => reading(s, move |server| list(server, &a)),
        "dump" => reading(s, |server| {
            let mut body = Vec::new();
            for lib in server.scripts.registry().libraries() {
                body.push(rdb::OPCODE_FUNCTION2);
                rdb::put_string(&mut body, &lib.code);
            }
            Reply::bulk(rdb::seal(body))
        }),
        "restore" => restore(server, s.in_exec, &a),
        "stats" => reading(s, stats),
        "kill" => kill_running(&server, false).into(),
        _ => help(),
    }
}

/// FUNCTION LOAD [REPLACE] code
fn load(server: Arc<Server>, in_exec: bool, a: &Args) -> Action {
    let mut replace = false;
    let mut at = 2;
    while at < a.len() - 1 {
        if is(a.get(at), "replace") {
            replace = true;
            at += 1;
            continue;
        }
        return Reply::err(format!(
            "Unknown option given: {}",
            String::from_utf8_lossy(a.get(at))
        ))
        .into();
    }
    if at >= a.len() {
        return Reply::err("Function code is missing").into();
    }
    let code = a.get(at).clone();
    change(server, in_exec, move |libs| {
        libs.load(&code, replace).map(|lib| Reply::bulk(lib.name))
    })
}

/// Restore policies of FUNCTION RESTORE.
#[derive(PartialEq, Eq)]
enum Policy {
    Flush,
    Append,
    Replace,
}

/// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]
fn restore(server: Arc<Server>, in_exec: bool, a: &Args) -> Action {
    if a.len() > 4 {
        return super::subcommand_syntax(a).into();
    }
    let policy = match a.from(3) {
        [] => Policy::Append,
        [p] if is(p, "flush") => Policy::Flush,
        [p] if is(p, "append") => Policy::Append,
        [p] if is(p, "replace") => Policy::Replace,
        _ => {
            return Reply::err(
                "Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            )
            .into()
        }
    };
    let payload = a.get(2).clone();
    let check_crc = super::dump::crc_checked(&server);
    // All or nothing: a failed change leaves the libraries as they were.
    change(server, in_exec, move |libs| {
        let Some(body) = rdb::unseal_checked(&payload, check_crc) else {
            return Err(Reply::err("DUMP payload version or checksum are wrong"));
        };
        let mut codes = Vec::new();
        let mut r = rdb::Reader::new(body);
        while !r.at_end() {
            if r.byte() != Some(rdb::OPCODE_FUNCTION2) {
                return Err(Reply::err("given type is not a function"));
            }
            let code = r
                .string()
                .ok_or_else(|| Reply::err("failed loading the given functions payload"))?;
            codes.push(code);
        }
        if policy == Policy::Flush {
            libs.flush();
        }
        for code in &codes {
            if let Err(e) = libs.load(code, policy == Policy::Replace) {
                let e = match e {
                    // Redis names the library without quotes here.
                    Reply::Error(t) if t.starts_with("ERR Library '") => {
                        Reply::Error(t.replacen('\'', "", 2))
                    }
                    other => other,
                };
                return Err(e);
            }
        }
        Ok(Reply::Ok)
    })
}

/// Applies `f` to the libraries as one change (on the plan state, on a
/// blocking thread: every state sees it before the reply) and, if it
/// succeeded, stores the libraries on shard 0 before replying. Alone, that
/// is a job, which the connection finishes before it reads on (a pipelined
/// FCALL finds the function). Queued in a transaction (`in_exec`), it is a
/// coordinated plan over shard 0, which EXEC runs inside its own hold of
/// its shards: as a job waiting for shard 0 it waited there for the
/// transaction itself (EXEC of `SET k 1` and `FUNCTION FLUSH`, k on shard
/// 0, never finished).
fn change(
    server: Arc<Server>,
    in_exec: bool,
    f: impl FnOnce(&mut LibraryEdit) -> Result<Reply, Reply> + Send + 'static,
) -> Action {
    if in_exec {
        return super::coordinated(vec![0], move |locked| async move {
            let (reply, rows) = match edit(&server, f).await {
                Ok(done) => done,
                Err(r) => return Ok(Err(r)),
            };
            locked.run(0, move |w| store_rows(w, &rows)).await?;
            Ok(Ok(reply))
        });
    }
    Action::Job(Box::pin(change_now(server, f)))
}

/// [`change`] outside a transaction: the libraries edited, then stored on
/// shard 0 (a write of its own), then the reply.
async fn change_now(
    server: Arc<Server>,
    f: impl FnOnce(&mut LibraryEdit) -> Result<Reply, Reply> + Send + 'static,
) -> Reply {
    let (reply, rows) = match edit(&server, f).await {
        Ok(done) => done,
        Err(r) => return r,
    };
    let stored = server.shards.submit(
        0,
        Box::new(move |w: &mut WriteCtx| {
            store_rows(w, &rows)?;
            Ok(Reply::Ok)
        }),
    );
    match stored.await {
        Ok(Reply::Ok) => reply,
        Ok(other) => other,
        Err(_) => Reply::err("shard unavailable"),
    }
}

/// The rows of shard 0's `sys` table that hold the libraries.
type LibraryRows = Vec<(Vec<u8>, Bytes)>;

/// Runs `f` on the libraries (under `Server::functions_lock`) and returns
/// its reply with the rows that store the libraries it left.
async fn edit(
    server: &Arc<Server>,
    f: impl FnOnce(&mut LibraryEdit) -> Result<Reply, Reply> + Send + 'static,
) -> Result<(Reply, LibraryRows), Reply> {
    let _serial = server.functions_lock.lock().await;
    let engines = server.scripts.clone();
    let done = tokio::task::spawn_blocking(move || {
        engines
            .plan()
            .edit_libraries(|libs| Ok((f(libs)?, libs.list())))
    })
    .await;
    let (reply, libs) = match done {
        Ok(Ok(v)) => v,
        Ok(Err(r)) => return Err(r),
        Err(e) => return Err(Reply::err(format!("script engine failed: {e}"))),
    };
    count(server, &libs);
    let rows = libs
        .into_iter()
        .map(|lib| ([ROW_PREFIX, lib.name.as_bytes()].concat(), lib.code))
        .collect();
    Ok((reply, rows))
}

/// Replaces the stored libraries by `rows`.
fn store_rows(w: &mut WriteCtx, rows: &[(Vec<u8>, Bytes)]) -> Result<(), StoreError> {
    let end = crate::storage::encoding::prefix_successor(ROW_PREFIX);
    w.del_range(Table::Sys, ROW_PREFIX, end.as_deref(), usize::MAX)?;
    for (k, code) in rows {
        w.put(Table::Sys, k, code)?;
    }
    Ok(())
}

/// Loads the libraries stored on shard 0 into the engine (at start).
pub fn load_stored(server: &Server) -> Result<(), StoreError> {
    let snap = server.shards.shard(0).snapshot()?;
    let end = crate::storage::encoding::prefix_successor(ROW_PREFIX);
    let mut codes = Vec::new();
    snap.scan(
        Table::Sys,
        ROW_PREFIX,
        end.as_deref(),
        false,
        &mut |_, v| {
            codes.push(v.to_vec());
            true
        },
    )?;
    let loaded = server.scripts.plan().edit_libraries(|libs| {
        for code in codes {
            if let Err(e) = libs.load(&code, true) {
                tracing::error!(error = ?e, "cannot load a stored function library");
            }
        }
        Ok(libs.list())
    });
    count(server, &loaded.unwrap_or_default());
    Ok(())
}

/// Publishes the library and function counts for FUNCTION STATS.
fn count(server: &Server, libs: &[LibraryInfo]) {
    use std::sync::atomic::Ordering::Relaxed;
    let functions: usize = libs.iter().map(|l| l.functions.len()).sum();
    server.function_counts.0.store(libs.len() as u64, Relaxed);
    server.function_counts.1.store(functions as u64, Relaxed);
    let code: usize = libs.iter().map(|l| l.code.len()).sum();
    server.function_counts.2.store(code as u64, Relaxed);
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]
fn list(server: &Server, a: &Args) -> Reply {
    let (mut with_code, mut pattern) = (false, None);
    let rest = a.from(2);
    let mut i = 0;
    while i < rest.len() {
        if !with_code && is(&rest[i], "withcode") {
            with_code = true;
        } else if pattern.is_none() && is(&rest[i], "libraryname") {
            if i + 1 >= rest.len() {
                return Reply::err("library name argument was not given");
            }
            i += 1;
            pattern = Some(rest[i].clone());
        } else {
            return Reply::err(format!(
                "Unknown argument {}",
                String::from_utf8_lossy(&rest[i])
            ));
        }
        i += 1;
    }
    let libs = server
        .scripts
        .registry()
        .libraries()
        .into_iter()
        .filter(|lib| {
            pattern
                .as_ref()
                .is_none_or(|p| crate::util::glob::string_match(p, lib.name.as_bytes(), true))
        })
        .map(|lib| {
            let functions = lib
                .functions
                .iter()
                .map(|f| {
                    Reply::Map(vec![
                        (Reply::bulk("name"), Reply::bulk(f.name.clone())),
                        (
                            Reply::bulk("description"),
                            f.description.clone().map_or(Reply::Nil, Reply::bulk),
                        ),
                        (
                            Reply::bulk("flags"),
                            Reply::Set(f.flags.names().into_iter().map(Reply::Simple).collect()),
                        ),
                    ])
                })
                .collect();
            let mut fields = vec![
                (Reply::bulk("library_name"), Reply::bulk(lib.name.clone())),
                (Reply::bulk("engine"), Reply::bulk("LUA")),
                (Reply::bulk("functions"), Reply::Array(functions)),
            ];
            if with_code {
                fields.push((Reply::bulk("library_code"), Reply::bulk(lib.code.clone())));
            }
            Reply::Map(fields)
        })
        .collect();
    Reply::Array(libs)
}

/// FUNCTION STATS: answered without the engines, which running scripts
/// hold; about the script that has run longest when several run.
fn stats(server: &Server) -> Reply {
    use std::sync::atomic::Ordering::Relaxed;
    let running = match &server.scripts.running_script() {
        Some((label, since)) => Reply::Map(vec![
            (Reply::bulk("name"), Reply::bulk(label.0.clone())),
            (
                Reply::bulk("command"),
                Reply::Array(label.1.iter().map(|a| Reply::bulk(a.clone())).collect()),
            ),
            (
                Reply::bulk("duration_ms"),
                Reply::Int(since.elapsed().as_millis() as i64),
            ),
        ]),
        None => Reply::Nil,
    };
    let (libs, functions) = (
        server.function_counts.0.load(Relaxed),
        server.function_counts.1.load(Relaxed),
    );
    Reply::Map(vec![
        (Reply::bulk("running_script"), running),
        (
            Reply::bulk("engines"),
            Reply::Map(vec![(
                Reply::bulk("LUA"),
                Reply::Map(vec![
                    (Reply::bulk("libraries_count"), Reply::Int(libs as i64)),
                    (Reply::bulk("functions_count"), Reply::Int(functions as i64)),
                ]),
            )]),
        ),
    ])
}

fn help() -> Action {
    super::help_reply(&[
        "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "LOAD [REPLACE] <FUNCTION CODE>",
        "    Create a new library with the given library name and code.",
        "DELETE <LIBRARY NAME>",
        "    Delete the given library.",
        "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
        "    Return general information on all the libraries:",
        "    * Library name",
        "    * The engine used to run the Library",
        "    * Library description",
        "    * Functions list",
        "    * Library code (if WITHCODE is given)",
        "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
        "STATS",
        "    Return information about the current function running:",
        "    * Function name",
        "    * Command used to run the function",
        "    * Duration in MS that the function is running",
        "    If no function is running, return nil",
        "    In addition, returns a list of available engines.",
        "KILL",
        "    Kill the current running function.",
        "FLUSH [ASYNC|SYNC]",
        "    Delete all the libraries.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the libraries.",
        "    * SYNC: Synchronously flush the libraries.",
        "DUMP",
        "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
        "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
        "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
        "    control how to handle existing libraries (default APPEND):",
        "    * FLUSH: delete all existing libraries.",
        "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
        "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
        "      libraries with the new libraries (notice that even on this option there is a chance of failure",
        "      in case of functions name collision with another library).",
        "HELP",
        "    Prints this help.",
    ])
    .into()
}

/// Drops every function library, as FUNCTION FLUSH does (a replica's,
/// before it loads its primary's copy).
pub async fn flush_libraries(server: Arc<Server>) -> Reply {
    change_now(server, |libs| {
        libs.flush();
        Ok(Reply::Ok)
    })
    .await
}

/// Loads function libraries (replacing libraries of the same name) and
/// stores them, as loading an RDB file does with the libraries it holds.
pub async fn import_libraries(server: Arc<Server>, codes: Vec<Vec<u8>>) -> Reply {
    change_now(server, move |libs| {
        for code in &codes {
            libs.load(code, true)?;
        }
        Ok(Reply::Ok)
    })
    .await
}
