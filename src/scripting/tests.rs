//! Engine tests against a fake host. Expected replies were recorded from
//! Redis 7.0.15 (redis-server on 127.0.0.1); the command that produced each
//! is in the comment above it.

use std::collections::HashMap;

use bytes::Bytes;

use super::{Host, ScriptVm};
use crate::protocol::reply::Reply;

/// Answers a few string commands from a map, like a tiny Redis.
#[derive(Default)]
struct FakeHost {
    data: HashMap<Bytes, Bytes>,
    calls: Vec<Vec<Bytes>>,
}

impl Host for FakeHost {
    fn call(&mut self, argv: Vec<Bytes>, resp3: bool) -> Reply {
        self.calls.push(argv.clone());
        let name = argv[0].to_ascii_lowercase();
        match name.as_slice() {
            b"set" => {
                self.data.insert(argv[1].clone(), argv[2].clone());
                Reply::Ok
            }
            b"get" => self
                .data
                .get(&argv[1])
                .cloned()
                .map_or(Reply::Nil, Reply::Bulk),
            b"incr" => {
                let cur = self
                    .data
                    .get(&argv[1])
                    .cloned()
                    .unwrap_or(Bytes::from_static(b"0"));
                match std::str::from_utf8(&cur)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                {
                    Some(n) => {
                        self.data
                            .insert(argv[1].clone(), Bytes::from((n + 1).to_string()));
                        Reply::Int(n + 1)
                    }
                    None => Reply::err("value is not an integer or out of range"),
                }
            }
            b"ping" => Reply::Simple("PONG"),
            b"hgetall" => Reply::Map(vec![(Reply::bulk("f"), Reply::bulk("v"))]),
            b"smembers" => Reply::Set(vec![Reply::bulk("m")]),
            b"zscore" => Reply::Double(1.5),
            b"echo" => Reply::Bulk(argv[1].clone()),
            _ => Reply::err(format!("fake host has no {:?} (resp3 {resp3})", name)),
        }
    }
}

fn eval(vm: &ScriptVm, host: &mut FakeHost, body: &str, keys: &[&str], args: &[&str]) -> Reply {
    let sha = match vm.load(body.as_bytes()) {
        Ok(sha) => sha,
        Err(e) => return e,
    };
    let b = |v: &[&str]| {
        v.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    };
    vm.run(&sha, b(keys), b(args), false, host)
}

fn e(vm: &ScriptVm, body: &str) -> Reply {
    eval(vm, &mut FakeHost::default(), body, &[], &[])
}

fn err(s: &str) -> Reply {
    Reply::Error(s.to_owned())
}

// EVAL "return {1,2,3,'ciao',{1,2}}" 0
#[test]
fn basic_conversions() {
    let vm = ScriptVm::new().unwrap();
    assert_eq!(
        e(&vm, "return {1,2,3,'ciao',{1,2}}"),
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(2),
            Reply::Int(3),
            Reply::bulk("ciao"),
            Reply::Array(vec![Reply::Int(1), Reply::Int(2)])
        ])
    );
}

fn ints(v: &[i64]) -> Reply {
    Reply::Array(v.iter().map(|&i| Reply::Int(i)).collect())
}

fn bulks(v: &[&str]) -> Reply {
    Reply::Array(v.iter().map(|s| Reply::bulk(s.to_string())).collect())
}

// EVAL "return 1.9" 0 -> :1, "return -1.9" -> :-1, "return 1e30" and
// "return 0/0" -> :-9223372036854775808, "return 'str'", "return true" -> :1,
// "return false"/"return nil" -> $-1, "return {1,2,nil,4}" -> *2 :1 :2,
// "return {1,false,3}" -> *3 :1 $-1 :3, "return {a=1}" -> *0,
// "return {[1]=1,[3]=3}" -> *1 :1, "return {ok=1}" -> *0.
#[test]
fn lua_to_resp2() {
    let vm = ScriptVm::new().unwrap();
    assert_eq!(e(&vm, "return 1.9"), Reply::Int(1));
    assert_eq!(e(&vm, "return -1.9"), Reply::Int(-1));
    assert_eq!(e(&vm, "return 1e30"), Reply::Int(i64::MIN));
    assert_eq!(e(&vm, "return 0/0"), Reply::Int(i64::MIN));
    assert_eq!(e(&vm, "return 'str'"), Reply::bulk("str"));
    assert_eq!(e(&vm, "return true"), Reply::Int(1));
    assert_eq!(e(&vm, "return false"), Reply::Nil);
    assert_eq!(e(&vm, "return nil"), Reply::Nil);
    assert_eq!(e(&vm, "return {1,2,nil,4}"), ints(&[1, 2]));
    assert_eq!(
        e(&vm, "return {1,false,3}"),
        Reply::Array(vec![Reply::Int(1), Reply::Nil, Reply::Int(3)])
    );
    assert_eq!(e(&vm, "return {a=1}"), ints(&[]));
    assert_eq!(e(&vm, "return {[1]=1,[3]=3}"), ints(&[1]));
    assert_eq!(e(&vm, "return {ok=1}"), ints(&[]));
    assert_eq!(e(&vm, "return {ok='x', err='y'}"), err("y"));
    assert_eq!(e(&vm, "return {ok='x', 1, 2}"), Reply::Status("x".into()));
    assert_eq!(e(&vm, "return {err='nocode'}"), err("nocode"));
    assert_eq!(
        e(&vm, "return {1, {err='x y'}, {ok='fine'}}"),
        Reply::Array(vec![
            Reply::Int(1),
            err("x y"),
            Reply::Status("fine".into())
        ])
    );
    // A table whose __index answers everything is still an array: fields are
    // read raw. EVAL "local t = setmetatable({}, {__index=function() return 'x' end}) return t" 0 -> *0
    assert_eq!(
        e(
            &vm,
            "local t = setmetatable({}, {__index=function() return 'x' end}) return t"
        ),
        ints(&[])
    );
}

