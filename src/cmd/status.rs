//! `x402-probe status [--api URL]`: the running daemon's view of itself, from its API's
//! `/v1/status`, printed for a terminal: subjects by verdict, next due runs, paid budget left,
//! outages. Exit codes: 0 printed, 1 the daemon did not answer (or answered an error), 2 usage.

use anyhow::Result;

use super::api_client;
use crate::api::types::StatusView;
use crate::report::one_line;

/// Options of `x402-probe status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The daemon's API (`[api] bind`; http only, normally loopback).
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:8402",
        env = "X402_PROBE_API"
    )]
    pub api: String,
    /// Print the status document as JSON instead.
    #[arg(long)]
    pub json: bool,
}

/// Paused subjects listed by URL (the count is always shown).
const PAUSED_SHOWN: usize = 10;

pub fn run(args: Args) -> Result<i32> {
    let uri = api_client::uri(&args.api, "/v1/status")?;
    let Some((view, _)) =
        api_client::fetch::<StatusView>("status", &args.api, &uri, None, "a status document")
    else {
        return Ok(1);
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        print!("{}", render(&view, &args.api));
    }
    Ok(0)
}

/// The status for a terminal (every text from the daemon made printable).
pub fn render(v: &StatusView, api: &str) -> String {
    let mut out = String::new();
    let clock = if v.simulated {
        " (simulated clock)"
    } else {
        ""
    };
    out.push_str(&format!(
        "x402-probe daemon at {}, {}{clock}\n",
        one_line(api, 100),
        one_line(&v.now, 40)
    ));
    let states: Vec<String> = v
        .subjects_by_state
        .iter()
        .map(|(k, n)| format!("{n} {}", one_line(k, 20)))
        .collect();
    out.push_str(&format!(
        "subjects   {}\n",
        if states.is_empty() {
            "none".into()
        } else {
            states.join(", ")
        }
    ));
    if !v.paused.is_empty() {
        out.push_str(&format!(
            "paused     {} (not probed until resumed)\n",
            v.paused.len()
        ));
        for p in v.paused.iter().take(PAUSED_SHOWN) {
            out.push_str(&format!("           {}\n", one_line(&p.url, 120)));
        }
        if v.paused.len() > PAUSED_SHOWN {
            out.push_str(&format!(
                "           and {} more\n",
                v.paused.len() - PAUSED_SHOWN
            ));
        }
    }
    let mut verdicts: Vec<String> = ["ok", "caution", "avoid", "down", "unverified"]
        .iter()
        .map(|k| {
            format!(
                "{k} {}",
                v.subjects_by_verdict.get(*k).copied().unwrap_or(0)
            )
        })
        .collect();
    verdicts.push(format!("unscored {}", v.unscored));
    out.push_str(&format!("verdicts   {}\n", verdicts.join(", ")));
    out.push_str(&format!("runs       {} in flight\n", v.runs_in_flight));
    if v.next_due.is_empty() {
        out.push_str("next due   nothing scheduled\n");
    }
    for (i, due) in v.next_due.iter().enumerate() {
        let label = if i == 0 { "next due" } else { "" };
        out.push_str(&format!(
            "{label:<10} {}  {}\n",
            one_line(&due.due, 40),
            one_line(&due.url, 120)
        ));
    }
    match &v.paid_budget {
        None => out.push_str("budget     no paid calls (no [pay] table)\n"),
        Some(b) => out.push_str(&format!(
            "budget     ${} left of ${} in 24 h (${} spent or reserved, {} open)\n",
            one_line(&b.left_usd, 40),
            one_line(&b.cap_usd, 40),
            one_line(&b.spent_usd, 40),
            b.open_reservations
        )),
    }
    let open = if v.outage_open {
        "OPEN now"
    } else {
        "none open"
    };
    out.push_str(&format!(
        "outages    {open}; {} window(s) on record\n",
        v.outages.len()
    ));
    for o in v.outages.iter().rev().take(5) {
        out.push_str(&format!(
            "           {} .. {}\n",
            one_line(&o.from, 40),
            o.to.as_deref()
                .map_or("now".to_string(), |t| one_line(t, 40))
        ));
    }
    out.push_str(&format!(
        "ledger     {} entries, rubric {}\n",
        v.ledger_seq,
        one_line(&v.rubric_sha256, 64)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::PausedSubject;

    fn status(paused: usize) -> StatusView {
        StatusView {
            now: "2026-11-30T00:00:00Z".into(),
            simulated: false,
            runs_in_flight: 0,
            subjects_by_state: [("active".to_string(), 2), ("paused".to_string(), paused)]
                .into_iter()
                .collect(),
            paused: (0..paused)
                .map(|i| PausedSubject {
                    subject_id: format!("{i:032x}"),
                    url: format!("https://p{i}.example/api\u{1b}[2J"),
                })
                .collect(),
            subjects_by_verdict: Default::default(),
            unscored: 0,
            next_due: Vec::new(),
            paid_budget: None,
            outage_open: false,
            outages: Vec::new(),
            ledger_seq: 1,
            rubric_sha256: "ab".repeat(32),
        }
    }

    #[test]
    fn paused_subjects_are_shown_apart_by_url() {
        let text = render(&status(0), "http://127.0.0.1:8402");
        assert!(!text.contains("paused     "), "{text}");
        let text = render(&status(12), "http://127.0.0.1:8402");
        assert!(text.contains("subjects   2 active, 12 paused\n"), "{text}");
        assert!(
            text.contains("paused     12 (not probed until resumed)\n"),
            "{text}"
        );
        assert!(text.contains("https://p0.example/api"), "{text}");
        assert!(!text.contains("https://p10.example/api"), "{text}");
        assert!(text.contains("and 2 more\n"), "{text}");
        assert!(!text.contains('\u{1b}'), "printable: {text}");
    }
}
