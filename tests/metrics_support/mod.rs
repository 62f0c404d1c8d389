//! What the metrics tests share: `promtool check metrics` over an exposition, and its samples
//! read back by series.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

/// Runs `promtool check metrics` (Debian's prometheus package) over `text`; panics with its
/// findings unless it passes without a single warning.
pub fn assert_promtool_clean(text: &str) {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package) is installed");
    std::io::Write::write_all(promtool.stdin.as_mut().unwrap(), text.as_bytes()).unwrap();
    let checked = promtool.wait_with_output().unwrap();
    let lint = format!(
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(
        checked.status.success() && lint.trim().is_empty(),
        "promtool: {lint}\n{text}"
    );
}

/// `name{labels} value` lines of the classic text format, by series.
pub fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The value of one series; panics when it is not exposed.
pub fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("{series} is exposed: {samples:#?}"))
}
