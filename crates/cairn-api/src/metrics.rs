//! `GET /metrics`: Prometheus text.

use super::AppState;
use cairn_runtime::runtime::RunState;
use std::fmt::Write;

pub async fn metrics(
    axum::extract::State(s): axum::extract::State<AppState>,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    let m = s.rt.metrics();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP cairn_runs Runs hosted by this process, by state (ended runs since start)."
    );
    let _ = writeln!(out, "# TYPE cairn_runs gauge");
    for (state, n) in &m.runs {
        let name = serde_json::to_value(state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let _ = writeln!(out, "cairn_runs{{state=\"{name}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP cairn_events_appended_total Journal entries appended by this process."
    );
    let _ = writeln!(out, "# TYPE cairn_events_appended_total counter");
    let _ = writeln!(out, "cairn_events_appended_total {}", m.events_appended);
    let _ = writeln!(out, "# HELP cairn_subscribers Journal subscribers now.");
    let _ = writeln!(out, "# TYPE cairn_subscribers gauge");
    let _ = writeln!(out, "cairn_subscribers {}", m.subscribers);
    let _ = writeln!(
        out,
        "# HELP cairn_decisions_pending Decisions waiting for an answer."
    );
    let _ = writeln!(out, "# TYPE cairn_decisions_pending gauge");
    let _ = writeln!(out, "cairn_decisions_pending {}", m.decisions_pending);
    let _ = writeln!(
        out,
        "# HELP cairn_live_windows_evicted_total Live windows nobody followed, emptied to stay under [limits] live_total_bytes."
    );
    let _ = writeln!(out, "# TYPE cairn_live_windows_evicted_total counter");
    let _ = writeln!(
        out,
        "cairn_live_windows_evicted_total {}",
        m.live_windows_evicted
    );
    let gauges = [
        (
            "cairn_open_journals",
            "Sessions whose journal and live window are held in memory.",
            m.open_journals as u64,
        ),
        (
            "cairn_live_window_bytes",
            "Bytes (as journaled) every session's live window holds together.",
            m.live_window_bytes,
        ),
        (
            "cairn_compiled_components",
            "Compiled components held ready.",
            m.compiled_components.0 as u64,
        ),
        (
            "cairn_compiled_component_bytes",
            "Bytes of the compiled components held ready.",
            m.compiled_components.1,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name} {value}");
    }
    if let Some((leases, heard)) = m.shared {
        let _ = writeln!(
            out,
            "# HELP cairn_leases_held Session leases this instance holds on the shared store."
        );
        let _ = writeln!(out, "# TYPE cairn_leases_held gauge");
        let _ = writeln!(out, "cairn_leases_held {leases}");
        let _ = writeln!(
            out,
            "# HELP cairn_relay_notifications_total Appends other writers announced (LISTEN cairn_journal)."
        );
        let _ = writeln!(out, "# TYPE cairn_relay_notifications_total counter");
        let _ = writeln!(out, "cairn_relay_notifications_total {heard}");
    }
    let _ = RunState::Running;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        out,
    )
}