// RESP3 shapes from Lua (recorded with HELLO 3 and without):
// EVAL "return {double=3.5}" 0 -> ,3.5 ; "return {map={a=1, b={1,2}}}" -> %2 ...
// "return {set={a=1}}" -> ~1 ; "redis.setresp(3) return true" -> #t (RESP2 :1);
// "redis.setresp(3) return false" -> #f (RESP2 :0); "return {double='3.5'}" -> *0
#[test]
fn lua_to_resp3_shapes() {
    let vm = ScriptVm::new().unwrap();
    assert_eq!(e(&vm, "return {double=3.5}"), Reply::Double(3.5));
    assert_eq!(e(&vm, "return {double='3.5'}"), ints(&[]));
    assert_eq!(
        e(&vm, "return {map={a=false}}"),
        Reply::Map(vec![(Reply::bulk("a"), Reply::Nil)])
    );
    assert_eq!(
        e(&vm, "return {set={a=1}}"),
        Reply::Set(vec![Reply::bulk("a")])
    );
    assert_eq!(e(&vm, "return {map={}}"), Reply::Map(vec![]));
    assert_eq!(e(&vm, "redis.setresp(3) return true"), Reply::Bool(true));
    assert_eq!(e(&vm, "redis.setresp(3) return false"), Reply::Bool(false));
    assert_eq!(
        e(&vm, "redis.setresp(3) return {1,false}"),
        Reply::Array(vec![Reply::Int(1), Reply::Bool(false)])
    );
    assert_eq!(
        e(&vm, "return {verbatim_string={format='txt', string='abc'}}"),
        Reply::Verbatim("abc".into())
    );
}

// With HSET h f v, SADD st m, ZADD z 1.5 m in Redis:
// EVAL "return redis.call('hgetall','h')" 0 -> *2 f v (RESP2 script)
// EVAL "redis.setresp(3) return redis.call('hgetall','h')" 0 -> %1 f v
// EVAL "redis.setresp(3) local r = redis.call('zscore','z','m') return {type(r), tostring(r.double)}" 0 -> table 1.5
// EVAL "local r = redis.call('zscore','z','m') return type(r)" 0 -> string
// EVAL "redis.setresp(3) local r = redis.call('get','nokey') return type(r)" 0 -> nil
// EVAL "return type(redis.call('get','nokey'))" 0 -> boolean
// EVAL "return redis.call('ping').ok" 0 -> PONG
#[test]
fn replies_to_lua() {
    let vm = ScriptVm::new().unwrap();
    assert_eq!(
        e(&vm, "return redis.call('hgetall','h')"),
        bulks(&["f", "v"])
    );
    assert_eq!(
        e(&vm, "redis.setresp(3) return redis.call('hgetall','h')"),
        Reply::Map(vec![(Reply::bulk("f"), Reply::bulk("v"))])
    );
    assert_eq!(
        e(&vm, "redis.setresp(3) return redis.call('smembers','st')"),
        Reply::Set(vec![Reply::bulk("m")])
    );
    assert_eq!(
        e(&vm, "redis.setresp(3) local r = redis.call('zscore','z','m') return {type(r), tostring(r.double)}"),
        bulks(&["table", "1.5"])
    );
    assert_eq!(
        e(&vm, "return redis.call('zscore','z','m')"),
        Reply::bulk("1.5")
    );
    assert_eq!(
        e(&vm, "redis.setresp(3) return redis.call('zscore','z','m')"),
        Reply::Double(1.5)
    );
    assert_eq!(
        e(
            &vm,
            "redis.setresp(3) local r = redis.call('get','nokey') return type(r)"
        ),
        Reply::bulk("nil")
    );
    assert_eq!(
        e(&vm, "return type(redis.call('get','nokey'))"),
        Reply::bulk("boolean")
    );
    assert_eq!(
        e(&vm, "return redis.call('ping')"),
        Reply::Status("PONG".into())
    );
    assert_eq!(e(&vm, "return redis.call('ping').ok"), Reply::bulk("PONG"));
    assert_eq!(
        e(&vm, "redis.setresp(3) local r = redis.call('smembers','st') return {type(r.set), tostring(r.set.m)}"),
        bulks(&["table", "true"])
    );
}

