//! `x402-probe preflight URL [--api URL] [--payment-required FILE] [--json]`: before paying URL,
//! the running daemon's answer (`POST /v1/preflight`): go, caution, avoid or unrated, the reasons,
//! the score, the terms we rated and, with the PaymentRequired received, which `accepts` entry is
//! safe to pay. Exit codes by answer: 0 go, 3 caution, 4 avoid, 5 unrated; 1 the daemon did not
//! answer (or answered an error), 2 usage.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::api_client;
use crate::api::preflight::{Preflight, PreflightAnswer};
use crate::report::one_line;

/// Options of `x402-probe preflight`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The URL about to be paid, as requested.
    pub url: String,
    /// The daemon's API (`[api] bind`; http only, normally loopback).
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:8402",
        env = "X402_PROBE_API"
    )]
    pub api: String,
    /// The PaymentRequired received: a file holding the 402's body (a JSON object) or the
    /// PAYMENT-REQUIRED header's value (base64).
    #[arg(long, value_name = "FILE")]
    pub payment_required: Option<PathBuf>,
    /// Print the daemon's answer as JSON instead.
    #[arg(long)]
    pub json: bool,
}

/// The largest PaymentRequired file read (x402's own bound on a 402's body).
const MAX_FILE: u64 = crate::budget::MAX_BODY_BYTES as u64;

/// The exit code of an answer.
pub fn exit_code(answer: PreflightAnswer) -> i32 {
    match answer {
        PreflightAnswer::Go => 0,
        PreflightAnswer::Caution => 3,
        PreflightAnswer::Avoid => 4,
        PreflightAnswer::Unrated => 5,
    }
}

pub fn run(args: Args) -> Result<i32> {
    let mut request = serde_json::Map::new();
    request.insert("url".into(), args.url.clone().into());
    if let Some(path) = &args.payment_required {
        let bytes = crate::files::read_regular(path, MAX_FILE, "PaymentRequired")
            .with_context(|| format!("--payment-required {}", path.display()))?;
        let text = String::from_utf8(bytes)
            .with_context(|| format!("--payment-required {}: not UTF-8", path.display()))?;
        let text = text.trim();
        if text.starts_with('{') {
            let raw = serde_json::value::RawValue::from_string(text.to_string())
                .with_context(|| format!("--payment-required {}: not JSON", path.display()))?;
            request.insert("payment_required".into(), serde_json::to_value(raw)?);
        } else {
            request.insert("payment_required_header".into(), text.into());
        }
    }
    let uri = api_client::uri(&args.api, "/v1/preflight")?;
    let body = serde_json::to_vec(&request)?;
    let Some((preflight, body)) = api_client::fetch::<Preflight>(
        "preflight",
        &args.api,
        &uri,
        Some(body),
        "a preflight answer",
    ) else {
        return Ok(1);
    };
    if args.json {
        println!("{}", String::from_utf8_lossy(&body));
    } else {
        print!("{}", render(&preflight));
    }
    Ok(exit_code(preflight.answer))
}

/// The answer for a terminal (every text from the daemon made printable).
pub fn render(p: &Preflight) -> String {
    let answer = match p.answer {
        PreflightAnswer::Go => "GO",
        PreflightAnswer::Caution => "CAUTION",
        PreflightAnswer::Avoid => "AVOID",
        PreflightAnswer::Unrated => "UNRATED",
    };
    let mut out = format!("{answer}  {}\n", one_line(&p.url, 200));
    if let Some(s) = &p.score {
        out.push_str(&format!(
            "  score {:.1} [{:.1}, {:.1}], grade {}{}, confidence {}, as of {}\n",
            s.capped_score,
            s.band.low,
            s.band.high,
            one_line(s.grade.as_deref().unwrap_or("none"), 8),
            if s.grade_provisional {
                " (provisional)"
            } else {
                ""
            },
            one_line(&s.confidence, 10),
            one_line(&s.as_of, 40)
        ));
    }
    for r in &p.reasons {
        let code = serde_json::to_value(r.code)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        out.push_str(&format!("  - {code}: {}\n", one_line(&r.message, 300)));
    }
    if let Some(rated) = &p.rated {
        let field = |v: &Option<String>| one_line(v.as_deref().unwrap_or("?"), 80);
        out.push_str(&format!(
            "  rated: payTo {} asset {} network {} amount {} (seen {})\n",
            field(&rated.pay_to),
            field(&rated.asset),
            field(&rated.network),
            field(&rated.amount),
            one_line(&rated.seen_at, 40)
        ));
    }
    match p.safe_accept {
        Some(i) => out.push_str(&format!("  pay accepts[{i}]\n")),
        None if !p.accepts.is_empty() => out.push_str("  no accepts entry is safe to pay\n"),
        None => {}
    }
    if let Some(id) = &p.subject_id {
        out.push_str(&format!(
            "  signed score: /v1/subjects/{}/score\n",
            one_line(id, 40)
        ));
    }
    out
}
