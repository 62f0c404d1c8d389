//! How an `http`/`https` URL is read, once for everyone: where one hop of the fetcher goes (a
//! parsed URL, and how a redirect's `Location` resolves against it), and the canonical form a
//! subject is known by ([`canonical_subject_url`]) in the configuration, the catalogues, the
//! ledger and the spend store. Pure.

use std::net::IpAddr;

/// The scheme of a hop. Only these two are ever fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A URL the fetcher can act on: scheme, host, effective port and the request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: Scheme,
    /// Lower-cased; IPv6 literals without brackets.
    pub host: String,
    /// `Some` when the host is an IP literal (then there is no DNS phase and no SNI).
    pub ip: Option<IpAddr>,
    /// The effective port (the scheme's default when the URL has none).
    pub port: u16,
    /// Origin-form request target: path and query, at least `/`.
    pub path_and_query: String,
}

impl Target {
    /// Parses an absolute `http` or `https` URL. The fragment is dropped (it never goes on the
    /// wire); user info is refused (credentials do not belong in a probed URL), and so is a host
    /// that is neither a valid DNS name nor an IP address (see [`parse_host`]).
    pub fn parse(url: &str) -> Result<Target, String> {
        let without_fragment = url.split('#').next().unwrap_or_default().trim();
        if let Some(c) = without_fragment.chars().find(|c| c.is_control()) {
            return Err(format!(
                "URL contains the control character {c:?}; refused: {url:?}"
            ));
        }
        let uri: http::Uri = without_fragment
            .parse()
            .map_err(|e| format!("not a valid URL ({e}): {url:?}"))?;
        let scheme = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
            Some("http") => Scheme::Http,
            Some("https") => Scheme::Https,
            Some(other) => return Err(format!("scheme {other:?} is not http or https")),
            None => return Err(format!("not an absolute URL: {url:?}")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("URL has no host: {url:?}"))?;
        if authority.as_str().contains('@') {
            return Err("URL carries user info (credentials); refused".to_string());
        }
        let (host, ip) = parse_host(authority.host())?;
        let port = authority
            .port_u16()
            .unwrap_or_else(|| scheme.default_port());
        if port == 0 {
            return Err("port 0 is not a destination".to_string());
        }
        let path_and_query = match uri.path_and_query() {
            Some(pq) if pq.as_str().starts_with('/') => pq.as_str().to_string(),
            Some(pq) => format!("/{}", pq.as_str()),
            None => "/".to_string(),
        };
        Ok(Target {
            scheme,
            host,
            ip,
            port,
            path_and_query,
        })
    }

