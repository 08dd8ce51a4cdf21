//! Following one session: join the live tail, read the store up to what
//! the live window holds (one page at least: where the store begins and a
//! line changed on disk are the store's to say), then the window, deduped
//! by seq; one [`Delivery::Gap`] when it fell behind.

use super::live::{Cursor, Live, Read};
use crate::event::SessionEvent;
use cairn_store::{JournalItem, Store, StoreError};
use cairn_types::ids::{Seq, SessionId};
use std::collections::VecDeque;
use std::sync::Arc;

/// How many entries a subscriber reads from the store at once.
const READ_BATCH: usize = 1024;

/// What a subscriber receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// The next event.
    Event(Arc<SessionEvent>),
    /// An entry this cairn cannot interpret, in its place in the order.
    Unknown {
        /// Its seq.
        seq: Seq,
        /// The stored line.
        raw: String,
    },
    /// Events were missed; `resumed_at` is the first the subscriber will see.
    Gap {
        /// The next seq delivered.
        resumed_at: Seq,
    },
}

/// A subscriber's view of one session. Call [`Subscription::next`].
pub struct Subscription {
    session: SessionId,
    store: Arc<dyn Store>,
    live: Arc<Live>,
    /// The last seq taken from the live tail.
    live_seen: Seq,
    live_buf: VecDeque<Arc<SessionEvent>>,
    /// The chunk of the live ring it reads.
    live_at: Cursor,
    cursor: Seq,
    backlog: VecDeque<JournalItem>,
    catching_up: bool,
    /// A page of the store was read since `catching_up` was set.
    store_read: bool,
    lagged: bool,
    stash: Option<Arc<SessionEvent>>,
    /// The journal's drops seen (see [`Live::dropped`]).
    drops_seen: u64,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("session", &self.session)
            .field("cursor", &self.cursor)
            .finish()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.live.leave();
    }
}

impl Subscription {
    /// Follow `live` (already joined) from after `after`.
    pub(super) fn new(
        session: SessionId,
        store: Arc<dyn Store>,
        live: Arc<Live>,
        after: Seq,
    ) -> Self {
        let live_seen = live.last_seq();
        let drops_seen = live.drop_count();
        // Nothing is published after `after` yet: all it will be given
        // comes through the live tail it joined, and the store has nothing
        // to add (a chat call or CLI run following the run it starts —
        // one blocking read spared).
        let catching_up = after < live_seen;
        Subscription {
            session,
            store,
            live,
            live_seen,
            live_buf: VecDeque::new(),
            live_at: Cursor::default(),
            cursor: after,
            backlog: VecDeque::new(),
            catching_up,
            store_read: false,
            lagged: false,
            stash: None,
            drops_seen,
        }
    }

    /// The last seq delivered.
    pub fn cursor(&self) -> Seq {
        self.cursor
    }

    /// The next delivery; `None` when the journal is closed. A store error
    /// while catching up is returned as `Err`.
    pub async fn next(&mut self) -> Option<Result<Delivery, StoreError>> {
        loop {
            let drops = self.live.drop_count();
            if drops != self.drops_seen {
                // Seqs past the head were dropped and are minted again: a
                // start after one of them goes back to the head (everything
                // delivered so far was durable, so at or before it).
                self.drops_seen = drops;
                self.cursor = self.cursor.min(self.live.drop_head());
            }
            if let Some(item) = self.backlog.pop_front() {
                if item.seq() <= self.cursor {
                    continue;
                }
                self.cursor = item.seq();
                return Some(Ok(match item {
                    JournalItem::Event(e) => Delivery::Event(Arc::from(e)),
                    JournalItem::Unknown { seq, raw } => Delivery::Unknown { seq, raw },
                }));
            }
            if self.catching_up {
                // Once a page of the store has been read (the store has
                // had its say on where it begins, and on a line that
                // changed on disk), the rest comes from the live window
                // as soon as it holds the next entry, in order (it holds
                // published entries without a hole). A follower that
                // began behind a fast writer (an SSE client from seq 0
                // while a run emits) would otherwise read and parse every
                // entry from the store a page at a time, never reaching
                // the head it chases.
                if self.store_read {
                    let mut window = VecDeque::new();
                    if let Read::Entries(last) =
                        self.live
                            .read_after(self.cursor, &mut self.live_at, &mut window)
                    {
                        self.live_buf = window;
                        self.live_seen = last;
                        self.stash = None;
                        self.catching_up = false;
                        continue;
                    }
                }
                match self
                    .store
                    .read(&self.session, self.cursor, READ_BATCH)
                    .await
                {
                    Ok(items) => {
                        self.store_read = true;
                        // Only what the writer has published: an entry is
                        // in the store a moment before the writer has
                        // finished with it (a run's terminal entry before
                        // the run is marked ended), and a subscriber must
                        // not act on it before the runtime can. The rest
                        // comes through the live window.
                        let published = self.live.last_seq();
                        let mut items = items;
                        items.retain(|i| i.seq() <= published);
                        if items.is_empty() {
                            self.catching_up = false;
                        } else {
                            self.backlog.extend(items);
                        }
                    }
                    Err(StoreError::Truncated { oldest }) => {
                        self.store_read = true;
                        self.cursor = Seq(oldest.0 - 1);
                        return Some(Ok(Delivery::Gap { resumed_at: oldest }));
                    }
                    Err(e) => return Some(Err(e)),
                }
                continue;
            }
            let event = match self.stash.take() {
                Some(e) => e,
                None => match self.live_buf.pop_front() {
                    Some(e) => e,
                    None => {
                        match self.live.read_after(
                            self.live_seen,
                            &mut self.live_at,
                            &mut self.live_buf,
                        ) {
                            Read::Entries(last) => self.live_seen = last,
                            Read::Lagged { oldest } => {
                                self.lagged = true;
                                self.live_seen = Seq(oldest.0 - 1);
                            }
                            Read::Empty => self.live.changed(self.live_seen).await,
                            Read::Closed => return None,
                        }
                        continue;
                    }
                },
            };
            if event.seq <= self.cursor {
                continue;
            }
            if self.lagged {
                self.lagged = false;
                self.cursor = Seq(event.seq.0 - 1);
                let resumed_at = event.seq;
                self.stash = Some(event);
                return Some(Ok(Delivery::Gap { resumed_at }));
            }
            if event.seq != self.cursor.next() {
                // Something between the store read and the live stream: read it.
                self.catching_up = true;
                self.store_read = false;
                self.stash = Some(event);
                continue;
            }
            self.cursor = event.seq;
            return Some(Ok(Delivery::Event(event)));
        }
    }
}
