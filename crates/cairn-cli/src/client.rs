//! The CLI's view of a cairn: in-process on a home, or a server over HTTP.
//! Both answer with the same JSON the API serves.

use cairn_runtime::ids::{DecisionId, RunId, Seq, SessionId};
use cairn_runtime::journal::Delivery;
use cairn_runtime::runtime::{Runtime, RuntimeConfig};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::Value;
use std::path::PathBuf;

/// How many times in a row a dropped event stream is resumed.
const RESUME_ATTEMPTS: u32 = 5;

/// `--server URL` or `--home DIR`.
#[derive(Debug, clap::Args)]
pub struct TargetArgs {
    /// A cairn server, such as http://127.0.0.1:7777.
    #[arg(long, value_name = "URL", conflicts_with = "home")]
    server: Option<String>,
    /// The cairn home, in-process (default: $CAIRN_HOME, or ./.cairn).
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Print JSON for programs.
    #[arg(long)]
    pub json: bool,
}

/// Where commands go.
pub enum Client {
    /// An in-process runtime.
    Local(Runtime),
    /// A server.
    Remote {
        /// Its base URL.
        base: String,
        /// The HTTP client.
        http: reqwest::Client,
    },
}

impl TargetArgs {
    /// The home this command reads in-process (none with `--server`).
    pub fn local_home(&self) -> Option<PathBuf> {
        self.server.is_none().then(|| self.home())
    }

    fn home(&self) -> PathBuf {
        super::home_path(self.home.as_deref())
    }

    fn remote(url: &str) -> Client {
        Client::Remote {
            base: url.trim_end_matches('/').to_string(),
            http: reqwest::Client::new(),
        }
    }

    /// For a command that only reads: the home, read-only (no lock, no
    /// repair, no restore), or the server. `live` asks for live events: a
    /// served home is then read through its server, which has them.
    pub async fn reader(&self, live: bool) -> anyhow::Result<Client> {
        if let Some(url) = &self.server {
            return Ok(Self::remote(url));
        }
        let home = self.home();
        if live && let Some(url) = cairn_runtime::home_lock::holder(&home).and_then(|h| h.url) {
            eprintln!(
                "cairn: home {} is served at {url}; following through the server",
                home.display()
            );
            return Ok(Self::remote(&url));
        }
        let mut config = RuntimeConfig::load(home, None)?;
        config.read_only = true;
        config.restore = false;
        config.sockets = false;
        Ok(Client::Local(crate::open_runtime(config).await?))
    }

    /// For a command that writes (`command` names it in the home lock): the
    /// home, owned for the command's length, or the server. A home a server
    /// holds is reached through that server (said on stderr); one another
    /// process holds is refused, naming it.
    pub async fn writer(&self, command: &str) -> anyhow::Result<Client> {
        if let Some(url) = &self.server {
            return Ok(Self::remote(url));
        }
        let home = self.home();
        let mut config = RuntimeConfig::load(home.clone(), None)?;
        // A management command never restores or serves sockets; `cairn
        // serve` and `cairn run` own live work.
        config.restore = false;
        config.sockets = false;
        config.command = command.to_string();
        match crate::open_runtime(config).await {
            Ok(rt) => Ok(Client::Local(rt)),
            Err(cairn_runtime::runtime::RuntimeError::HomeBusy(busy)) => match busy.server_url() {
                Some(url) => {
                    eprintln!("cairn: {busy}; sending the request there");
                    Ok(Self::remote(url))
                }
                None => Err(busy.into()),
            },
            Err(e) => Err(e.into()),
        }
    }
}

async fn check(resp: reqwest::Response) -> anyhow::Result<reqwest::Response> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    let code = body["error"]["code"].as_str().unwrap_or("error");
    let message = body["error"]["message"].as_str().unwrap_or("(no message)");
    anyhow::bail!("{code} ({status}): {message}")
}

