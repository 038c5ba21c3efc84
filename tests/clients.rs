//! End-to-end tests with real client libraries, called the way their users
//! call them: redis-py (transactional pipeline, WATCH retries, the Lua-based
//! lock, registered scripts; its RedisCluster against three cairn nodes) and BullMQ, a Node.js job queue built on Lua
//! scripts (adding and processing jobs end to end).
//!
//! The scripts live in `tests/clients/`. This test installs the libraries
//! itself, at pinned versions, into `<target>/client-deps/` (pip
//! `--target`, `npm ci --prefix`) the first time and reuses them after, then
//! runs each script against a cairn server on 127.0.0.1 with a time limit.
//! It needs python3 with pip and node with npm (and, for the first run, the
//! PyPI and npm registries); when one is missing it fails saying so.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::TestServer;

/// The Python packages, pinned.
const PY_REQUIREMENTS: &[&str] = &["redis==5.0.8"];

/// Where the client scripts are.
fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// `<target>/client-deps`: the shared cache of installed libraries.
fn deps_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp, wherever the target dir is.
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("client-deps")
}

/// What a finished (or killed) child process left.
struct Outcome {
    success: bool,
    timed_out: bool,
    status: String,
    output: String,
    elapsed: Duration,
}

/// Runs `cmd` with a wall-clock limit, capturing stdout and stderr together
/// (stdout first); kills it when the limit passes.
fn run_limited(mut cmd: Command, limit: Duration) -> Outcome {
    let what = format!("{cmd:?}");
    let start = Instant::now();
    let mut child: Child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if start.elapsed() > limit {
            timed_out = true;
            let _ = child.kill();
            break child.wait().expect("wait for killed child");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    Outcome {
        success: status.success() && !timed_out,
        timed_out,
        status: status.to_string(),
        output,
        elapsed: start.elapsed(),
    }
}

/// Panics unless `program args...` runs: the tool the tests need is missing.
fn require_tool(program: &str, args: &[&str], why: &str) {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let ok = match cmd.stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(s) => s.success(),
        Err(_) => false,
    };
    assert!(
        ok,
        "the client-library tests need `{program} {}` to work ({why}); install it \
         (Debian: apt-get install python3 python3-pip nodejs npm) and run again",
        args.join(" ")
    );
}

/// Installs into `<deps>/<name>` once: `install` fills a fresh staging
/// directory, which then replaces the old one; `stamp` (the pinned
/// versions) is written last, so a partial install is never reused.
fn ensure_installed(name: &str, stamp: &str, install: impl FnOnce(&Path)) -> PathBuf {
    // Tests run on parallel threads of one process: one installs, the
    // others wait for it and reuse its install.
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    let deps = deps_dir();
    let dest = deps.join(name);
    let stamp_file = dest.join(".installed");
    if std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(stamp) {
        return dest;
    }
    std::fs::create_dir_all(&deps).expect("create client-deps dir");
    let staging = deps.join(format!("{name}.staging-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).expect("create staging dir");
    install(&staging);
    std::fs::write(staging.join(".installed"), stamp).expect("write stamp");
    // Another test process may have finished the same install meanwhile.
    if std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(stamp) {
        let _ = std::fs::remove_dir_all(&staging);
        return dest;
    }
    let _ = std::fs::remove_dir_all(&dest);
    if std::fs::rename(&staging, &dest).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
        assert_eq!(
            std::fs::read_to_string(&stamp_file).ok().as_deref(),
            Some(stamp),
            "could not move the {name} install into place at {}",
            dest.display()
        );
    }
    dest
}

fn install_or_panic(what: &str, cmd: Command) {
    let out = run_limited(cmd, Duration::from_secs(600));
    assert!(
        out.success,
        "installing {what} failed ({}{}), output:\n{}",
        out.status,
        if out.timed_out { ", timed out" } else { "" },
        out.output
    );
}

/// redis-py, installed with pip into `<deps>/python`.
fn python_deps() -> PathBuf {
    require_tool("python3", &["--version"], "the redis-py tests run on it");
    require_tool(
        "python3",
        &["-m", "pip", "--version"],
        "it installs redis-py",
    );
    let stamp = PY_REQUIREMENTS.join("\n");
    ensure_installed("python", &stamp, |dir| {
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "pip", "install", "--quiet", "--no-input"])
            .args(["--disable-pip-version-check", "--no-warn-script-location"])
            .arg("--target")
            .arg(dir)
            .args(PY_REQUIREMENTS);
        install_or_panic("redis-py with pip", cmd);
    })
}