// EVAL "return x" 0, "x = 1" 0, "return print" 0, "error('boom')" 0, ...
#[test]
fn error_texts() {
    let vm = ScriptVm::new().unwrap();
    let cases = [
        ("return x", "ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 03c387736bb5cc009ff35151572cee04677aa374, on @user_script:1."),
        ("x = 1", "ERR user_script:1: Attempt to modify a readonly table script: 34bce5f775de97f557a34088509c8bfe1ea17e52, on @user_script:1."),
        ("return print", "ERR user_script:1: Script attempted to access nonexistent global variable 'print' script: df4c752a7558004676bbee87e38b92e0b9056d68, on @user_script:1."),
        ("error('boom')", "ERR user_script:1: boom script: 82903a0434f1503e152f89c03c9acd881a0e8150, on @user_script:1."),
        ("\nlocal a = 1\nerror('boom')", "ERR user_script:3: boom script: 0d1e186748839ff177ace786bd99c49c0e9a9d23, on @user_script:3."),
        ("local function f()\n  error('deep')\nend\nf()", "ERR user_script:2: deep script: 93f32af31bb572a60c24e11a5a8d9a1fb6c99352, on @user_script:2."),
        ("error('lvl0', 0)", "ERR lvl0 script: 62fda97d5ff3e9e82e37e4ef84227b41e4175c58, on @user_script:1."),
        ("error({err='MY code'})", "MY code script: 179186c986fb9fbacf8009365285538a7c73a5a7, on @user_script:1."),
        ("error({err='nocode'})", "nocode script: cd8dcda2d046350eb33804d049c007e8d1f3eb2d, on @user_script:1."),
        ("error(42)", "ERR user_script:1: 42 script: acc7142a53d840846449a0a8c6055f5a674809fd, on @user_script:1."),
        ("error(nil)", "ERR nil script: c402aa49952c86c38f35fb311d54977d08f3bf01, on @user_script:1."),
        ("error()", "ERR nil script: aca90d914519fdb9825352bdc0befb59f7c8510f, on @user_script:1."),
        ("error({err=42})", "42 script: f98692516e355ccbc8de2b8d03d02ade8d53cba4, on @user_script:1."),
        ("error(true)", "ERR true script: 4fafe2149f68a1618a3eef40aeef55f5af6951da, on @user_script:1."),
        ("redis.call = nil", "ERR user_script:1: Attempt to modify a readonly table script: 2786c35ed73d3860851cf52e0b5dfbbc0bdb4803, on @user_script:1."),
        ("string.format = nil", "ERR user_script:1: Attempt to modify a readonly table script: 305bdbd065a4b38c3730a3a94ef0d564ad94ba91, on @user_script:1."),
        ("_G.x = 1", "ERR user_script:1: Attempt to modify a readonly table script: e5cf4a26667af1721988fe8c9829d5cd2e26c62e, on @user_script:1."),
        ("rawset(_G, 'x', 1)", "ERR Attempt to modify a readonly table script: e2c706419da183d6229a1230c3be09cc32cdeee0, on @user_script:1."),
        ("setmetatable(_G, nil)", "ERR Attempt to modify a readonly table script: 22fdd3b51da2d4bc6703d71d651cd782d8e5a35f, on @user_script:1."),
        ("getmetatable(_G).__index = nil", "ERR user_script:1: Attempt to modify a readonly table script: 1ec4f48ee3d02bfee5da8ba9aeab8a503d3032f1, on @user_script:1."),
        ("KEYS = 1", "ERR user_script:1: Attempt to modify a readonly table script: 8726473c55e0c4527ed3b82564a764667277b20e, on @user_script:1."),
        ("cjson.null = 1", "ERR user_script:1: Attempt to modify a readonly table script: 429f53e676950ce29d4651cc474f6ba9780ff1cb, on @user_script:1."),
        ("local s = string s.x = 1", "ERR user_script:1: Attempt to modify a readonly table script: 8ab036e9c0692a81f357cb31a6b898b9ab7c5e0a, on @user_script:1."),
        ("return _G.nosuch", "ERR user_script:1: Script attempted to access nonexistent global variable 'nosuch' script: 434fa3e610ec2fb3c76472bda5965a75eef9cde8, on @user_script:1."),
        ("local f = loadstring('return zz') return f()", "ERR [string \"return zz\"]:1: Script attempted to access nonexistent global variable 'zz' script: 13b9973d2c93555481fddfc7661beea0a1493c2a, on return zz:1."),
        ("local f = loadstring('zz = 1') return f()", "ERR [string \"zz = 1\"]:1: Attempt to modify a readonly table script: 17e3e6d6e891c08562d617e52ccc050abac8bfcb, on zz = 1:1."),
        ("local f = loadstring('error(\"e\")', '@nm') f()", "ERR nm:1: e script: d3ae02679cb3c1a642fc7992d7388ec2cd5f682d, on @nm:1."),
        ("local f = loadstring(string.dump(function() return 1 end)) return f()", "ERR user_script:1: attempt to call local 'f' (a nil value) script: 469c36c8f3606d3c5b4e1a7a57fab38e45409219, on @user_script:1."),
        ("return type(setfenv)", "ERR user_script:1: Script attempted to access nonexistent global variable 'setfenv' script: ceaddaad3558d2f10cbb8082ea10e1b63f3ac0ea, on @user_script:1."),
        ("return math.random(0)", "ERR user_script:1: bad argument #1 to 'random' (interval is empty) script: 008bcb60f86ee36d26c67b641b46674578d9cba0, on @user_script:1."),
        ("return math.random(2,1)", "ERR user_script:1: bad argument #2 to 'random' (interval is empty) script: 154b051a78bd7bb133691517692e1a7a38d25895, on @user_script:1."),
        ("return math.random(1,2,3)", "ERR user_script:1: wrong number of arguments script: 5cd983b5db563301a1c7ab05351573640323e7a9, on @user_script:1."),
    ];
    for (body, want) in cases {
        assert_eq!(e(&vm, body), err(want), "{body}");
    }
}