impl Client {
    pub(super) async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let Client::Remote { base, http } = self else {
            unreachable!()
        };
        let resp = http
            .get(format!("{base}{path}"))
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach {base}: {e}"))?;
        Ok(check(resp).await?.json().await?)
    }

    pub(super) async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let Client::Remote { base, http } = self else {
            unreachable!()
        };
        let resp = http
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach {base}: {e}"))?;
        let resp = check(resp).await?;
        Ok(resp.json().await.unwrap_or(Value::Null))
    }

    /// Every session's summary.
    pub async fn sessions(&self) -> anyhow::Result<Value> {
        match self {
            Client::Local(rt) => {
                let mut out = Vec::new();
                let mut cursor = None;
                loop {
                    let page = rt
                        .sessions_page(None, cursor.as_deref(), cairn_runtime::runtime::MAX_PAGE)
                        .await?;
                    for row in page.items {
                        out.push(serde_json::to_value(row)?);
                    }
                    match page.next_cursor {
                        Some(c) => cursor = Some(c),
                        None => break,
                    }
                }
                Ok(Value::Array(out))
            }
            Client::Remote { base, http } => {
                let mut out = Vec::new();
                let mut url = format!("{base}/v1/sessions");
                loop {
                    let resp = http
                        .get(&url)
                        .send()
                        .await
                        .map_err(|e| anyhow::anyhow!("cannot reach {base}: {e}"))?;
                    let resp = check(resp).await?;
                    let next = resp
                        .headers()
                        .get("x-next-cursor")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    if let Value::Array(rows) = resp.json().await? {
                        out.extend(rows);
                    }
                    match next {
                        Some(c) => url = format!("{base}/v1/sessions?cursor={}", enc(&c)),
                        None => break,
                    }
                }
                Ok(Value::Array(out))
            }
        }
    }

    /// One session's summary and runs.
    pub async fn inspect(&self, session: &SessionId) -> anyhow::Result<(Value, Value)> {
        match self {
            Client::Local(rt) => Ok((
                serde_json::to_value(rt.summary(session).await?)?,
                serde_json::to_value(rt.session_runs(session).await?)?,
            )),
            Client::Remote { .. } => {
                let summary = self
                    .get(&format!("/v1/sessions/{}", enc(session.name())))
                    .await?;
                let runs = self
                    .get(&format!("/v1/runs?session={}", enc(session.name())))
                    .await?;
                let mine: Vec<Value> = runs.as_array().map(|a| a.to_vec()).unwrap_or_default();
                Ok((summary, Value::Array(mine)))
            }
        }
    }

    /// Print a session's events after `after` with `print`; with `follow`,
    /// keep going until interrupted.
    pub async fn events(
        &self,
        session: &SessionId,
        after: u64,
        follow: bool,
        mut print: impl FnMut(&Value, &str) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        match self {
            Client::Local(rt) => {
                if !follow {
                    for item in rt.read(session, Seq(after)).await? {
                        let (value, line) = item_json(&item);
                        print(&value, &line)?;
                    }
                    return Ok(());
                }
                let mut sub = rt.subscribe(session, Seq(after)).await?;
                loop {
                    tokio::select! {
                        d = sub.next() => match d {
                            Some(d) => {
                                let (value, line) = delivery_json(&d?);
                                print(&value, &line)?
                            }
                            None => return Ok(()),
                        },
                        _ = tokio::signal::ctrl_c() => return Ok(()),
                    }
                }
            }
            Client::Remote { base, http } => {
                let last = if follow {
                    u64::MAX
                } else {
                    self.get(&format!("/v1/sessions/{}", enc(session.name())))
                        .await?["last_seq"]
                        .as_u64()
                        .unwrap_or(0)
                };
                if last <= after {
                    return Ok(());
                }
                // One SSE parser from a crate (a character split across
                // chunks stays whole); a dropped stream resumes after the
                // last seq seen (`Last-Event-ID`), a few times in a row.
                let url = format!(
                    "{base}/v1/sessions/{}/events?after={after}",
                    enc(session.name())
                );
                let mut seen: Option<u64> = None;
                let mut failures = 0u32;
                loop {
                    let mut req = http.get(&url).header("accept", "text/event-stream");
                    if let Some(seq) = seen {
                        req = req.header("last-event-id", seq.to_string());
                    }
                    let ended = match req.send().await {
                        Ok(resp) => {
                            let body = check(resp).await?.bytes_stream();
                            let mut events = body.eventsource();
                            loop {
                                let event = tokio::select! {
                                    e = events.next() => e,
                                    _ = tokio::signal::ctrl_c() => return Ok(()),
                                };
                                match event {
                                    None => break "the server closed the stream".to_string(),
                                    Some(Err(e)) => break format!("the stream broke: {e}"),
                                    Some(Ok(event)) => {
                                        failures = 0;
                                        if event.data.is_empty() {
                                            continue;
                                        }
                                        if let Ok(seq) = event.id.parse::<u64>() {
                                            seen = Some(seq);
                                        }
                                        let mut value: Value = serde_json::from_str(&event.data)
                                            .unwrap_or(Value::String(event.data.clone()));
                                        let mut line = event.data;
                                        if event.event == "gap" {
                                            value = serde_json::json!({ "gap": value });
                                            line = value.to_string();
                                        }
                                        print(&value, &line)?;
                                        if value["seq"].as_u64().is_some_and(|s| s >= last) {
                                            return Ok(());
                                        }
                                    }
                                }
                            }
                        }
                        Err(e) => format!("cannot reach {base}: {e}"),
                    };
                    failures += 1;
                    if failures > RESUME_ATTEMPTS {
                        anyhow::bail!(
                            "{ended}; gave up after {RESUME_ATTEMPTS} attempts to resume"
                        );
                    }
                    let after = seen.unwrap_or(after);
                    eprintln!("{ended}; resuming after seq {after}");
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(250 << failures.min(4))) => {}
                        _ = tokio::signal::ctrl_c() => return Ok(()),
                    }
                }
            }
        }
    }

    /// Answer a decision.
    pub async fn decide(&self, id: &DecisionId, value: Value) -> anyhow::Result<()> {
        match self {
            Client::Local(rt) => Ok(rt.decide(id, value).await?),
            Client::Remote { .. } => self
                .post(
                    &format!("/v1/decisions/{id}"),
                    serde_json::json!({ "value": value }),
                )
                .await
                .map(|_| ()),
        }
    }

    /// Cancel a live run.
    pub async fn cancel(&self, run: RunId) -> anyhow::Result<()> {
        match self {
            Client::Local(rt) => Ok(rt.cancel(
                run,
                cairn_runtime::journal::event::CancelReason::External,
                "cancelled from the CLI",
            )?),
            Client::Remote { .. } => self
                .post(&format!("/v1/runs/{run}/cancel"), serde_json::json!({}))
                .await
                .map(|_| ()),
        }
    }

    /// Resume a parked run; the new run's ids.
    pub async fn resume(&self, run: RunId) -> anyhow::Result<Value> {
        match self {
            Client::Local(rt) => {
                let started = rt.resume(run, None).await?;
                // In-process, the new run lives as long as this command: see it through.
                let facts = rt.wait(started.run_id).await?;
                Ok(
                    serde_json::json!({ "run_id": started.run_id, "session_id": started.session_id, "status": facts.status }),
                )
            }
            Client::Remote { .. } => {
                self.post(&format!("/v1/runs/{run}/resume"), serde_json::json!({}))
                    .await
            }
        }
    }

    /// Compact, branch (`at`) or fork (`before`) a session; the result as JSON.
    pub async fn segment(&self, session: &SessionId, op: SegmentOp) -> anyhow::Result<Value> {
        match self {
            Client::Local(rt) => Ok(match op {
                SegmentOp::Compact => serde_json::to_value(rt.compact(session).await?)?,
                SegmentOp::Branch(at) => serde_json::to_value(rt.branch(session, Seq(at)).await?)?,
                SegmentOp::Fork(before, None) => {
                    serde_json::to_value(rt.fork(session, Seq(before), None).await?)?
                }
                SegmentOp::Fork(before, Some((component, mode))) => serde_json::to_value(
                    rt.fork_onto(
                        session,
                        Seq(before),
                        None,
                        &cairn_runtime::runtime::ComponentRef::parse(&component),
                        mode,
                    )
                    .await?,
                )?,
            }),
            Client::Remote { .. } => {
                let s = enc(session.name());
                match op {
                    SegmentOp::Compact => {
                        self.post(&format!("/v1/sessions/{s}/compact"), serde_json::json!({}))
                            .await
                    }
                    SegmentOp::Branch(at) => {
                        self.post(
                            &format!("/v1/sessions/{s}/branch"),
                            serde_json::json!({ "at_seq": at }),
                        )
                        .await
                    }
                    SegmentOp::Fork(before, onto) => {
                        let mut body = serde_json::json!({ "before_seq": before });
                        if let Some((component, mode)) = onto {
                            body["component"] = serde_json::json!(component);
                            body["mode"] = serde_json::json!(mode);
                        }
                        self.post(&format!("/v1/sessions/{s}/fork"), body).await
                    }
                }
            }
        }
    }

    /// Move a session to another component (`cairn update`); the report.
    pub async fn update(
        &self,
        session: &SessionId,
        component: &str,
        mode: cairn_runtime::journal::event::UpdateMode,
        dry_run: bool,
    ) -> anyhow::Result<Value> {
        match self {
            Client::Local(rt) => Ok(serde_json::to_value(
                rt.update(
                    session,
                    &cairn_runtime::runtime::ComponentRef::parse(component),
                    mode,
                    dry_run,
                )
                .await?,
            )?),
            Client::Remote { .. } => {
                let s = enc(session.name());
                self.post(
                    &format!("/v1/sessions/{s}/update"),
                    serde_json::json!({ "component": component, "mode": mode, "dry_run": dry_run }),
                )
                .await
            }
        }
    }

    /// Move every session bound to `from` to `to` where shadow replay finds
    /// it compatible (`cairn update --from --to`); the report. Locally, a
    /// terminal sees how far it is.
    pub async fn update_all(
        &self,
        from: &str,
        to: &str,
        workspace: Option<&str>,
        dry_run: bool,
    ) -> anyhow::Result<Value> {
        use std::io::IsTerminal;
        match self {
            Client::Local(rt) => {
                let terminal = std::io::stderr().is_terminal();
                let progress = move |done: usize, total: usize| {
                    if terminal {
                        eprint!("\rchecking sessions: {done} of {total}");
                        if done == total {
                            eprintln!();
                        }
                    }
                };
                Ok(serde_json::to_value(
                    rt.update_all(
                        &cairn_runtime::runtime::ComponentRef::parse(from),
                        &cairn_runtime::runtime::ComponentRef::parse(to),
                        workspace,
                        dry_run,
                        &progress,
                    )
                    .await?,
                )?)
            }
            Client::Remote { .. } => {
                if workspace.is_some() {
                    anyhow::bail!(
                        "over HTTP an update takes the token's workspace: drop --workspace"
                    );
                }
                self.post(
                    &format!("/v1/components/{}/update", enc(from)),
                    serde_json::json!({ "to": to, "dry_run": dry_run }),
                )
                .await
            }
        }
    }

    /// Delete a session.
    pub async fn rm(&self, session: &SessionId) -> anyhow::Result<()> {
        match self {
            Client::Local(rt) => {
                rt.delete_session(session).await?;
                cairn_orchestration::Queue::open(rt.clone())?
                    .session_deleted(session)
                    .await?;
                Ok(())
            }
            Client::Remote { base, http } => {
                let resp = http
                    .delete(format!("{base}/v1/sessions/{}", enc(session.name())))
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot reach {base}: {e}"))?;
                check(resp).await.map(|_| ())
            }
        }
    }
}