/// The Node.js libraries of tests/clients/node_queue (package.json and its
/// lock file), installed with `npm ci` into `<deps>/node`.
fn node_deps() -> PathBuf {
    require_tool("node", &["--version"], "the job-queue tests run on it");
    require_tool("npm", &["--version"], "it installs the job-queue libraries");
    let src = clients_dir().join("node_queue");
    let manifest = std::fs::read_to_string(src.join("package.json")).expect("package.json");
    let lock = std::fs::read_to_string(src.join("package-lock.json")).expect("package-lock.json");
    let stamp = format!("{manifest}\n{lock}");
    ensure_installed("node", &stamp, |dir| {
        std::fs::write(dir.join("package.json"), &manifest).unwrap();
        std::fs::write(dir.join("package-lock.json"), &lock).unwrap();
        let mut cmd = Command::new("npm");
        cmd.args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
            .args(["--loglevel", "error"])
            .arg("--prefix")
            .arg(dir)
            .env("npm_config_update_notifier", "false");
        install_or_panic("the job-queue libraries with npm", cmd);
    })
}

/// Runs one client script against a fresh server and fails with its output
/// unless it exits 0 within `limit`.
fn run_script(what: &str, mut cmd: Command, server: &TestServer, limit: Duration) {
    cmd.arg(server.port.to_string()).current_dir(clients_dir());
    let out = run_limited(cmd, limit);
    eprintln!(
        "{what}: {} in {:.1}s\n{}",
        out.status,
        out.elapsed.as_secs_f64(),
        out.output.trim_end()
    );
    assert!(
        out.success,
        "{what} failed against cairn on port {} ({}{}); its output:\n{}",
        server.port,
        out.status,
        if out.timed_out {
            format!(", killed after {}s", limit.as_secs())
        } else {
            String::new()
        },
        out.output
    );
}

#[test]
fn redis_py_pipeline_watch_lock_and_scripts() {
    let deps = python_deps();
    let server = TestServer::start();
    let mut cmd = Command::new("python3");
    cmd.arg(clients_dir().join("py_clients.py"))
        .env("PYTHONPATH", &deps)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    run_script("redis-py", cmd, &server, Duration::from_secs(60));
}

#[test]
fn redis_py_pubsub() {
    let deps = python_deps();
    let server = TestServer::start();
    let mut cmd = Command::new("python3");
    cmd.arg(clients_dir().join("py_pubsub.py"))
        .env("PYTHONPATH", &deps)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    run_script("redis-py pubsub", cmd, &server, Duration::from_secs(60));
}

#[test]
fn redis_py_cluster_client() {
    let deps = python_deps();
    let etcd = common::etcd::TestEtcd::start();
    let nodes = common::cluster::three_nodes(&etcd.endpoint, "py-cluster");
    let mut cmd = Command::new("python3");
    cmd.arg(clients_dir().join("py_cluster.py"))
        .env("PYTHONPATH", &deps)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    run_script(
        "redis-py RedisCluster",
        cmd,
        &nodes[0],
        Duration::from_secs(60),
    );
}

/// Runs one of the Node.js job-queue scripts against a fresh server.
fn run_node_queue(name: &str, script: &str) {
    let deps = node_deps();
    let server = TestServer::start();
    let mut cmd = Command::new("node");
    cmd.arg(clients_dir().join("node_queue").join(script))
        .env("NODE_PATH", deps.join("node_modules"));
    run_script(name, cmd, &server, Duration::from_secs(60));
}

#[test]
fn bullmq_adds_and_processes_jobs() {
    run_node_queue("BullMQ", "bullmq_e2e.js");
}

/// bee-queue with its pub/sub features off (cairn has no SUBSCRIBE or
/// PUBLISH yet). Its worker pipelines BRPOPLPUSH: this caught replies held
/// back behind the next blocking pop, and a worker that left taking jobs.
#[test]
fn bee_queue_adds_and_processes_jobs() {
    run_node_queue("bee-queue", "bee_queue_e2e.js");
}