    /// `host[:port]` as it goes into the `Host` header (port only when not the default).
    pub fn host_header(&self) -> String {
        let host = match self.ip {
            Some(IpAddr::V6(_)) => format!("[{}]", self.host),
            _ => self.host.clone(),
        };
        if self.port == self.scheme.default_port() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// `scheme://host[:port]`.
    pub fn origin(&self) -> String {
        format!("{}://{}", self.scheme.as_str(), self.host_header())
    }

    /// The normalised URL (lower-cased scheme and host, no default port, no fragment).
    pub fn url(&self) -> String {
        format!("{}{}", self.origin(), self.path_and_query)
    }

    /// Same scheme, host and port: the only redirects the fetcher follows.
    pub fn same_origin(&self, other: &Target) -> bool {
        self.scheme == other.scheme && self.host == other.host && self.port == other.port
    }

    /// Resolves a `Location` value against this URL (RFC 3986 reference forms: absolute,
    /// scheme-relative `//host/...`, absolute path, query only, relative path).
    pub fn resolve(&self, location: &str) -> Result<Target, String> {
        let location = location.trim();
        if location.is_empty() {
            return Ok(self.clone());
        }
        if has_scheme(location) {
            return Target::parse(location);
        }
        if location.starts_with("//") {
            return Target::parse(&format!("{}:{location}", self.scheme.as_str()));
        }
        let base_path = self
            .path_and_query
            .split('?')
            .next()
            .unwrap_or("/")
            .to_string();
        let joined = if location.starts_with('/') {
            location.to_string()
        } else if location.starts_with('?') {
            format!("{base_path}{location}")
        } else if location.starts_with('#') {
            self.path_and_query.clone()
        } else {
            let dir = match base_path.rfind('/') {
                Some(i) => &base_path[..=i],
                None => "/",
            };
            format!("{dir}{location}")
        };
        Target::parse(&format!("{}{joined}", self.origin()))
    }
}

/// The one canonical form of a subject's URL: the key a subject is known by everywhere (the
/// daemon's `[[subject]]` tables and catalogues, `probe URL`, the ledger's subjects, the spend
/// store's per-subject cap), so that one endpoint spelled several ways is one subject under one
/// cap. It is the URL as the fetcher reads it ([`parse_given_url`]), written back as:
/// - scheme and host lower-cased; an IPv4 host in any form browsers accept (`2130706433`,
///   `0x7f000001`, `0177.0.0.1`, `127.1`) written as its dotted quad; IPv6 compressed, in
///   brackets; a host name's trailing dot dropped;
/// - the scheme's default port dropped (`:443` on https, `:80` on http);
/// - the path with percent-encoded unreserved characters (letters, digits, `-._~`) decoded and
///   every other percent-encoding's hex digits upper-cased, then its dot segments (`.`, `..`)
///   resolved (RFC 3986, 6.2.2); an empty path is `/`;
/// - the query kept byte for byte (an endpoint may read it as it is); the fragment dropped.
///
/// The fetcher fetches this URL, so what is probed and paid is what the key names.
pub fn canonical_subject_url(url: &str) -> Result<String, String> {
    let target = parse_given_url(url)?;
    let host = match target.ip {
        Some(IpAddr::V6(_)) => format!("[{}]", target.host),
        Some(IpAddr::V4(_)) => target.host.clone(),
        None => target
            .host
            .strip_suffix('.')
            .unwrap_or(&target.host)
            .to_string(),
    };
    let port = if target.port == target.scheme.default_port() {
        String::new()
    } else {
        format!(":{}", target.port)
    };
    let (path, query) = match target.path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target.path_and_query.as_str(), None),
    };
    let path = remove_dot_segments(&normalise_percent_encoding(path));
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    Ok(format!(
        "{}://{host}{port}{path}{query}",
        target.scheme.as_str()
    ))
}

/// The subject id of a URL: the first 16 bytes of the SHA-256 of the URL exactly as configured
/// or listed, in lowercase hex (32 characters). Stable for as long as the URL is.
pub fn subject_id(url: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(url.as_bytes())[..16])
}

/// How a listing's item is matched to the subject (and the documented request's base): the
/// subject's canonical URL ([`canonical_subject_url`]) without its query and trailing slash, so a
/// catalogue that spells the endpoint another way (`127.1`, an upper-case host, `:443`) or adds a
/// query still lists it. A URL the fetcher cannot read is compared as it is.
pub fn canonical_resource(url: &str) -> String {
    // Query and fragment off first, then the canonical form of what is left: a URL that fails to
    // canonicalise only for its query is still compared by its canonical base, and the result is
    // its own canonical resource (the url fuzz target holds it to that).
    let base = url.split(['?', '#']).next().unwrap_or(url);
    let canonical = canonical_subject_url(base).unwrap_or_else(|_| base.to_string());
    canonical.trim_end_matches('/').to_string()
}

/// The prefix that makes a subject an MCP server's tool rather than an HTTP endpoint.
pub const MCP_SUBJECT_PREFIX: &str = "mcp+";

/// A subject that is an MCP server (Streamable HTTP), or one tool of it: written
/// `mcp+https://host/path#tool`. The server part is the canonical form of its `http(s)` URL
/// ([`canonical_subject_url`]); the tool is the fragment, percent-decoded, and written back with
/// every byte but letters, digits and `-._~/` percent-encoded. Each paid tool is its own subject
/// under this one key, everywhere a subject has a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSubject {
    /// The canonical `http(s)` URL the JSON-RPC requests are posted to.
    pub server: String,
    /// The tool, when one is named (`None`: every paid tool of the server).
    pub tool: Option<String>,
}

impl McpSubject {
    /// Read `mcp+http(s)://...[#tool]`; `None` when `url` does not start with `mcp+`.
    pub fn parse(url: &str) -> Option<Result<McpSubject, String>> {
        let prefix = url.get(..MCP_SUBJECT_PREFIX.len())?;
        if !prefix.eq_ignore_ascii_case(MCP_SUBJECT_PREFIX) {
            return None;
        }
        let rest = &url[MCP_SUBJECT_PREFIX.len()..];
        Some(Self::read(rest))
    }

