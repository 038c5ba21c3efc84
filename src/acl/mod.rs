//! Access control lists, as Redis 7.0 has them: users (the registry
//! here, their rules in [`rules`]), the permission check every command
//! passes before it runs ([`check`]), and the ACL LOG ([`log`]).
//!
//! A connection holds its user's [`UserSlot`]; ACL SETUSER replaces the
//! definition inside the slot, so connected clients of that user follow
//! the change at their next command, and ACL DELUSER marks the slot gone
//! and disconnects them. A slot whose user may run everything says so in
//! one flag, which is all the check costs for the default user.

pub mod check;
pub mod file;
pub mod log;
pub mod rules;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub use rules::{RuleError, Selector, User};

/// A user as connections refer to it: its name and current definition.
pub struct UserSlot {
    /// The user name.
    pub name: Vec<u8>,
    def: RwLock<Arc<User>>,
    /// Every command, key and channel allowed: the check is skipped.
    unrestricted: AtomicBool,
}

impl std::fmt::Debug for UserSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserSlot({})", String::from_utf8_lossy(&self.name))
    }
}

impl UserSlot {
    fn new(name: &[u8], user: User) -> Arc<UserSlot> {
        let slot = UserSlot {
            name: name.to_vec(),
            def: RwLock::new(Arc::new(User::new(false))),
            unrestricted: AtomicBool::new(false),
        };
        slot.set(user);
        Arc::new(slot)
    }

    /// The current definition.
    pub fn user(&self) -> Arc<User> {
        self.def.read().clone()
    }

    /// Replaces the definition (connected clients use it from their next
    /// command on).
    pub fn set(&self, user: User) {
        let root = user.root();
        let free = root.allcommands && root.allkeys && root.allchannels;
        *self.def.write() = Arc::new(user);
        self.unrestricted.store(free, Ordering::Release);
    }

    /// Whether the user may run anything (no check needed).
    #[inline]
    pub fn unrestricted(&self) -> bool {
        self.unrestricted.load(Ordering::Acquire)
    }

    /// The name as text.
    pub fn name_str(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// The server's users and its ACL log.
pub struct Acl {
    users: RwLock<BTreeMap<Vec<u8>, Arc<UserSlot>>>,
    /// The `default` user, which new connections start as. It is never
    /// deleted; ACL LOAD copies the file's definition into it.
    default: Arc<UserSlot>,
    /// The ACL LOG, newest first.
    pub log: Mutex<log::AclLog>,
}

impl Default for Acl {
    fn default() -> Acl {
        Acl::new()
    }
}

impl Acl {
    /// Just the default user.
    pub fn new() -> Acl {
        let default = UserSlot::new(b"default", User::default_user());
        let mut users = BTreeMap::new();
        users.insert(b"default".to_vec(), default.clone());
        Acl {
            users: RwLock::new(users),
            default,
            log: Mutex::new(log::AclLog::default()),
        }
    }

    /// The default user's slot.
    pub fn default_user(&self) -> Arc<UserSlot> {
        self.default.clone()
    }

    /// A user by name.
    pub fn get(&self, name: &[u8]) -> Option<Arc<UserSlot>> {
        self.users.read().get(name).cloned()
    }

    /// Every user, by name.
    pub fn users(&self) -> Vec<Arc<UserSlot>> {
        self.users.read().values().cloned().collect()
    }

    /// Whether a new connection starts authenticated: the default user
    /// is on and needs no password.
    pub fn default_is_open(&self) -> bool {
        let u = self.default.user();
        u.nopass && u.enabled
    }

    /// Whether a connection that has not authenticated must (Redis's
    /// authRequired, judged on the default user as it is now).
    pub fn auth_required(&self) -> bool {
        !self.default_is_open()
    }

    /// `requirepass`: the default user's password (none: nopass).
    pub fn set_requirepass(&self, pass: &str) {
        let mut u = (*self.default.user()).clone();
        let _ = u.apply(b"resetpass", false);
        let op = if pass.is_empty() {
            b"nopass".to_vec()
        } else {
            [b">".as_slice(), pass.as_bytes()].concat()
        };
        let _ = u.apply(&op, false);
        self.default.set(u);
    }

    /// The slot of the user `name` if the password authenticates it.
    pub fn authenticate(&self, name: &[u8], pass: &[u8]) -> Option<Arc<UserSlot>> {
        let slot = self.get(name)?;
        slot.user().password_ok(pass).then_some(slot)
    }

    /// ACL SETUSER's last step: replaces (or creates) `name`.
    pub fn put(&self, name: &[u8], user: User) {
        let mut users = self.users.write();
        match users.get(name) {
            Some(slot) => slot.set(user),
            None => {
                users.insert(name.to_vec(), UserSlot::new(name, user));
            }
        }
    }

    /// Removes a user; its slot is returned so its clients can be closed.
    /// Until they are, the slot allows nothing.
    pub fn remove(&self, name: &[u8]) -> Option<Arc<UserSlot>> {
        let slot = self.users.write().remove(name)?;
        slot.set(User::new(false));
        Some(slot)
    }

    /// Replaces every user (ACL LOAD): the default user keeps its slot
    /// (with the new definition, or the initial one if the set has none);
    /// the old slots of every other user are returned, to be closed.
    pub fn replace_all(&self, mut new: BTreeMap<Vec<u8>, User>) -> Vec<Arc<UserSlot>> {
        let mut users = self.users.write();
        let def = new
            .remove(b"default".as_slice())
            .unwrap_or_else(User::default_user);
        self.default.set(def);
        let old = std::mem::take(&mut *users);
        users.insert(b"default".to_vec(), self.default.clone());
        for (name, u) in new {
            users.insert(name.clone(), UserSlot::new(&name, u));
        }
        let gone: Vec<Arc<UserSlot>> = old
            .into_iter()
            .filter(|(n, _)| n.as_slice() != b"default")
            .map(|(_, s)| s)
            .collect();
        for slot in &gone {
            slot.set(User::new(false));
        }
        gone
    }

    /// Every user as a line of an ACL file (`user <name> <rules>`).
    pub fn lines(&self) -> Vec<String> {
        self.users
            .read()
            .values()
            .map(|s| format!("user {} {}", s.name_str(), s.user().describe()))
            .collect()
    }
}

/// The users a server starts with: the default user, with `requirepass`
/// as its password if set, then the users of `aclfile` if one is
/// configured (a file that does not load is reported and ignored; Redis
/// would refuse to start).
pub fn startup(rt: &crate::server::Runtime) -> Acl {
    let acl = Acl::new();
    let pass = rt.requirepass();
    if !pass.is_empty() {
        acl.set_requirepass(pass);
    }
    let path = rt.get("aclfile");
    if !path.is_empty() {
        let allchannels = rt.get("acl-pubsub-default") == "allchannels";
        match file::load(path, allchannels) {
            Ok(users) => {
                acl.replace_all(users);
            }
            Err(e) => tracing::warn!("aclfile {path}: {e}"),
        }
    }
    acl
}
