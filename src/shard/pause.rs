//! CLIENT PAUSE: the server-wide pause that holds clients' commands back
//! (all of them, or only those that may write) until its end time or
//! CLIENT UNPAUSE.
//!
//! It lives with the shards because their reapers stop expiring keys
//! while writes are paused, as Redis's active expiry does: a pause is
//! what operators use to take a consistent look at the data (or fail
//! over), so nothing may change under it.
//!
//! Connections check it before every command with one relaxed load; only
//! while a pause is on do they read the clock and, when held, wait on the
//! watch channel for the pause to end or change.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use tokio::sync::watch;

/// What a pause holds back. Ordered: `All` is the stronger pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PauseKind {
    /// Commands that may write (or replicate): writes, EXEC of writes,
    /// scripts that may write, PUBLISH, PFCOUNT.
    Write = 1,
    /// Every command.
    All = 2,
}

/// The pause in force: its kind and when it ends.
type State = Option<(PauseKind, Instant)>;

/// The server's pause state (see the module doc).
#[derive(Debug)]
pub struct Pause {
    /// 0 when no pause was set (the fast path), else a `PauseKind`: a
    /// pause whose end has passed still shows here until the next check.
    kind: AtomicU8,
    /// The pause itself; waiters watch it for changes.
    state: watch::Sender<State>,
}

impl Default for Pause {
    fn default() -> Self {
        Pause {
            kind: AtomicU8::new(0),
            state: watch::Sender::new(None),
        }
    }
}

impl Pause {
    /// CLIENT PAUSE: as in Redis, a second pause keeps the stronger kind
    /// and the later end of the two.
    pub fn pause(&self, kind: PauseKind, until: Instant) {
        self.state.send_modify(|st| {
            let now = Instant::now();
            *st = Some(match *st {
                Some((k, end)) if end > now => (k.max(kind), end.max(until)),
                _ => (kind, until),
            });
            self.kind
                .store(st.map_or(0, |(k, _)| k as u8), Ordering::Release);
        });
    }

    /// CLIENT UNPAUSE: every held command goes on.
    pub fn unpause(&self) {
        self.state.send_modify(|st| {
            *st = None;
            self.kind.store(0, Ordering::Release);
        });
    }

    /// The pause in force now, with its end, if any.
    pub fn current(&self) -> Option<(PauseKind, Instant)> {
        if self.kind.load(Ordering::Acquire) == 0 {
            return None;
        }
        let st = *self.state.borrow();
        st.filter(|&(_, end)| end > Instant::now())
    }

    /// Whether writes are held now (by either kind of pause): the reapers
    /// expire nothing meanwhile.
    pub fn writes_paused(&self) -> bool {
        self.current().is_some()
    }

    /// Waits while a pause holds `held` back: until every pause that does
    /// has ended or been lifted. Returns at once when none does.
    pub async fn wait_while(&self, held: impl Fn(PauseKind) -> bool) {
        let mut changes = self.state.subscribe();
        loop {
            let Some((kind, end)) = *changes.borrow_and_update() else {
                return;
            };
            if end <= Instant::now() || !held(kind) {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(end.into()) => {}
                // The sender lives as long as the server: an error here
                // cannot happen while anyone waits.
                _ = changes.changed() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_second_pause_keeps_the_stronger_kind_and_the_later_end() {
        let p = Pause::default();
        assert!(p.current().is_none());
        let now = Instant::now();
        p.pause(PauseKind::Write, now + Duration::from_secs(100));
        p.pause(PauseKind::All, now + Duration::from_secs(1));
        assert_eq!(
            p.current(),
            Some((PauseKind::All, now + Duration::from_secs(100)))
        );
        p.unpause();
        assert!(p.current().is_none());
        assert!(!p.writes_paused());
    }

    #[test]
    fn an_ended_pause_holds_nothing() {
        let p = Pause::default();
        p.pause(PauseKind::All, Instant::now());
        assert!(p.current().is_none());
        // A new pause after an ended one starts afresh.
        let end = Instant::now() + Duration::from_secs(5);
        p.pause(PauseKind::Write, end);
        assert_eq!(p.current(), Some((PauseKind::Write, end)));
    }

    #[tokio::test]
    async fn waiters_go_on_when_unpaused_or_not_held() {
        let p = std::sync::Arc::new(Pause::default());
        p.pause(PauseKind::Write, Instant::now() + Duration::from_secs(60));
        // A read is not held by a write pause.
        p.wait_while(|k| k == PauseKind::All).await;
        let waiter = {
            let p = p.clone();
            tokio::spawn(async move { p.wait_while(|_| true).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        p.unpause();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by UNPAUSE")
            .unwrap();
    }
}