// Values recorded from the same EVALs in Redis 7.0.15.
#[test]
fn sandbox_values() {
    let vm = ScriptVm::new().unwrap();
    // EVAL "local t={} for k,v in pairs(_G) do t[#t+1]=k end table.sort(t) return t" 0
    assert_eq!(
        e(
            &vm,
            "local t={} for k,v in pairs(_G) do t[#t+1]=k end table.sort(t) return t"
        ),
        bulks(&[
            "ARGV",
            "KEYS",
            "_G",
            "_VERSION",
            "__redis__err__handler",
            "assert",
            "bit",
            "cjson",
            "cmsgpack",
            "collectgarbage",
            "coroutine",
            "error",
            "gcinfo",
            "getmetatable",
            "ipairs",
            "load",
            "loadstring",
            "math",
            "next",
            "pairs",
            "pcall",
            "rawequal",
            "rawget",
            "rawset",
            "redis",
            "select",
            "setmetatable",
            "string",
            "struct",
            "table",
            "tonumber",
            "tostring",
            "type",
            "unpack",
            "xpcall"
        ])
    );
    // EVAL "local t={} for k,v in pairs(string) do t[#t+1]=k..':'..type(v) end table.sort(t) return table.concat(t,' ')" 0 (and table, math, coroutine)
    let lib = |name: &str| {
        e(&vm, &format!("local t={{}} for k,v in pairs({name}) do t[#t+1]=k..':'..type(v) end table.sort(t) return table.concat(t,' ')"))
    };
    assert_eq!(lib("string"), Reply::bulk("byte:function char:function dump:function find:function format:function gfind:function gmatch:function gsub:function len:function lower:function match:function rep:function reverse:function sub:function upper:function"));
    assert_eq!(lib("table"), Reply::bulk("concat:function foreach:function foreachi:function getn:function insert:function maxn:function remove:function setn:function sort:function"));
    assert_eq!(lib("math"), Reply::bulk("abs:function acos:function asin:function atan2:function atan:function ceil:function cos:function cosh:function deg:function exp:function floor:function fmod:function frexp:function huge:number ldexp:function log10:function log:function max:function min:function mod:function modf:function pi:number pow:function rad:function random:function randomseed:function sin:function sinh:function sqrt:function tan:function tanh:function"));
    assert_eq!(lib("coroutine"), Reply::bulk("create:function resume:function running:function status:function wrap:function yield:function"));
    assert_eq!(lib("redis"), Reply::bulk("LOG_DEBUG:number LOG_NOTICE:number LOG_VERBOSE:number LOG_WARNING:number REDIS_VERSION:string REDIS_VERSION_NUM:number REPL_ALL:number REPL_AOF:number REPL_NONE:number REPL_REPLICA:number REPL_SLAVE:number acl_check_cmd:function breakpoint:function call:function debug:function error_reply:function log:function pcall:function replicate_commands:function set_repl:function setresp:function sha1hex:function status_reply:function"));
    assert_eq!(e(&vm, "return _VERSION"), Reply::bulk("Lua 5.1"));
    // EVAL "return {redis.REDIS_VERSION, redis.REDIS_VERSION_NUM, redis.LOG_DEBUG, ...}" 0
    assert_eq!(
        e(&vm, "return {redis.REDIS_VERSION, redis.REDIS_VERSION_NUM, redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE,redis.LOG_WARNING, redis.REPL_ALL, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_NONE}"),
        Reply::Array(vec![Reply::bulk("7.0.15"), Reply::Int(458767), Reply::Int(0), Reply::Int(1), Reply::Int(2), Reply::Int(3), Reply::Int(3), Reply::Int(1), Reply::Int(2), Reply::Int(2), Reply::Int(0)])
    );
    assert_eq!(
        e(&vm, "return type(getmetatable(_G))"),
        Reply::bulk("table")
    );
    assert_eq!(
        e(&vm, "return getmetatable('').__index == string"),
        Reply::Int(1)
    );
    assert_eq!(e(&vm, "return ('abc'):upper()"), Reply::bulk("ABC"));
    assert_eq!(e(&vm, "return rawget(_G, 'nosuch')"), Reply::Nil);
    assert_eq!(e(&vm, "return type(_G.redis)"), Reply::bulk("table"));
    assert_eq!(
        e(&vm, "local f = loadstring('return 1+1') return f()"),
        Reply::Int(2)
    );
    assert_eq!(
        e(
            &vm,
            "return loadstring(string.dump(function() return 1 end))"
        ),
        Reply::Nil
    );
    assert_eq!(
        e(
            &vm,
            "return select(2, loadstring(string.dump(function() end)))"
        ),
        Reply::bulk(&b"[string \"\x1bLuaQ\"]:1: unexpected symbol near 'char(27)'"[..])
    );
    assert_eq!(
        e(&vm, "local f, e = loadstring('x=') return e"),
        Reply::bulk("[string \"x=\"]:1: unexpected symbol near '<eof>'")
    );
    assert_eq!(
        e(&vm, "return {pcall(error, {err='x'})}"),
        Reply::Array(vec![Reply::Nil, Reply::bulk("x")])
    );
    assert_eq!(
        e(&vm, "return {pcall(error, {err=42})}"),
        Reply::Array(vec![Reply::Nil, Reply::Int(42)])
    );
    assert_eq!(
        e(&vm, "local ok, e = pcall(error, {err={}}) return type(e)"),
        Reply::bulk("table")
    );
    assert_eq!(
        e(
            &vm,
            "local ok, e = pcall(function() error('x') end) return e"
        ),
        Reply::bulk("user_script:1: x")
    );
    assert_eq!(
        e(&vm, "local ok, e = pcall(string.rep) return e"),
        Reply::bulk("bad argument #1 to '?' (string expected, got no value)")
    );
    assert_eq!(
        e(
            &vm,
            "local ok, e = pcall(function() string.rep() end) return e"
        ),
        Reply::bulk("user_script:1: bad argument #1 to 'rep' (string expected, got no value)")
    );
    assert_eq!(e(&vm, "local ok, e = xpcall(function() error({err='x'}) end, function(e) return type(e) end) return e"), Reply::bulk("table"));
    assert_eq!(e(&vm, "local ok, e = xpcall(function() redis.call('nosuch') end, function(e) return type(e) end) return e"), Reply::bulk("table"));
    assert_eq!(e(&vm, "local ok, e = xpcall(function() redis.call('nosuch') end, function(e) return e.err end) return e"), Reply::bulk("ERR Unknown Redis command called from script"));
    assert_eq!(
        e(&vm, "return {pcall(redis.call, 'nosuch')}"),
        Reply::Array(vec![
            Reply::Nil,
            Reply::bulk("ERR Unknown Redis command called from script")
        ])
    );
    assert_eq!(
        e(
            &vm,
            "return {select('#', pcall(function() return 1, nil, 3 end))}"
        ),
        ints(&[4])
    );
    assert_eq!(
        e(
            &vm,
            "return coroutine.wrap(function() coroutine.yield(5) end)()"
        ),
        Reply::Int(5)
    );
    assert_eq!(e(&vm, "local co = coroutine.create(function() redis.call('nosuch') end) local ok, e = coroutine.resume(co) return {tostring(ok), type(e)}"), bulks(&["false", "table"]));
    assert_eq!(e(&vm, "KEYS[1] = 'x' return KEYS[1]"), Reply::bulk("x"));
    assert_eq!(e(&vm, "local t = {} t.x = 1 return t.x"), Reply::Int(1));
    assert_eq!(e(&vm, "return string.format('%d', 3.7)"), Reply::bulk("3"));
    assert_eq!(
        e(&vm, "return tostring(123456789012345)"),
        Reply::bulk("1.2345678901234e+14")
    );
}

