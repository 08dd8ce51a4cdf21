//! The cross-instance relay: a follower on an instance that does not hold
//! the session reads the journal's rows, woken by `LISTEN cairn_journal`
//! (every append notifies `<session_id> <last_seq>` when it commits). It
//! sees only committed rows, in seq order, each once, from any cursor — the
//! same seq and `Last-Event-ID` semantics as a local subscriber; the shared
//! store holds every entry, so a relay never has a gap to report.
//!
//! One `LISTEN` connection per instance serves every follower. When it
//! drops, followers fall back to polling (every [`POLL`]) until it is back.

use super::{CHANNEL, PgStore};
use cairn_store::{JournalItem, JournalStore, StoreError};
use cairn_types::ids::{Seq, SessionId};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// How often a follower looks again without a notification (the safety
/// net for a lost `LISTEN` connection).
pub const POLL: Duration = Duration::from_secs(1);

/// Rows read per page.
const PAGE: usize = 512;

/// The relay of one instance.
pub struct Relay {
    store: Arc<PgStore>,
    wake: broadcast::Sender<Option<(SessionId, Seq)>>,
    task: tokio::task::JoinHandle<()>,
    heard: Arc<std::sync::atomic::AtomicU64>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Relay {
    /// Start listening (a connection of its own, kept up with backoff).
    pub fn start(store: Arc<PgStore>) -> Relay {
        let (wake, _) = broadcast::channel(4096);
        let config = store.config().clone();
        let tx = wake.clone();
        let heard = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = heard.clone();
        let task = tokio::spawn(async move {
            let mut backoff = Duration::from_millis(50);
            loop {
                if listen(&config, &tx, &counter).await.is_ok() {
                    backoff = Duration::from_millis(50);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(POLL);
            }
        });
        Relay {
            store,
            wake,
            task,
            heard,
        }
    }

    /// Notifications heard since the start (for metrics and tests).
    pub fn heard(&self) -> u64 {
        self.heard.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Follow `session` from after `after`.
    pub fn follow(&self, session: &SessionId, after: Seq) -> Follower {
        Follower {
            store: self.store.clone(),
            session: session.clone(),
            cursor: after,
            ready: VecDeque::new(),
            wake: self.wake.subscribe(),
        }
    }
}

/// One `LISTEN` connection's life: forward every notification until it
/// fails.
async fn listen(
    config: &tokio_postgres::Config,
    tx: &broadcast::Sender<Option<(SessionId, Seq)>>,
    heard: &std::sync::atomic::AtomicU64,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tokio_postgres::NoTls).await?;
    let (notes_tx, mut notes) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        use futures_util::StreamExt;
        while let Some(message) = messages.next().await {
            match message {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                    if notes_tx.send(n.payload().to_string()).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    let listening = client.batch_execute(&format!("LISTEN {CHANNEL}")).await;
    if let Err(e) = listening {
        driver.abort();
        return Err(e);
    }
    // Listening from here: wake everyone once, so nothing committed while
    // the connection was down is waited on.
    let _ = tx.send(None);
    while let Some(payload) = notes.recv().await {
        heard.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some((session, seq)) = payload.rsplit_once(' ') else {
            continue;
        };
        if let (Ok(session), Ok(seq)) = (SessionId::from_key(session), seq.parse::<u64>()) {
            let _ = tx.send(Some((session, Seq(seq))));
        }
    }
    driver.abort();
    Ok(())
}

/// A follower of one session through the relay.
pub struct Follower {
    store: Arc<PgStore>,
    session: SessionId,
    cursor: Seq,
    ready: VecDeque<JournalItem>,
    wake: broadcast::Receiver<Option<(SessionId, Seq)>>,
}

impl Follower {
    /// The last seq delivered.
    pub fn cursor(&self) -> Seq {
        self.cursor
    }

    /// The next committed entry after the cursor, waiting for one.
    pub async fn next(&mut self) -> Result<JournalItem, StoreError> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                self.cursor = item.seq();
                return Ok(item);
            }
            let page = self.store.read(&self.session, self.cursor, PAGE).await?;
            if !page.is_empty() {
                self.ready.extend(page);
                continue;
            }
            self.wait().await;
        }
    }

    /// Until a notification says the session moved past the cursor (or
    /// anything that may have been missed), or the poll interval passes.
    async fn wait(&mut self) {
        let deadline = tokio::time::sleep(POLL);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                woke = self.wake.recv() => match woke {
                    Ok(Some((session, seq))) if session == self.session && seq > self.cursor => return,
                    Ok(Some(_)) => {}
                    Ok(None) => return,
                    // Missed some: look again.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }
}
