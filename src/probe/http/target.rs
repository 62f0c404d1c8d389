//! Where one hop goes: a parsed `http`/`https` URL, and how a redirect's `Location` resolves
//! against it. Pure.

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
    /// wire); user info is refused (credentials do not belong in a probed URL).
    pub fn parse(url: &str) -> Result<Target, String> {
        let without_fragment = url.split('#').next().unwrap_or_default().trim();
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
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        if host.is_empty() {
            return Err(format!("URL has an empty host: {url:?}"));
        }
        let ip = host.parse::<IpAddr>().ok();
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
        ] {
            assert!(Target::parse(bad).is_err(), "{bad:?} should be refused");
        }
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
    fn same_origin_needs_scheme_host_and_port() {
        let base = t("http://127.0.0.1:8000/a");
        assert!(base.same_origin(&t("http://127.0.0.1:8000/b")));
        assert!(!base.same_origin(&t("http://127.0.0.2:8000/a")));
        assert!(!base.same_origin(&t("http://127.0.0.1:8001/a")));
        assert!(!base.same_origin(&t("https://127.0.0.1:8000/a")));
        assert!(t("https://a.example/").same_origin(&t("https://A.example:443/x")));
    }
}