    fn read(rest: &str) -> Result<McpSubject, String> {
        let (server, tool) = match rest.split_once('#') {
            Some((server, tool)) => (server, Some(tool)),
            None => (rest, None),
        };
        let server = canonical_subject_url(server)?;
        let tool = match tool {
            None => None,
            Some(encoded) => {
                let bytes = percent_decode(encoded);
                let name = String::from_utf8(bytes)
                    .map_err(|_| format!("the tool name {encoded:?} is not UTF-8"))?;
                if name.is_empty() {
                    return Err("an empty tool name after '#'".to_string());
                }
                if name.chars().any(char::is_control) {
                    return Err(format!("the tool name {name:?} has a control character"));
                }
                Some(name)
            }
        };
        Ok(McpSubject { server, tool })
    }

    /// The same server with one tool named: that tool's subject.
    pub fn with_tool(&self, tool: &str) -> McpSubject {
        McpSubject {
            server: self.server.clone(),
            tool: Some(tool.to_string()),
        }
    }

    /// The canonical key: `mcp+` + the server's canonical URL + `#` + the encoded tool.
    pub fn key(&self) -> String {
        let mut key = format!("{MCP_SUBJECT_PREFIX}{}", self.server);
        if let Some(tool) = &self.tool {
            key.push('#');
            key.push_str(&encode_except(tool, b"-._~/"));
        }
        key
    }
}

/// The byte a `%XX` escape at `i` stands for (`None`: no `%` there, or not two hex digits after
/// it).
fn escape_at(bytes: &[u8], i: usize) -> Option<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    if bytes.get(i) != Some(&b'%') {
        return None;
    }
    let (hi, lo) = (hex(*bytes.get(i + 1)?)?, hex(*bytes.get(i + 2)?)?);
    Some((hi * 16 + lo) as u8)
}

/// Every byte but ASCII letters, digits and `-._~` as `%XX` (a query value, a path segment).
pub(crate) fn percent_encode(s: &str) -> String {
    encode_except(s, b"-._~")
}

/// Every byte but ASCII letters, digits and those of `keep` as `%XX`.
fn encode_except(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || keep.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `%XX` escapes decoded; a `%` not followed by two hex digits is kept as it is.
pub(crate) fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if let Some(value) = escape_at(bytes, i) {
            out.push(value);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// RFC 3986 6.2.2.2: `%41` is `A` (an unreserved character needs no encoding), `%2f` is `%2F`.
/// Characters beyond ASCII are written as the percent-encoded bytes of their UTF-8.
/// A `%` not followed by two hex digits is a literal `%` and written `%25`: kept bare, it could
/// join the characters a decoding puts after it into a new escape (`%%341` would read `%41`, then
/// `A`), and canonical twice would not be canonical once.
fn normalise_percent_encoding(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if let Some(value) = escape_at(bytes, i) {
            if value.is_ascii_alphanumeric() || b"-._~".contains(&value) {
                out.push(value as char);
            } else {
                out.push_str(&format!("%{value:02X}"));
            }
            i += 3;
            continue;
        }
        if bytes[i] == b'%' {
            out.push_str("%25");
            i += 1;
            continue;
        }
        // A byte of a character beyond ASCII is percent-encoded, as a browser sends it (RFC
        // 3987 3.1): read byte by byte as a char it would turn into another character each time.
        if bytes[i] >= 0x80 {
            out.push_str(&format!("%{:02X}", bytes[i]));
            i += 1;
            continue;
        }
        out.push(bytes[i] as char);
        i += 1;
    }
    out
}

/// RFC 3986 5.2.4 for an absolute path: `.` segments dropped, `..` removes the one before (never
/// above the root); a path ending in `.` or `..` keeps its final slash.
fn remove_dot_segments(path: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let last = segments.len().saturating_sub(1);
    let mut trailing_slash = false;
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            "." => trailing_slash = i == last,
            ".." => {
                kept.pop();
                trailing_slash = i == last;
            }
            other => kept.push(other),
        }
    }
    let mut out = format!("/{}", kept.join("/"));
    if trailing_slash && !out.ends_with('/') {
        out.push('/');
    }
    out
}

