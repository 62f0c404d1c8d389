//! Links: hosts that hide where they lead.
//!
//! Read from the original text (a folded copy would turn a Cyrillic `а` in a host into a Latin
//! one and hide exactly what we look for). A host is suspicious when it is an IP literal, is
//! punycode or raw non-ASCII (an internationalised name that can imitate another), carries user
//! info before the host (`https://wallet.example@evil.test`), or imitates a wallet, exchange or
//! explorer brand without being that brand's own domain.

use std::ops::Range;
use std::sync::OnceLock;

use regex::Regex;

/// Why a link's host is suspicious.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LinkProblem {
    IpLiteral,
    Punycode,
    NonAsciiHost,
    UserInfo,
    Lookalike,
}

impl LinkProblem {
    pub fn rule_id(self) -> &'static str {
        match self {
            LinkProblem::IpLiteral => "phish.ip-link",
            LinkProblem::Punycode => "phish.punycode-link",
            LinkProblem::NonAsciiHost => "phish.idn-link",
            LinkProblem::UserInfo => "phish.userinfo-link",
            LinkProblem::Lookalike => "phish.lookalike-wallet",
        }
    }
}

pub(super) struct LinkFinding {
    pub problem: LinkProblem,
    pub span: Range<usize>,
}

/// Brands that drainers imitate, with the registrable domains that really are theirs.
const BRANDS: &[(&str, &[&str])] = &[
    ("metamask", &["metamask.io"]),
    ("coinbase", &["coinbase.com"]),
    ("uniswap", &["uniswap.org"]),
    ("opensea", &["opensea.io"]),
    ("phantom", &["phantom.app", "phantom.com"]),
    ("ledger", &["ledger.com", "ledgerhq.com"]),
    ("trezor", &["trezor.io"]),
    ("binance", &["binance.com"]),
    ("etherscan", &["etherscan.io"]),
    ("basescan", &["basescan.org"]),
    (
        "walletconnect",
        &["walletconnect.com", "walletconnect.network"],
    ),
    ("rabby", &["rabby.io"]),
    ("kraken", &["kraken.com"]),
    ("arbiscan", &["arbiscan.io"]),
    ("polygonscan", &["polygonscan.com"]),
];

/// Compiles this module's patterns now (`screen::compile_patterns`).
pub(super) fn compile_patterns() {
    let _ = url_pattern();
    let _ = bare_domain_pattern();
}

fn url_pattern() -> &'static Regex {
    static URL: OnceLock<Regex> = OnceLock::new();
    URL.get_or_init(|| {
        // A scheme, then everything up to whitespace or a character that ends prose links.
        // The authority is letters, digits, marks and the few ASCII signs a host, port or user
        // info uses, so that prose punctuation after a link (`。`, `)`) is not read as its host.
        // ASCII word boundaries: the scheme is ASCII, and a Unicode boundary would make the
        // regex engine fall back to its slowest search on any non-ASCII text.
        Regex::new(r#"(?i)(?-u:\b)(?:https?|ftp|wss?)://(?:\[[0-9a-f:.]+\]|[\p{L}\p{N}\p{M}._~%@:-]+)(?:[/?#][^\s<>"'`]*)?"#)
            .expect("the URL pattern is a valid regex")
    })
}

fn bare_domain_pattern() -> &'static Regex {
    static BARE: OnceLock<Regex> = OnceLock::new();
    BARE.get_or_init(|| {
        // ASCII word boundaries, as for URLs: the alphabet is ASCII.
        Regex::new(r"(?i)(?-u:\b)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}(?-u:\b)")
            .expect("the domain pattern is a valid regex")
    })
}

/// The host of an absolute URL (`scheme://[userinfo@]host[:port]...`), and whether it had user info.
fn host_of(url: &str) -> Option<(String, bool)> {
    let rest = url.split_once("://")?.1;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((user, host)) => (Some(user), host),
        None => (None, authority),
    };
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        format!("[{}]", v6.split(']').next().unwrap_or(""))
    } else {
        hostport.split(':').next().unwrap_or("").to_string()
    };
    let host = host.trim_end_matches('.').to_lowercase();
    (!host.is_empty()).then_some((host, userinfo.is_some_and(|u| !u.is_empty())))
}

fn is_ip_literal(host: &str) -> bool {
    if host.starts_with('[') {
        return true;
    }
    if host.parse::<std::net::Ipv4Addr>().is_ok() {
        return true;
    }
    // A bare integer or hex host (`http://3232235777`) is an IPv4 address too.
    !host.is_empty()
        && (host.chars().all(|c| c.is_ascii_digit())
            || host
                .strip_prefix("0x")
                .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit())))
}

/// The last two labels of a host: good enough to tell `metamask.io` from `metamask.io.evil.test`.
fn registrable(host: &str) -> String {
    let labels: Vec<&str> = host.split('.').collect();
    let n = labels.len();
    if n <= 2 {
        host.to_string()
    } else {
        format!("{}.{}", labels[n - 2], labels[n - 1])
    }
}

/// Digits standing in for letters in a host label (`c0inbase`).
fn unleet(token: &str) -> String {
    token
        .chars()
        .map(|c| match c {
            '0' => 'o',
            '1' => 'l',
            '3' => 'e',
            '5' => 's',
            '4' => 'a',
            other => other,
        })
        .collect()
}

/// Levenshtein distance, bounded: returns early once it exceeds `limit`.
fn edit_distance_within(a: &str, b: &str, limit: usize) -> bool {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > limit {
        return false;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut row = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            row[j + 1] = substitute.min(prev[j + 1] + 1).min(row[j] + 1);
        }
        if row.iter().all(|d| *d > limit) {
            return false;
        }
        prev = row;
    }
    prev[b.len()] <= limit
}

