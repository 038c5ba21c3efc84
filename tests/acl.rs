//! ACL behaviour a transcript cannot pin: ACL SAVE / LOAD with an
//! `aclfile`, ACL DELUSER closing a logged-in client, `requirepass` from
//! the config file, CLIENT LIST's `user=`, and ACL LOG entries' fields.

mod common;

use common::{err, ok, q, TestServer};
use redis::Value;

fn text(v: Value) -> String {
    common::text(v)
}

fn strings(v: Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.into_iter().map(text).collect(),
        other => panic!("not an array: {other:?}"),
    }
}

#[test]
fn save_and_load_an_acl_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.acl");
    std::fs::write(&file, "user bob on >bobpw ~b:* +get\n\n").unwrap();
    let path = file.to_string_lossy().into_owned();
    let srv = TestServer::start_with(|cfg| {
        cfg.redis.insert("aclfile".into(), path.clone().into());
    });
    let mut c = srv.client();
    // Loaded at startup.
    assert_eq!(
        strings(q(&mut c, &["ACL", "USERS"])),
        vec!["bob".to_string(), "default".to_string()]
    );
    ok(
        &mut c,
        &["ACL", "SETUSER", "carol", "on", "nopass", "+@read", "~*"],
    );
    ok(&mut c, &["ACL", "SAVE"]);
    let saved = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = saved.lines().collect();
    assert_eq!(lines.len(), 3, "{saved}");
    assert!(lines[0].starts_with("user bob on #"), "{saved}");
    assert!(
        lines[0].ends_with(" ~b:* resetchannels -@all +get"),
        "{saved}"
    );
    assert_eq!(
        lines[1],
        "user carol on nopass ~* resetchannels -@all +@read"
    );
    assert_eq!(lines[2], "user default on nopass ~* &* +@all");

    // A logged-in client of a user is disconnected by LOAD (Redis frees
    // every old user), and the file's users replace the current ones.
    let mut bob = srv.client();
    ok(&mut bob, &["AUTH", "bob", "bobpw"]);
    std::fs::write(
        &file,
        "user dan on >d +@all ~*\nuser default on nopass ~* &* +@all\n",
    )
    .unwrap();
    ok(&mut c, &["ACL", "LOAD"]);
    assert_eq!(
        strings(q(&mut c, &["ACL", "USERS"])),
        vec!["dan".to_string(), "default".to_string()]
    );
    assert!(redis::cmd("PING").query::<String>(&mut bob).is_err());

    // A bad file changes nothing and says why.
    std::fs::write(&file, "user eve on bogus\nnotauser\n").unwrap();
    let e = err(&mut c, &["ACL", "LOAD"]);
    assert_eq!(
        e,
        format!(
            "ERR {path}:1: Syntax error. {path}:2 should start with user keyword followed by the username. WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
        )
    );
    assert_eq!(strings(q(&mut c, &["ACL", "USERS"])).len(), 2);
}

#[test]
fn deluser_disconnects_its_clients() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    ok(
        &mut admin,
        &["ACL", "SETUSER", "u", "on", ">pw", "+@all", "~*"],
    );
    let mut a = srv.client();
    let mut b = srv.client();
    ok(&mut a, &["AUTH", "u", "pw"]);
    ok(&mut b, &["AUTH", "u", "pw"]);
    let list = text(q(&mut admin, &["CLIENT", "LIST"]));
    assert_eq!(list.matches(" user=u ").count(), 2, "{list}");
    assert_eq!(list.matches(" user=default ").count(), 1, "{list}");
    // A client deleting its own user gets the reply, then is closed.
    assert_eq!(q(&mut a, &["ACL", "DELUSER", "u"]), Value::Int(1));
    assert!(redis::cmd("PING").query::<String>(&mut a).is_err());
    assert!(redis::cmd("PING").query::<String>(&mut b).is_err());
    // A closed connection leaves the client list once its task has wound
    // down, which may be a moment after the socket closed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let list = text(q(&mut admin, &["CLIENT", "LIST"]));
        if !list.contains(" user=u ") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn requirepass_from_config_is_the_default_password() {
    let srv = TestServer::start_with(|cfg| cfg.requirepass = "pw".into());
    let mut c = srv.client();
    assert_eq!(err(&mut c, &["PING"]), "NOAUTH Authentication required.");
    ok(&mut c, &["AUTH", "pw"]);
    let list = strings(q(&mut c, &["ACL", "LIST"]));
    let hash = "30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4";
    assert_eq!(list, vec![format!("user default on #{hash} ~* &* +@all")]);
    // Making the default user open again lets new clients in.
    ok(&mut c, &["ACL", "SETUSER", "default", "nopass"]);
    let mut d = srv.client();
    assert_eq!(q(&mut d, &["PING"]), Value::SimpleString("PONG".into()));
}

#[test]
fn acl_log_entries() {
    let srv = TestServer::start();
    let mut c = srv.client();
    ok(
        &mut c,
        &["ACL", "SETUSER", "lim", "on", "nopass", "+get", "~k*"],
    );
    let mut l = srv.client();
    ok(&mut l, &["AUTH", "lim", "x"]);
    for _ in 0..2 {
        assert!(err(&mut l, &["SET", "k", "v"]).starts_with("NOPERM"));
    }
    assert!(err(&mut l, &["GET", "other"]).starts_with("NOPERM"));
    let _ = err(&mut l, &["AUTH", "nosuch", "pw"]);
    let log = match q(&mut c, &["ACL", "LOG"]) {
        Value::Array(entries) => entries,
        other => panic!("{other:?}"),
    };
    assert_eq!(log.len(), 3);
    let fields = |e: &Value| -> Vec<(String, String)> {
        let Value::Array(kv) = e else { panic!("{e:?}") };
        kv.chunks(2)
            .map(|p| {
                let v = match &p[1] {
                    Value::Int(i) => i.to_string(),
                    other => text(other.clone()),
                };
                (text(p[0].clone()), v)
            })
            .collect()
    };
    let newest = fields(&log[0]);
    let names: Vec<&str> = newest.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "count",
            "reason",
            "context",
            "object",
            "username",
            "age-seconds",
            "client-info"
        ]
    );
    assert_eq!(newest[1].1, "auth");
    assert_eq!(newest[3].1, "AUTH");
    assert_eq!(newest[4].1, "nosuch");
    let key = fields(&log[1]);
    assert_eq!((key[1].1.as_str(), key[3].1.as_str()), ("key", "other"));
    let cmd = fields(&log[2]);
    assert_eq!(cmd[0].1, "2", "two refusals fold into one entry");
    assert_eq!(
        (cmd[1].1.as_str(), cmd[2].1.as_str()),
        ("command", "toplevel")
    );
    assert_eq!((cmd[3].1.as_str(), cmd[4].1.as_str()), ("set", "lim"));
    assert!(cmd[6].1.contains(" user=lim "), "{}", cmd[6].1);
    assert!(cmd[6].1.contains(" cmd=set "), "{}", cmd[6].1);
    assert!(newest[6].1.contains(" cmd=auth "), "{}", newest[6].1);
    let Value::Array(one) = q(&mut c, &["ACL", "LOG", "1"]) else {
        panic!("ACL LOG 1")
    };
    assert_eq!(one.len(), 1);
    ok(&mut c, &["ACL", "LOG", "RESET"]);
    assert_eq!(q(&mut c, &["ACL", "LOG"]), Value::Array(vec![]));
}