/// A segment operation.
#[derive(Debug, Clone)]
pub enum SegmentOp {
    /// Compact.
    Compact,
    /// Branch at a seq.
    Branch(u64),
    /// Fork before a seq, onto another component (checked as by the mode)
    /// when one is named.
    Fork(
        u64,
        Option<(String, cairn_runtime::journal::event::UpdateMode)>,
    ),
}

/// Percent-encode a path segment.
pub fn enc(s: &str) -> String {
    /// Everything but the unreserved characters of RFC 3986.
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

/// An entry as JSON, and its journal line as written (checksum included).
fn item_json(item: &cairn_runtime::store::JournalItem) -> (Value, String) {
    match item {
        cairn_runtime::store::JournalItem::Event(e) => (
            serde_json::to_value(&**e).expect("events serialize"),
            e.line().to_string(),
        ),
        cairn_runtime::store::JournalItem::Unknown { raw, .. } => (
            serde_json::from_str(raw).unwrap_or(Value::String(raw.clone())),
            raw.clone(),
        ),
    }
}

fn delivery_json(d: &Delivery) -> (Value, String) {
    match d {
        Delivery::Event(e) => (
            serde_json::to_value(&**e).expect("events serialize"),
            e.line().to_string(),
        ),
        Delivery::Unknown { raw, .. } => (
            serde_json::from_str(raw).unwrap_or(Value::String(raw.clone())),
            raw.clone(),
        ),
        Delivery::Gap { resumed_at } => {
            let gap = serde_json::json!({ "gap": { "resumed_at": resumed_at } });
            let line = gap.to_string();
            (gap, line)
        }
    }
}