/// Whether `host` imitates a brand without being one of the brand's own domains.
fn imitates_brand(host: &str) -> bool {
    let own = registrable(host);
    for (brand, domains) in BRANDS {
        if domains.iter().any(|d| own == *d) {
            continue;
        }
        let imitated = host.split(['.', '-']).any(|token| {
            let token = unleet(token);
            token == *brand
                || (brand.len() >= 6 && token.len() >= 5 && edit_distance_within(&token, brand, 1))
                || (brand.len() >= 8 && token.contains(brand))
        });
        if imitated {
            return true;
        }
    }
    false
}

fn problems_of(host: &str, had_userinfo: bool) -> Vec<LinkProblem> {
    let mut problems = Vec::new();
    if had_userinfo {
        problems.push(LinkProblem::UserInfo);
    }
    if is_ip_literal(host) {
        problems.push(LinkProblem::IpLiteral);
        return problems;
    }
    if host.split('.').any(|label| label.starts_with("xn--")) {
        problems.push(LinkProblem::Punycode);
    }
    if !host.is_ascii() {
        problems.push(LinkProblem::NonAsciiHost);
    }
    if imitates_brand(host) {
        problems.push(LinkProblem::Lookalike);
    }
    problems
}

/// Every suspicious link or bare domain in `text`, with its original byte span.
pub(super) fn link_findings(text: &str) -> Vec<LinkFinding> {
    let mut findings = Vec::new();
    // The URLs' spans, in order and disjoint: the bare-domain pass walks them alongside its own
    // matches (also in order), so the whole function stays linear in the text.
    let mut covered: Vec<Range<usize>> = Vec::new();
    for m in url_pattern().find_iter(text) {
        covered.push(m.range());
        let Some((host, userinfo)) = host_of(m.as_str()) else {
            continue;
        };
        for problem in problems_of(&host, userinfo) {
            findings.push(LinkFinding {
                problem,
                span: m.range(),
            });
        }
    }
    // Domains written without a scheme can imitate a brand too ("visit metamask-verify.support").
    let mut next_url = 0;
    for m in bare_domain_pattern().find_iter(text) {
        while covered.get(next_url).is_some_and(|c| c.end < m.end()) {
            next_url += 1;
        }
        if covered
            .get(next_url)
            .is_some_and(|c| c.start <= m.start() && m.end() <= c.end)
        {
            continue;
        }
        // An e-mail address's domain or a dotted identifier in code is not a link.
        let before = text[..m.start()].chars().next_back();
        if matches!(before, Some('@') | Some('.')) {
            continue;
        }
        let host = m.as_str().to_lowercase();
        if imitates_brand(&host) {
            findings.push(LinkFinding {
                problem: LinkProblem::Lookalike,
                span: m.range(),
            });
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<LinkProblem> {
        link_findings(text).into_iter().map(|f| f.problem).collect()
    }

    #[test]
    fn ip_literals() {
        assert_eq!(
            problems("see http://185.199.12.44/docs now"),
            vec![LinkProblem::IpLiteral]
        );
        assert_eq!(
            problems("at http://[2001:db8::1]/x"),
            vec![LinkProblem::IpLiteral]
        );
        assert_eq!(
            problems("at http://3232235777/x"),
            vec![LinkProblem::IpLiteral]
        );
    }

    #[test]
    fn punycode_and_non_ascii_hosts() {
        assert_eq!(
            problems("https://xn--pple-43d.com/x"),
            vec![LinkProblem::Punycode]
        );
        assert_eq!(
            problems("https://\u{0430}pple.com/x"),
            vec![LinkProblem::NonAsciiHost]
        );
    }

    #[test]
    fn brand_lookalikes() {
        assert_eq!(
            problems("https://metamask-verify.support"),
            vec![LinkProblem::Lookalike]
        );
        assert_eq!(
            problems("https://metamsk-support.com"),
            vec![LinkProblem::Lookalike]
        );
        assert_eq!(
            problems("https://coinbase.com.secure-login.io/a"),
            vec![LinkProblem::Lookalike]
        );
        assert_eq!(
            problems("visit c0inbase-help.net today"),
            vec![LinkProblem::Lookalike]
        );
        // The brand sits in the user info; the host is someone else's.
        assert_eq!(
            problems("https://coinbase.com@evil.test/"),
            vec![LinkProblem::UserInfo]
        );
    }

    #[test]
    fn brands_own_domains_and_ordinary_links_pass() {
        assert!(
            problems("https://metamask.io/download and https://docs.uniswap.org/sdk").is_empty()
        );
        assert!(
            problems("https://docs.example-weather.com/v2 support@example-weather.com").is_empty()
        );
        assert!(problems("https://phantomjs.org and https://ledgerhq.com").is_empty());
        assert!(problems("Net.WebClient and file.json").is_empty());
    }

    #[test]
    fn prose_punctuation_after_a_link_is_not_its_host() {
        assert!(problems("发送到 https://log.example.cn。然后").is_empty());
        assert!(problems("(see https://docs.example.com), or").is_empty());
    }

    #[test]
    fn host_parsing_handles_ports_and_paths() {
        assert_eq!(
            host_of("https://a.b.example:8443/x?y").map(|h| h.0),
            Some("a.b.example".to_string())
        );
        assert_eq!(
            host_of("http://[::1]:80/").map(|h| h.0),
            Some("[::1]".to_string())
        );
    }
}
