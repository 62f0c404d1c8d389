//! URLs from the network: a redirect's `Location` resolved against the hop's URL, a catalogue
//! item's `resource` (canonicalised to match listings), and the host reader under the address
//! guard (WHATWG IPv4 forms must come out as addresses, so the guard sees them).
//!
//! Input: the first line is the base URL (an `http://`/`https://` URL; when it does not parse, a
//! fixed one is used), the rest is the `Location` value.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use x402_probe::http_url::canonical_resource;
use x402_probe::probe::http::{Target, parse_given_url, parse_host};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let base = Target::parse(first);
    if let Ok(t) = &base {
        assert_target(t);
    }
    if let Ok(t) = parse_given_url(first) {
        assert_eq!(Ok(&t), base.as_ref(), "a given URL reads as any URL does");
    }
    let base = base.unwrap_or_else(|_| {
        Target::parse("https://api.example.com/v1/pay?x=1").expect("fixed base")
    });
    if let Ok(next) = base.resolve(rest) {
        assert_target(&next);
        // Resolving is stable: the result's own URL, resolved again, names the same target.
        assert_eq!(base.resolve(&next.url()).as_ref(), Ok(&next));
    }

    for s in [first, rest] {
        if let Ok((host, ip)) = parse_host(s) {
            assert_host(&host, ip);
        }
        let c = canonical_resource(s);
        assert_eq!(
            canonical_resource(&c),
            c,
            "canonical_resource is idempotent"
        );
        assert!(!c.contains(['?', '#']));
    }
});

fn assert_target(t: &Target) {
    assert_ne!(t.port, 0);
    assert!(t.path_and_query.starts_with('/'), "{t:?}");
    assert!(!t.path_and_query.contains('#'), "{t:?}");
    assert!(
        !t.path_and_query.chars().any(|c| c.is_control() || c == ' '),
        "{t:?}"
    );
    assert_host(&t.host, t.ip);
    // The normalised URL reads back as the same target.
    assert_eq!(Target::parse(&t.url()).as_ref(), Ok(t), "{}", t.url());
    assert!(t.same_origin(t));
}

fn assert_host(host: &str, ip: Option<IpAddr>) {
    match ip {
        // An address is written in its one canonical form.
        Some(ip) => assert_eq!(host, ip.to_string()),
        None => {
            // A name is never an address in disguise: nothing the system resolver or a browser
            // would read as an IP literal gets past the guard as a DNS name.
            assert!(
                host.parse::<IpAddr>().is_err(),
                "{host:?} reads as an address"
            );
            let name = host.strip_suffix('.').unwrap_or(host);
            assert!(!name.is_empty() && name.len() <= 253, "{host:?}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)),
                "{host:?}"
            );
            let last = name.rsplit('.').next().unwrap_or(name);
            assert!(
                !last.bytes().all(|b| b.is_ascii_digit()),
                "{host:?} ends in a number"
            );
        }
    }
}