/// Parses a URL the user gave (a subject, a catalogue, an RPC node): as [`Target::parse`], and
/// also refuses whitespace and control characters anywhere, fragment included, so that what is
/// probed is exactly what was typed.
pub fn parse_given_url(url: &str) -> Result<Target, String> {
    if let Some(c) = url.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "the URL contains {c:?} (whitespace or a control character); refused: {url:?}"
        ));
    }
    Target::parse(url)
}

/// A URL's host as the fetcher uses it: lower-cased, IPv6 without brackets, and the IP address
/// when it is one. IPv4 is read as the WHATWG URL standard reads it (so `2130706433` and `0x7f.1`
/// are 127.0.0.1, as browsers and the system resolver take them, and the address guard sees the
/// address); anything else must be a DNS name of letters, digits, `-` and `_` in labels of 1-63
/// characters, at most 253 in all. Percent-encoded hosts and IPv6 zone ids are refused.
pub fn parse_host(raw: &str) -> Result<(String, Option<IpAddr>), String> {
    let invalid = |why: &str| format!("invalid host {raw:?}: {why}");
    if raw.is_empty() {
        return Err(invalid("empty"));
    }
    if let Some(inner) = raw.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| invalid("unclosed '['"))?;
        let v6: std::net::Ipv6Addr = inner
            .parse()
            .map_err(|_| invalid("not an IPv6 address (zone ids are not accepted)"))?;
        return Ok((v6.to_string(), Some(IpAddr::V6(v6))));
    }
    let host = raw.to_ascii_lowercase();
    if host.contains('%') {
        return Err(invalid(
            "percent-encoded characters are not accepted in a host",
        ));
    }
    if ends_in_a_number(&host) {
        let v4 = whatwg_ipv4(&host).ok_or_else(|| invalid("not a valid IPv4 address"))?;
        return Ok((v4.to_string(), Some(IpAddr::V4(v4))));
    }
    let name = host.strip_suffix('.').unwrap_or(&host);
    if name.len() > 253 {
        return Err(invalid("longer than 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(invalid("empty label"));
        }
        if label.len() > 63 {
            return Err(invalid("a label is longer than 63 characters"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(invalid(&format!(
                "{c:?} is not allowed in a host name (letters, digits, '-' and '_')"
            )));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(invalid("a label starts or ends with '-'"));
        }
    }
    Ok((host, None))
}

/// WHATWG "ends in a number": the last label (ignoring one trailing dot) is all digits, or a
/// number in the IPv4 parser's sense (`0x` hex).
fn ends_in_a_number(host: &str) -> bool {
    let mut parts: Vec<&str> = host.split('.').collect();
    if parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    let Some(last) = parts.last() else {
        return false;
    };
    !last.is_empty() && (last.bytes().all(|b| b.is_ascii_digit()) || ipv4_number(last).is_some())
}

/// One part of a WHATWG IPv4 address: decimal, `0x` hexadecimal or `0`-prefixed octal.
fn ipv4_number(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() {
        return Some(0);
    }
    if digits.len() > 16 || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// The WHATWG IPv4 parser: one to four parts, every part but the last at most 255, the last
/// filling the remaining bytes.
fn whatwg_ipv4(host: &str) -> Option<std::net::Ipv4Addr> {
    let mut parts: Vec<&str> = host.split('.').collect();
    if parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let numbers: Vec<u64> = parts
        .iter()
        .map(|p| ipv4_number(p))
        .collect::<Option<_>>()?;
    let (last, init) = numbers.split_last()?;
    if init.iter().any(|n| *n > 255) {
        return None;
    }
    let room = 8 * (5 - numbers.len() as u32);
    if *last >= 1u64 << room {
        return None;
    }
    let mut address = *last;
    for (i, n) in init.iter().enumerate() {
        address += n << (8 * (3 - i as u32));
    }
    u32::try_from(address).ok().map(std::net::Ipv4Addr::from)
}

/// RFC 3986 `scheme ":"`: a letter, then letters, digits, `+`, `-`, `.`, then a colon.
fn has_scheme(reference: &str) -> bool {
    let Some(colon) = reference.find(':') else {
        return false;
    };
    let scheme = &reference[..colon];
    let mut chars = scheme.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_resources() {
        assert_eq!(
            canonical_resource("https://a.example/x/?q=1#f"),
            "https://a.example/x"
        );
        assert_eq!(
            canonical_resource("HTTPS://A.example.:443/v1/../x?q=1"),
            "https://a.example/x"
        );
        // Canonical twice is canonical once, a query the parser refuses included.
        for url in [
            "HTTP://A.example/x? y",
            "http://a.example/%%341/",
            "http://a.example/",
            "not a url",
        ] {
            let once = canonical_resource(url);
            assert_eq!(canonical_resource(&once), once, "{url}");
        }
        assert_eq!(
            canonical_resource("HTTP://A.example/x? y"),
            "http://a.example/x"
        );
    }

    fn t(url: &str) -> Target {
        Target::parse(url).expect("test URL parses")
    }

    #[test]
    fn parses_hosts_ports_and_paths() {
        let a = t("HTTPS://Example.COM/pay?x=1#frag");
        assert_eq!(a.scheme, Scheme::Https);
        assert_eq!(a.host, "example.com");
        assert_eq!(a.port, 443);
        assert_eq!(a.path_and_query, "/pay?x=1");
        assert_eq!(a.url(), "https://example.com/pay?x=1");
        let b = t("http://[::1]:8080");
        assert_eq!(b.host, "::1");
        assert_eq!(b.ip, Some("::1".parse().expect("literal")));
        assert_eq!(b.path_and_query, "/");
        assert_eq!(b.host_header(), "[::1]:8080");
        assert_eq!(t("http://127.0.0.1:80/").host_header(), "127.0.0.1");
    }

    #[test]
    fn refuses_what_it_cannot_fetch() {
        for bad in [
            "ftp://example.com/",
            "example.com/x",
            "/relative",
            "http://user:pw@example.com/",
            "http://example.com:0/",
            "http://exa mple.com/",
            "",
            "http://exa%00mple.com/",
            "http://-bad-.example/",
            "http://a..b/",
            "http://exa$mple.com/",
            "http://256.1.1.1/",
            "http://1.2.3.4.5/",
            "http://0x1g.1/",
            "http://[fe80::1%25eth0]/",
            "http://ex\u{1}ample.com/",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn ipv4_is_read_as_browsers_read_it() {
        for (url, ip) in [
            ("http://2130706433/", "127.0.0.1"),
            ("http://0x7f.1/", "127.0.0.1"),
            ("http://0177.0.0.1/", "127.0.0.1"),
            ("http://127.1/", "127.0.0.1"),
            ("http://10.0.0.1./", "10.0.0.1"),
            ("http://93.184.215.14/", "93.184.215.14"),
        ] {
            let target = t(url);
            assert_eq!(target.ip, Some(ip.parse().expect("literal")), "{url}");
            assert_eq!(target.host, ip, "{url}");
        }
        assert_eq!(t("http://a-b_c.example.COM./").ip, None);
        assert!(parse_given_url("http://example.com/ ").is_err());
        assert!(parse_given_url("http://example.com/#a\tb").is_err());
        assert!(parse_given_url("http://example.com/x").is_ok());
        let long = format!("http://{}.example/", "a".repeat(64));
        assert!(Target::parse(&long).is_err());
    }

    #[test]
    fn resolves_redirect_references() {
        let base = t("https://api.example.com:8443/v1/items/42?q=1");
        let cases = [
            ("/login", "https://api.example.com:8443/login"),
            ("other", "https://api.example.com:8443/v1/items/other"),
            ("?page=2", "https://api.example.com:8443/v1/items/42?page=2"),
            ("//cdn.example.com/x", "https://cdn.example.com/x"),
            (
                "http://api.example.com:8443/v1",
                "http://api.example.com:8443/v1",
            ),
            ("", "https://api.example.com:8443/v1/items/42?q=1"),
        ];
        for (location, want) in cases {
            let got = base.resolve(location).expect("resolves");
            assert_eq!(got.url(), want, "Location {location:?}");
        }
    }

    #[test]
    fn one_endpoint_spelled_many_ways_has_one_canonical_url() {
        let want = "http://127.0.0.1:8000/weather?city=Paris";
        for spelling in [
            "http://127.0.0.1:8000/weather?city=Paris",
            "http://0x7f000001:8000/weather?city=Paris",
            "http://127.1:8000/weather?city=Paris",
            "http://2130706433:8000/weather?city=Paris",
            "http://0177.0.0.1:8000/weather?city=Paris",
            "HTTP://127.0.0.1.:8000/./weather?city=Paris#top",
            "http://127.0.0.1:8000/v1/../weather?city=Paris",
            "http://127.0.0.1:8000/%77eather?city=Paris",
        ] {
            assert_eq!(
                canonical_subject_url(spelling).as_deref(),
                Ok(want),
                "{spelling}"
            );
        }
        for (spelling, canonical) in [
            ("https://API.Example.COM.:443", "https://api.example.com/"),
            ("http://api.example.com:80/x", "http://api.example.com/x"),
            (
                "https://api.example.com:80/x",
                "https://api.example.com:80/x",
            ),
            ("http://[0:0::1]:8080/a/b/..", "http://[::1]:8080/a/"),
            ("http://a.example/a/./b/../../c/.", "http://a.example/c/"),
            ("http://a.example/../../x", "http://a.example/x"),
            ("http://a.example/a%2fb%7e%7E", "http://a.example/a%2Fb~~"),
            ("http://a.example/x/", "http://a.example/x/"),
            ("http://a.example//x", "http://a.example//x"),
            // The query is the endpoint's to read: kept byte for byte.
            (
                "http://a.example/x?B=%7e&a=./..",
                "http://a.example/x?B=%7e&a=./..",
            ),
            ("http://a.example/x%", "http://a.example/x%25"),
            ("http://a.example/%%341", "http://a.example/%2541"),
            ("http://a.example/%4%41", "http://a.example/%254A"),
            (
                "http://a.example/caf\u{e9}/\u{fffd}",
                "http://a.example/caf%C3%A9/%EF%BF%BD",
            ),
        ] {
            assert_eq!(
                canonical_subject_url(spelling).as_deref(),
                Ok(canonical),
                "{spelling}"
            );
            // Canonical twice is canonical once.
            assert_eq!(canonical_subject_url(canonical).as_deref(), Ok(canonical));
        }
        for bad in [
            "ftp://a.example/",
            "http://a.example/ x",
            "http://u@a.example/",
        ] {
            assert!(canonical_subject_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn same_origin_needs_scheme_host_and_port() {
        let base = t("http://127.0.0.1:8000/a");
        assert!(base.same_origin(&t("http://127.0.0.1:8000/b")));
        assert!(!base.same_origin(&t("http://127.0.0.2:8000/a")));
        assert!(!base.same_origin(&t("http://127.0.0.1:8001/a")));
        assert!(!base.same_origin(&t("https://127.0.0.1:8000/a")));
        assert!(t("https://a.example/").same_origin(&t("https://A.example:443/x")));
    }

    #[test]
    fn an_mcp_tool_subject_has_one_canonical_key() {
        let read = |u: &str| McpSubject::parse(u).expect("mcp+").expect("valid");
        let canonical = "mcp+https://tools.example/mcp#get_weather";
        for spelling in [
            canonical,
            "MCP+HTTPS://Tools.Example:443/mcp#get_weather",
            "mcp+https://tools.example/./mcp#get%5Fweather",
        ] {
            assert_eq!(read(spelling).key(), canonical, "{spelling}");
        }
        let odd = read("mcp+https://tools.example/mcp#a%20b%23c/d");
        assert_eq!(odd.tool.as_deref(), Some("a b#c/d"));
        assert_eq!(odd.key(), "mcp+https://tools.example/mcp#a%20b%23c/d");
        assert_eq!(read(&odd.key()), odd);
        let server = read("mcp+http://127.0.0.1:8080/mcp");
        assert_eq!(server.tool, None);
        assert_eq!(server.key(), "mcp+http://127.0.0.1:8080/mcp");
        assert_eq!(
            server.with_tool("x y").key(),
            "mcp+http://127.0.0.1:8080/mcp#x%20y"
        );
        assert!(McpSubject::parse("https://tools.example/mcp").is_none());
        for bad in [
            "mcp+ftp://tools.example/mcp",
            "mcp+https://tools.example/mcp#",
            "mcp+https://tools.example/mcp#%0a",
            "mcp+https://tools.example/mcp#%ff",
            "mcp+https://user@tools.example/mcp#t",
        ] {
            assert!(McpSubject::parse(bad).expect("mcp+").is_err(), "{bad}");
        }
    }
}