// EVAL "math.randomseed(42) return {tostring(math.random()), math.random(5), math.random(3,9)}" 0
#[test]
fn seeded_random_matches_redis() {
    let vm = ScriptVm::new().unwrap();
    assert_eq!(
        e(&vm, "math.randomseed(42) return {tostring(math.random()), math.random(5), math.random(3,9)}"),
        Reply::Array(vec![Reply::bulk("0.74452500033403"), Reply::Int(2), Reply::Int(3)])
    );
}

// With SET s abc in Redis:
// EVAL "return redis.call('incr','s')" 0, ... (each line below)
#[test]
fn redis_call_errors() {
    let vm = ScriptVm::new().unwrap();
    let mut h = FakeHost::default();
    h.data
        .insert(Bytes::from_static(b"s"), Bytes::from_static(b"abc"));
    let mut ev = |body: &str| eval(&vm, &mut h, body, &[], &[]);
    let cases = [
        ("return redis.call('incr','s')", "ERR value is not an integer or out of range script: c243b9f46db13ba8f69da41b45a77708832babed, on @user_script:1."),
        ("\nreturn redis.call('incr','s')", "ERR value is not an integer or out of range script: c1e79ea95fd9fc869b258f86b673644fdd4e0664, on @user_script:2."),
        ("return redis.pcall('incr','s')", "ERR value is not an integer or out of range"),
        ("return redis.call()", "ERR Please specify at least one argument for this redis lib call script: 0a907e1429221a4d85516cab7fd219a82a9439d8, on @user_script:1."),
        ("return redis.pcall()", "ERR Please specify at least one argument for this redis lib call"),
        ("return redis.call('nosuch')", "ERR Unknown Redis command called from script script: 206396248e12c6e742fd7296250433c8d7343b74, on @user_script:1."),
        ("return redis.pcall('nosuch')", "ERR Unknown Redis command called from script"),
        ("return redis.call('get')", "ERR Wrong number of args calling Redis command from script script: f187dee77f607f7cff00bbabc9df38507582c78d, on @user_script:1."),
        ("return redis.pcall('get')", "ERR Wrong number of args calling Redis command from script"),
        ("return redis.call('get', {})", "ERR Lua redis lib command arguments must be strings or integers script: 4368e88f98d93af9caf358186e5fbf273374ee91, on @user_script:1."),
        ("return redis.pcall('get', {})", "ERR Lua redis lib command arguments must be strings or integers"),
        ("return redis.call('get', nil)", "ERR Lua redis lib command arguments must be strings or integers script: c08fc0abeafdf57380190a28c88ba671c0d91403, on @user_script:1."),
        ("return redis.call('blpop','x', 0)", "ERR This Redis command is not allowed from script script: d2adbbf9d609d52d649f3b9edb892c899096ea77, on @user_script:1."),
        ("return redis.call('client','kill', 'x')", "ERR This Redis command is not allowed from script script: 1d01c263dd142383cfd62da9268205dbfc6ddd89, on @user_script:1."),
        ("return redis.call('config')", "ERR Wrong number of args calling Redis command from script script: 7606e80c4491d47b7e4d27375c865fbb82912077, on @user_script:1."),
        ("return redis.call('config', 'nosuch')", "ERR Unknown Redis command called from script script: a0ea45a4efe6387b81c64461d8f551451a773e1a, on @user_script:1."),
        ("return redis.call('blpop')", "ERR Wrong number of args calling Redis command from script script: 48cfdc6d119f1f10299b49c94e88fc303593d61f, on @user_script:1."),
        ("return redis.call(1)", "ERR Unknown Redis command called from script script: 9bdfc0557e68d76a6a10c85f455de0f93ee495a7, on @user_script:1."),
        ("return redis.sha1hex()", "ERR wrong number of arguments script: 3c7ce947ae74a835cc575b6ee87fb27503cb7ba4, on @user_script:1."),
        ("return redis.setresp(4)", "ERR RESP version must be 2 or 3. script: 921c0a48021d97dfd5884aeea41875972c7804d9, on @user_script:1."),
        ("return redis.setresp()", "ERR redis.setresp() requires one argument. script: 76da64e28014e7c9ad76db33c3918c53d81a3d7e, on @user_script:1."),
        ("return redis.log(redis.LOG_WARNING)", "ERR redis.log() requires two arguments or more. script: 224c2b6c4d4a245fb6c4394854d25a2ca448909c, on @user_script:1."),
        ("return redis.log(99, 'x')", "ERR Invalid debug level. script: d1ccc394357733a87e4372af693b49d6582b5c58, on @user_script:1."),
        ("return redis.log('x', 'x')", "ERR First argument must be a number (log level). script: 1ca7b2fcc13618110177d3fa90153335afc2a7da, on @user_script:1."),
        ("return redis.set_repl(99)", "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE. script: fae934173b6296d6836d5d5f52e192640f8897d9, on @user_script:1."),
        ("return redis.set_repl()", "ERR redis.set_repl() requires two arguments. script: 9504533b41060c143a92eb2f8878e77d33b6dc33, on @user_script:1."),
        ("return redis.acl_check_cmd('nosuch')", "ERR Invalid command passed to redis.acl_check_cmd() script: d2491587bab5149c93be0dce4426f7a06ba9e1a1, on @user_script:1."),
        ("return redis.acl_check_cmd()", "ERR Please specify at least one argument for this redis lib call script: 1124f33ad66e7866b4e0c1499a4c20fb5eb9c180, on @user_script:1."),
        ("return redis.status_reply()", "ERR wrong number or type of arguments"),
        ("return redis.error_reply(1)", "ERR wrong number or type of arguments"),
        ("return redis.error_reply('MY err')", "MY err"),
        ("return redis.error_reply('nocode here')", "nocode here"),
        ("return redis.error_reply('-MY err')", "MY err"),
        ("return redis.error_reply('')", "ERR "),
    ];
    for (body, want) in cases {
        assert_eq!(ev(body), err(want), "{body}");
    }
    assert_eq!(
        ev("local ok, e = pcall(redis.call, 'incr','s') return e"),
        Reply::bulk("ERR value is not an integer or out of range")
    );
    assert_eq!(ev("local e = redis.pcall('incr','s') return {e.err, tostring(e.source), tostring(e.line)}"), bulks(&["ERR value is not an integer or out of range", "nil", "nil"]));
    assert_eq!(
        ev("return redis.error_reply('x').err"),
        Reply::bulk("ERR x")
    );
    assert_eq!(
        ev("return redis.status_reply('FINE')"),
        Reply::Status("FINE".into())
    );
    assert_eq!(
        ev("return redis.log(redis.LOG_WARNING, 'hello', 'world')"),
        Reply::Nil
    );
    assert_eq!(ev("return redis.replicate_commands()"), Reply::Int(1));
    assert_eq!(ev("return redis.breakpoint()"), Reply::Nil);
    assert_eq!(ev("return redis.acl_check_cmd('get','x')"), Reply::Int(1));
    assert_eq!(
        ev("return redis.sha1hex(123)"),
        Reply::bulk("40bd001563085fc35165329ea1ff5c5ecbdbbeef")
    );
    assert_eq!(
        ev("return redis.sha1hex({})"),
        Reply::bulk("da39a3ee5e6b4b0d3255bfef95601890afd80709")
    );
}

