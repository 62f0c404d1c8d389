//! What a reload (SIGHUP) may change while the daemon runs, decided without IO: the subjects,
//! the catalogues, the control endpoint and the spend caps are applied at once; any other change
//! needs a restart, and then nothing is applied (the old configuration stays whole) and each key
//! that needs one is named. Whether a section changed is decided on the typed values (defaults
//! filled in, so writing out a default changes nothing); the file's tables as written only name
//! the keys.

use crate::config::{DaemonConfig, PayConfig};

/// The keys of a `[pay]` table a reload applies.
pub const LIVE_PAY_KEYS: [&str; 3] = ["max_usd", "max_usd_per_subject_per_day", "max_usd_per_day"];

/// Every change from `old` to `new` that only a restart applies, as `[table] key` (tables in a
/// fixed order, keys sorted). Empty: the reload may be applied.
pub fn restart_needed(
    old: &DaemonConfig,
    new: &DaemonConfig,
    old_table: Option<&toml::Table>,
    new_table: Option<&toml::Table>,
) -> Vec<String> {
    let mut needed = Vec::new();
    let mut section = |changed: bool, name: &str, array: bool, skip: &[&str]| {
        if !changed {
            return;
        }
        let before = old_table.and_then(|t| t.get(name));
        let after = new_table.and_then(|t| t.get(name));
        let keys = if array {
            Vec::new()
        } else {
            changed_keys(name, before, after, skip)
        };
        if keys.is_empty() {
            needed.push(if array {
                format!("[[{name}]]")
            } else {
                format!("[{name}]")
            });
        } else {
            needed.extend(keys);
        }
    };
    section(old.daemon != new.daemon, "daemon", false, &[]);
    section(old.probe != new.probe, "probe", false, &[]);
    section(old.schedule != new.schedule, "schedule", false, &[]);
    section(old.api != new.api, "api", false, &[]);
    section(old.store != new.store, "store", false, &[]);
    section(old.webhooks != new.webhooks, "webhook", true, &[]);
    let pay_changed = match (&old.pay, &new.pay) {
        (None, None) => false,
        (Some(before), Some(after)) => *before != with_caps_of(after, before),
        // Paying switched on or off: a wallet to open or close.
        _ => true,
    };
    let skip: &[&str] = if old.pay.is_some() && new.pay.is_some() {
        &LIVE_PAY_KEYS
    } else {
        &[]
    };
    section(pay_changed, "pay", false, skip);
    needed
}

/// `pay` with the caps of `caps_of` (so a comparison sees every other key).
fn with_caps_of(pay: &PayConfig, caps_of: &PayConfig) -> PayConfig {
    PayConfig {
        max_usd: caps_of.max_usd,
        max_usd_per_subject_per_day: caps_of.max_usd_per_subject_per_day,
        max_usd_per_day: caps_of.max_usd_per_day,
        ..pay.clone()
    }
}

/// The keys of table `name` whose values differ as written (a table not written counts as an
/// empty one).
fn changed_keys(
    name: &str,
    before: Option<&toml::Value>,
    after: Option<&toml::Value>,
    skip: &[&str],
) -> Vec<String> {
    let empty = toml::Table::new();
    fn table<'a>(v: Option<&'a toml::Value>, empty: &'a toml::Table) -> Option<&'a toml::Table> {
        match v {
            None => Some(empty),
            Some(toml::Value::Table(t)) => Some(t),
            Some(_) => None,
        }
    }
    let (Some(before), Some(after)) = (table(before, &empty), table(after, &empty)) else {
        return Vec::new();
    };
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !skip.contains(&k.as_str()) && before.get(*k) != after.get(*k))
        .map(|k| format!("[{name}] {k}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
        [daemon]
        reporter_key = { key_file = "k" }
        [probe]
        rpc = "http://127.0.0.1:8545/"
        [pay]
        max_usd = "0.05"
        max_usd_per_day = "5"
        wallet = { key_file = "w" }
        [[subject]]
        url = "https://a.example/x"
    "#;

    fn both(text: &str) -> (DaemonConfig, toml::Table) {
        let config: DaemonConfig = toml::from_str(text).unwrap();
        config.validate().unwrap();
        (config, toml::from_str(text).unwrap())
    }

    fn needed(edited: &str) -> Vec<String> {
        let (old, old_t) = both(BASE);
        let (new, new_t) = both(edited);
        restart_needed(&old, &new, Some(&old_t), Some(&new_t))
    }

    #[test]
    fn subjects_and_caps_are_live_and_everything_else_is_named() {
        // Live: a subject added, every cap lowered; an explicit default is no change.
        let live = BASE
            .replace(
                "max_usd_per_day = \"5\"",
                "max_usd_per_day = \"0.01\"\n        max_usd_per_subject_per_day = \"0.01\"",
            )
            .replace("max_usd = \"0.05\"", "max_usd = \"0.01\"")
            .replace("[probe]", "[probe]\n        samples = 5")
            + "\n[[subject]]\nurl = \"https://b.example/y\"\n";
        assert_eq!(needed(&live), Vec::<String>::new());

        let restart = BASE
            .replace(
                "max_usd_per_day = \"5\"",
                "max_usd_per_day = \"0.01\"\n        confirmations = 7",
            )
            .replace("[probe]", "[probe]\n        samples = 3")
            + "\n[api]\nbind = \"127.0.0.1:9999\"\n";
        assert_eq!(
            needed(&restart),
            ["[probe] samples", "[api] bind", "[pay] confirmations"]
        );
        // Paying switched off is a restart too; without the tables, the section is named.
        let (old, _) = both(BASE);
        let (mut new, _) = both(BASE);
        new.pay = None;
        assert_eq!(restart_needed(&old, &new, None, None), ["[pay]"]);
    }
}