// Number arguments go to commands as %.17g: after
// EVAL "return redis.call('set','n', -0.1) and redis.call('get','n')" 0 Redis
// holds -0.10000000000000001; 3.0 -> 3; 1e20 -> 1e+20; 0/0 -> -nan; 1/0 -> inf;
// 123456789012345678 -> 1.2345678901234568e+17.
#[test]
fn number_arguments() {
    let vm = ScriptVm::new().unwrap();
    let mut h = FakeHost::default();
    for (expr, want) in [
        ("-0.1", "-0.10000000000000001"),
        ("3.0", "3"),
        ("1e20", "1e+20"),
        ("0/0", "-nan"),
        ("1/0", "inf"),
        ("123456789012345678", "1.2345678901234568e+17"),
    ] {
        let body = format!("return redis.call('set','n', {expr}) and redis.call('get','n')");
        assert_eq!(
            eval(&vm, &mut h, &body, &[], &[]),
            Reply::bulk(want.to_string()),
            "{expr}"
        );
    }
}

// EVAL "retur 1" 0 -> -ERR Error compiling script (new function): user_script:1: '=' expected near '1'
// (and the other syntax errors and shebang lines below, each with EVAL ... 0)
#[test]
fn load_errors() {
    let vm = ScriptVm::new().unwrap();
    let cases: [(&str, &str); 17] = [
        ("retur 1", "ERR Error compiling script (new function): user_script:1: '=' expected near '1'"),
        ("return 'a' 'b'", "ERR Error compiling script (new function): user_script:1: '<eof>' expected near ''b''"),
        ("x = ", "ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'"),
        ("for", "ERR Error compiling script (new function): user_script:1: '<name>' expected near '<eof>'"),
        ("return \"abc", "ERR Error compiling script (new function): user_script:1: unfinished string near '<eof>'"),
        ("#!lua\nretur 1", "ERR Error compiling script (new function): user_script:2: '=' expected near '1'"),
        ("#!lua", "ERR Invalid script shebang"),
        ("#!lua flags=no-writes", "ERR Invalid script shebang"),
        ("#!lua\treturn 1", "ERR Invalid script shebang"),
        ("#!lua flags=bad\nreturn 1", "ERR Unexpected flag in script shebang: bad"),
        ("#!lua foo=bar\nreturn 1", "ERR Unknown lua shebang option: foo=bar"),
        ("#!lua name=x\nreturn 1", "ERR Unknown lua shebang option: name=x"),
        ("#!luax\nreturn 1", "ERR Unexpected engine in script shebang: #!luax"),
        ("#! lua\nreturn 1", "ERR Unexpected engine in script shebang: #!"),
        ("#!lua flags=NO-WRITES\nreturn 1", "ERR Unexpected flag in script shebang: NO-WRITES"),
        ("#!lua flags=no-writes,,allow-oom\nreturn 1", "ERR Unexpected flag in script shebang: "),
        ("#comment\nreturn 1", "ERR Error compiling script (new function): user_script:1: unexpected symbol near '#'"),
    ];
    for (body, want) in cases {
        assert_eq!(vm.load(body.as_bytes()), Err(err(want)), "{body}");
    }
    assert_eq!(e(&vm, ""), Reply::Nil);
    assert_eq!(e(&vm, "#!lua flags=\nreturn 1"), Reply::Int(1));
    assert_eq!(e(&vm, "#!lua \nreturn 1"), Reply::Int(1));
    assert_eq!(e(&vm, "#!lua flags=no-writes\r\nreturn 1"), Reply::Int(1));
    assert_eq!(
        e(&vm, "#!lua\n\n\nerror('x')"),
        err("ERR user_script:4: x script: 54819863c2c2caeb8a8e41e23f6b0535b9d24597, on @user_script:4.")
    );
    // SCRIPT LOAD "return 1" -> e0e1f9fabfc9d4800c877a703b823ac0578ff8db
    let sha = vm.load(b"return 1").unwrap();
    assert_eq!(sha, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    assert!(vm.exists("E0E1F9FABFC9D4800C877A703B823AC0578FF8DB"));
    let flags = vm.flags(&sha).unwrap();
    assert!(flags.eval_compat && !flags.no_writes);
    let sha2 = vm
        .load(b"#!lua flags=no-writes,allow-oom\nreturn 1")
        .unwrap();
    let flags = vm.flags(&sha2).unwrap();
    assert!(!flags.eval_compat && flags.no_writes && flags.allow_oom && !flags.allow_stale);
    vm.flush();
    assert!(!vm.exists(&sha));
    // EVALSHA ffffffffffffffffffffffffffffffffffffffff 0
    assert_eq!(
        vm.run(&sha, vec![], vec![], false, &mut FakeHost::default()),
        err("NOSCRIPT No matching script. Please use EVAL.")
    );
}

// EVAL_RO "return redis.call('set','a','b')" 1 a, EVAL_RO "return redis.pcall('set','a','b')" 1 a,
// EVAL "#!lua flags=no-writes\nreturn redis.call('set','a','b')" 1 a,
// EVAL_RO "#!lua\nreturn redis.call('set','a','b')" 1 a
#[test]
fn read_only_scripts() {
    let vm = ScriptVm::new().unwrap();
    let mut h = FakeHost::default();
    let ro = |body: &str, h: &mut FakeHost| {
        let sha = vm.load(body.as_bytes()).unwrap();
        vm.run(&sha, vec![Bytes::from_static(b"a")], vec![], true, h)
    };
    assert_eq!(
        ro("return redis.call('set','a','b')", &mut h),
        err("ERR Write commands are not allowed from read-only scripts. script: ff967d0ae0e68b4f9e360fa91c54598bc25ad9b6, on @user_script:1.")
    );
    assert_eq!(
        ro("return redis.pcall('set','a','b')", &mut h),
        err("ERR Write commands are not allowed from read-only scripts.")
    );
    assert_eq!(ro("return redis.call('get','a')", &mut h), Reply::Nil);
    assert_eq!(
        ro("#!lua\nreturn redis.call('set','a','b')", &mut h),
        err("ERR Can not execute a script with write flag using *_ro command.")
    );
    assert_eq!(
        eval(&vm, &mut h, "#!lua flags=no-writes\nreturn redis.call('set','a','b')", &["a"], &[]),
        err("ERR Write commands are not allowed from read-only scripts. script: 6acb400a50fe96e33eca4e0af6e9dcfb21193726, on @user_script:2.")
    );
    assert_eq!(
        eval(&vm, &mut h, "#!lua flags=no-writes flags=allow-oom\nreturn redis.call('set','a','b')", &["a"], &[]),
        err("ERR Write commands are not allowed from read-only scripts. script: fef6d1829efe3754d0318ab2611d3eb116ca9218, on @user_script:2.")
    );
    assert!(h.calls.iter().all(|c| c[0] != "set"));
}

// EVAL "return {KEYS[1], ARGV[1], #KEYS, #ARGV}" 1 k1 a1
#[test]
fn keys_and_argv() {
    let vm = ScriptVm::new().unwrap();
    let mut h = FakeHost::default();
    assert_eq!(
        eval(
            &vm,
            &mut h,
            "return {KEYS[1], ARGV[1], #KEYS, #ARGV}",
            &["k1"],
            &["a1"]
        ),
        Reply::Array(vec![
            Reply::bulk("k1"),
            Reply::bulk("a1"),
            Reply::Int(1),
            Reply::Int(1)
        ])
    );
    assert_eq!(
        eval(
            &vm,
            &mut h,
            "redis.call('set', KEYS[1], ARGV[1]) return redis.call('get', KEYS[1])",
            &["k"],
            &["v"]
        ),
        Reply::bulk("v")
    );
    assert_eq!(
        eval(
            &vm,
            &mut h,
            "return redis.call('ECHO', '\\255\\0')",
            &[],
            &[]
        ),
        Reply::bulk(&b"\xff\x00"[..])
    );
}

// SCRIPT KILL during EVAL "local i = 0 while true do i = i + 1 end" 0 ->
// ERR Script killed by user with SCRIPT KILL... script: 3fcf51a9b854b8f66cb8685600b0d7df968f4398, on @user_script:1.
#[test]
fn kill_a_running_script() {
    let vm = std::sync::Arc::new(ScriptVm::new().unwrap());
    let handle = vm.kill_handle();
    assert!(!handle.kill());
    let killer = std::thread::spawn(move || {
        while !handle.is_running() {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(handle.elapsed().is_some());
        assert!(handle.kill());
    });
    let reply = e(&vm, "local i = 0 while true do i = i + 1 end");
    killer.join().unwrap();
    assert_eq!(
        reply,
        err("ERR Script killed by user with SCRIPT KILL... script: 3fcf51a9b854b8f66cb8685600b0d7df968f4398, on @user_script:1.")
    );
    // A pcall cannot swallow the kill.
    let handle = vm.kill_handle();
    let killer = std::thread::spawn(move || {
        while !handle.is_running() {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        handle.kill();
    });
    let reply = e(
        &vm,
        "while true do pcall(function() local i = 0 while true do i = i + 1 end end) end",
    );
    killer.join().unwrap();
    assert!(
        matches!(reply, Reply::Error(ref s) if s.starts_with("ERR Script killed by user with SCRIPT KILL...")),
        "{reply:?}"
    );
    assert_eq!(e(&vm, "return 1"), Reply::Int(1));
}
