//! Address guard (SSRF): which IP addresses the prober may connect to.
//!
//! Pure: no DNS, no IO. The fetcher resolves names itself, runs every resolved address through
//! [`is_forbidden`] and then connects to that very address, so a name that resolves to a public
//! address once and to a private one later (DNS rebinding) cannot slip past.
//!
//! The rule is an allow-list in spirit: IPv4 is public unless it falls in a special-purpose range
//! (IANA IPv4 Special-Purpose Address Registry); IPv6 is public only inside global unicast
//! `2000::/3`, minus its special-purpose blocks. IPv6 forms that carry an IPv4 address
//! (IPv4-mapped, IPv4-compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the IPv4
//! address they carry, because that is where the packets end up.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// What kind of address an IP is, as far as the prober's safety is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AddressClass {
    /// Globally routable: the only class the prober reaches without `allow_private`.
    Public,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `0.0.0.0/8` other than `0.0.0.0`: "this network", not a destination.
    ThisNetwork,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// Shared address space for carrier-grade NAT, `100.64.0.0/10`.
    SharedCgnat,
    /// The cloud instance metadata address `169.254.169.254` (a link-local address, named apart
    /// because reaching it is the classic SSRF goal).
    CloudMetadata,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// IPv6 unique local `fc00::/7`.
    UniqueLocal,
    /// Deprecated IPv6 site-local `fec0::/10`.
    SiteLocal,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// Limited broadcast `255.255.255.255`.
    Broadcast,
    /// Documentation ranges: `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`,
    /// `3fff::/20`.
    Documentation,
    /// Benchmarking `198.18.0.0/15`.
    Benchmarking,
    /// Any other special-purpose or unallocated range (IETF protocol assignments, reserved
    /// `240/4`, 6to4 relay anycast, discard-only, local-use NAT64, IPv6 outside `2000::/3`...).
    Reserved,
}

impl AddressClass {
    /// Why an address of this class is refused, or `None` for [`AddressClass::Public`].
    pub fn refusal_reason(self) -> Option<&'static str> {
        let reason = match self {
            AddressClass::Public => return None,
            AddressClass::Loopback => "loopback address",
            AddressClass::Unspecified => "unspecified address",
            AddressClass::ThisNetwork => "\"this network\" address (0.0.0.0/8)",
            AddressClass::Private => "private address (RFC 1918)",
            AddressClass::SharedCgnat => "carrier-grade NAT shared address (100.64.0.0/10)",
            AddressClass::CloudMetadata => "cloud instance metadata address",
            AddressClass::LinkLocal => "link-local address",
            AddressClass::UniqueLocal => "IPv6 unique local address (fc00::/7)",
            AddressClass::SiteLocal => "IPv6 site-local address (fec0::/10)",
            AddressClass::Multicast => "multicast address",
            AddressClass::Broadcast => "broadcast address",
            AddressClass::Documentation => "documentation address",
            AddressClass::Benchmarking => "benchmarking address (198.18.0.0/15)",
            AddressClass::Reserved => "reserved or special-purpose address",
        };
        Some(reason)
    }
}

/// How an IPv6 address carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Embedding {
    /// `::ffff:a.b.c.d`
    Ipv4Mapped,
    /// `::a.b.c.d` (deprecated, but some stacks still route it)
    Ipv4Compatible,
    /// `64:ff9b::a.b.c.d` (RFC 6052 well-known NAT64 prefix)
    Nat64,
    /// `2002:aabb:ccdd::/48` (6to4)
    SixToFour,
}

impl Embedding {
    pub fn as_str(self) -> &'static str {
        match self {
            Embedding::Ipv4Mapped => "IPv4-mapped IPv6",
            Embedding::Ipv4Compatible => "IPv4-compatible IPv6",
            Embedding::Nat64 => "NAT64 (64:ff9b::/96)",
            Embedding::SixToFour => "6to4 (2002::/16)",
        }
    }
}

/// The class of `ip`. IPv6 addresses that carry an IPv4 address get the class of that IPv4
/// address (see [`embedded_ipv4`]).
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// `Some(reason)` when the prober must not connect to `ip` (unless configured to allow private
/// addresses), `None` when `ip` is public.
pub fn is_forbidden(ip: IpAddr) -> Option<&'static str> {
    classify(ip).refusal_reason()
}

/// The IPv4 address an IPv6 address carries, and how, for the forms the guard looks through.
/// `::` and `::1` are IPv6's own unspecified and loopback addresses, not IPv4-compatible ones.
pub fn embedded_ipv4(v6: Ipv6Addr) -> Option<(Embedding, Ipv4Addr)> {
    let s = v6.segments();
    let low32 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..5] == [0, 0, 0, 0, 0] && s[5] == 0xffff {
        return Some((Embedding::Ipv4Mapped, low32));
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && v6 != Ipv6Addr::UNSPECIFIED && v6 != Ipv6Addr::LOCALHOST {
        return Some((Embedding::Ipv4Compatible, low32));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some((Embedding::Nat64, low32));
    }
    if s[0] == 0x2002 {
        let carried = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        return Some((Embedding::SixToFour, carried));
    }
    None
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = ip.octets();
    if ip == Ipv4Addr::UNSPECIFIED {
        return AddressClass::Unspecified;
    }
    if ip == Ipv4Addr::BROADCAST {
        return AddressClass::Broadcast;
    }
    if ip == Ipv4Addr::new(169, 254, 169, 254) {
        return AddressClass::CloudMetadata;
    }
    match (a, b, c) {
        (0, _, _) => AddressClass::ThisNetwork,
        (10, _, _) => AddressClass::Private,
        (100, 64..=127, _) => AddressClass::SharedCgnat,
        (127, _, _) => AddressClass::Loopback,
        (169, 254, _) => AddressClass::LinkLocal,
        (172, 16..=31, _) => AddressClass::Private,
        // IETF protocol assignments (192.0.0.0/24) and the old 6to4 relay anycast (192.88.99/24).
        (192, 0, 0) | (192, 88, 99) => AddressClass::Reserved,
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => AddressClass::Documentation,
        (192, 168, _) => AddressClass::Private,
        (198, 18..=19, _) => AddressClass::Benchmarking,
        (224..=239, _, _) => AddressClass::Multicast,
        (240..=255, _, _) => AddressClass::Reserved,
        _ => AddressClass::Public,
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    if ip == Ipv6Addr::UNSPECIFIED {
        return AddressClass::Unspecified;
    }
    if ip == Ipv6Addr::LOCALHOST {
        return AddressClass::Loopback;
    }
    if let Some((_, carried)) = embedded_ipv4(ip) {
        return classify_v4(carried);
    }
    let s = ip.segments();
    let first = s[0];
    if first & 0xff00 == 0xff00 {
        return AddressClass::Multicast;
    }
    if first & 0xffc0 == 0xfe80 {
        return AddressClass::LinkLocal;
    }
    if first & 0xffc0 == 0xfec0 {
        return AddressClass::SiteLocal;
    }
    if first & 0xfe00 == 0xfc00 {
        return AddressClass::UniqueLocal;
    }
    // Everything outside global unicast 2000::/3 is reserved or unallocated, including
    // 64:ff9b:1::/48 (local-use NAT64), 100::/64 (discard-only) and the rest of ::/8.
    if first & 0xe000 != 0x2000 {
        return AddressClass::Reserved;
    }
    if first == 0x2001 && s[1] == 0x0db8 {
        return AddressClass::Documentation;
    }
    // 3fff::/20 (RFC 9637).
    if first == 0x3fff && s[1] & 0xf000 == 0 {
        return AddressClass::Documentation;
    }
    // 2001::/23 IETF protocol assignments (Teredo, ORCHID, benchmarking 2001:2::/48, ...):
    // nothing a paid API is served from, and Teredo can tunnel to IPv4 addresses.
    if first == 0x2001 && s[1] & 0xfe00 == 0 {
        return AddressClass::Reserved;
    }
    // 5f00::/16 SRv6 segment identifiers (RFC 9602), not globally routable.
    if first == 0x5f00 {
        return AddressClass::Reserved;
    }
    AddressClass::Public
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> AddressClass {
        classify(s.parse::<Ipv4Addr>().expect("test literal").into())
    }

    fn v6(s: &str) -> AddressClass {
        classify(s.parse::<Ipv6Addr>().expect("test literal").into())
    }

    use AddressClass::*;

    #[test]
    fn this_network_and_unspecified() {
        assert_eq!(v4("0.0.0.0"), Unspecified);
        assert_eq!(v4("0.0.0.1"), ThisNetwork);
        assert_eq!(v4("0.255.255.255"), ThisNetwork);
        assert_eq!(v4("1.0.0.0"), Public);
        assert_eq!(v6("::"), Unspecified);
    }

    #[test]
    fn rfc1918_boundaries() {
        assert_eq!(v4("9.255.255.255"), Public);
        assert_eq!(v4("10.0.0.0"), Private);
        assert_eq!(v4("10.255.255.255"), Private);
        assert_eq!(v4("11.0.0.0"), Public);
        assert_eq!(v4("172.15.255.255"), Public);
        assert_eq!(v4("172.16.0.0"), Private);
        assert_eq!(v4("172.31.255.255"), Private);
        assert_eq!(v4("172.32.0.0"), Public);
        assert_eq!(v4("192.167.255.255"), Public);
        assert_eq!(v4("192.168.0.0"), Private);
        assert_eq!(v4("192.168.255.255"), Private);
        assert_eq!(v4("192.169.0.0"), Public);
    }

    #[test]
    fn cgnat_boundaries() {
        assert_eq!(v4("100.63.255.255"), Public);
        assert_eq!(v4("100.64.0.0"), SharedCgnat);
        assert_eq!(v4("100.127.255.255"), SharedCgnat);
        assert_eq!(v4("100.128.0.0"), Public);
    }

    #[test]
    fn loopback_boundaries() {
        assert_eq!(v4("126.255.255.255"), Public);
        assert_eq!(v4("127.0.0.0"), Loopback);
        assert_eq!(v4("127.0.0.1"), Loopback);
        assert_eq!(v4("127.255.255.255"), Loopback);
        assert_eq!(v4("128.0.0.0"), Public);
        assert_eq!(v6("::1"), Loopback);
        assert_eq!(v6("::2"), ThisNetwork, "IPv4-compatible ::0.0.0.2");
    }

    #[test]
    fn link_local_and_metadata() {
        assert_eq!(v4("169.253.255.255"), Public);
        assert_eq!(v4("169.254.0.0"), LinkLocal);
        assert_eq!(v4("169.254.169.253"), LinkLocal);
        assert_eq!(v4("169.254.169.254"), CloudMetadata);
        assert_eq!(v4("169.254.169.255"), LinkLocal);
        assert_eq!(v4("169.254.255.255"), LinkLocal);
        assert_eq!(v4("169.255.0.0"), Public);
        assert_eq!(v6("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Reserved);
        assert_eq!(v6("fe80::"), LinkLocal);
        assert_eq!(v6("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), LinkLocal);
        assert_eq!(v6("fec0::"), SiteLocal);
        assert_eq!(v6("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), SiteLocal);
        assert_eq!(v6("ff00::"), Multicast);
    }

    #[test]
    fn reserved_and_documentation_v4() {
        assert_eq!(v4("191.255.255.255"), Public);
        assert_eq!(v4("192.0.0.0"), Reserved);
        assert_eq!(v4("192.0.0.255"), Reserved);
        assert_eq!(v4("192.0.1.0"), Public);
        assert_eq!(v4("192.0.2.0"), Documentation);
        assert_eq!(v4("192.0.2.255"), Documentation);
        assert_eq!(v4("192.0.3.0"), Public);
        assert_eq!(v4("192.88.98.255"), Public);
        assert_eq!(v4("192.88.99.0"), Reserved);
        assert_eq!(v4("192.88.100.0"), Public);
        assert_eq!(v4("198.17.255.255"), Public);
        assert_eq!(v4("198.18.0.0"), Benchmarking);
        assert_eq!(v4("198.19.255.255"), Benchmarking);
        assert_eq!(v4("198.20.0.0"), Public);
        assert_eq!(v4("198.51.99.255"), Public);
        assert_eq!(v4("198.51.100.0"), Documentation);
        assert_eq!(v4("198.51.101.0"), Public);
        assert_eq!(v4("203.0.112.255"), Public);
        assert_eq!(v4("203.0.113.0"), Documentation);
        assert_eq!(v4("203.0.113.255"), Documentation);
        assert_eq!(v4("203.0.114.0"), Public);
    }

    #[test]
    fn multicast_reserved_broadcast_v4() {
        assert_eq!(v4("223.255.255.255"), Public);
        assert_eq!(v4("224.0.0.0"), Multicast);
        assert_eq!(v4("239.255.255.255"), Multicast);
        assert_eq!(v4("240.0.0.0"), Reserved);
        assert_eq!(v4("255.255.255.254"), Reserved);
        assert_eq!(v4("255.255.255.255"), Broadcast);
    }

    #[test]
    fn unique_local_boundaries() {
        assert_eq!(v6("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Reserved);
        assert_eq!(v6("fc00::"), UniqueLocal);
        assert_eq!(v6("fd00:ec2::254"), UniqueLocal);
        assert_eq!(v6("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), UniqueLocal);
        assert_eq!(v6("fe00::"), Reserved);
    }

    #[test]
    fn global_unicast_v6() {
        assert_eq!(v6("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Reserved);
        assert_eq!(v6("2000::"), Public);
        assert_eq!(v6("2606:4700:4700::1111"), Public);
        assert_eq!(v6("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Public);
        assert_eq!(v6("4000::"), Reserved);
    }

    #[test]
    fn special_blocks_inside_global_unicast() {
        assert_eq!(v6("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff"), Public);
        assert_eq!(v6("2001:db8::"), Documentation);
        assert_eq!(v6("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"), Documentation);
        assert_eq!(v6("2001:db9::"), Public);
        assert_eq!(v6("3ffe::"), Public);
        assert_eq!(v6("3fff::"), Documentation);
        assert_eq!(v6("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff"), Documentation);
        assert_eq!(v6("3fff:1000::"), Public);
        assert_eq!(v6("2001::"), Reserved, "Teredo");
        assert_eq!(v6("2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff"), Reserved);
        assert_eq!(v6("2001:200::"), Public);
        assert_eq!(v6("5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Reserved);
        assert_eq!(v6("5f00::"), Reserved);
    }

    #[test]
    fn discard_and_local_nat64_are_reserved() {
        assert_eq!(v6("100::"), Reserved);
        assert_eq!(v6("64:ff9b:1::1"), Reserved);
    }

    #[test]
    fn ipv4_mapped_is_judged_by_the_ipv4() {
        assert_eq!(v6("::ffff:127.0.0.1"), Loopback);
        assert_eq!(v6("::ffff:10.0.0.1"), Private);
        assert_eq!(v6("::ffff:169.254.169.254"), CloudMetadata);
        assert_eq!(v6("::ffff:0.0.0.0"), Unspecified);
        assert_eq!(v6("::ffff:8.8.8.8"), Public);
        // One bit off the mapped prefix is no longer mapped (and no longer global unicast).
        assert_eq!(v6("::fffe:8.8.8.8"), Reserved);
        assert_eq!(
            embedded_ipv4("::ffff:1.2.3.4".parse().expect("literal")),
            Some((Embedding::Ipv4Mapped, Ipv4Addr::new(1, 2, 3, 4)))
        );
    }

    #[test]
    fn ipv4_compatible_is_judged_by_the_ipv4() {
        assert_eq!(v6("::127.0.0.1"), Loopback);
        assert_eq!(v6("::192.168.1.1"), Private);
        assert_eq!(v6("::8.8.8.8"), Public);
        assert_eq!(embedded_ipv4(Ipv6Addr::LOCALHOST), None);
        assert_eq!(embedded_ipv4(Ipv6Addr::UNSPECIFIED), None);
    }

    #[test]
    fn nat64_is_judged_by_the_ipv4() {
        assert_eq!(v6("64:ff9b::127.0.0.1"), Loopback);
        assert_eq!(v6("64:ff9b::a9fe:a9fe"), CloudMetadata);
        assert_eq!(v6("64:ff9b::8.8.8.8"), Public);
        assert_eq!(v6("64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff"), Reserved);
        assert_eq!(v6("64:ff9b:0:0:0:1::"), Reserved, "outside the /96");
    }

    #[test]
    fn six_to_four_is_judged_by_the_ipv4() {
        assert_eq!(v6("2002:7f00:1::"), Loopback);
        assert_eq!(v6("2002:c0a8:101::1"), Private);
        assert_eq!(v6("2002:a9fe:a9fe::"), CloudMetadata);
        assert_eq!(v6("2002:808:808::1"), Public);
        assert_eq!(v6("2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Public);
        assert_eq!(v6("2003::"), Public);
    }

    #[test]
    fn forbidden_gives_a_reason_and_public_none() {
        assert_eq!(is_forbidden("8.8.8.8".parse().expect("literal")), None);
        assert_eq!(
            is_forbidden("127.0.0.1".parse().expect("literal")),
            Some("loopback address")
        );
        assert_eq!(
            is_forbidden("::ffff:127.0.0.1".parse().expect("literal")),
            Some("loopback address")
        );
        assert!(is_forbidden("169.254.169.254".parse().expect("literal")).is_some());
        assert!(is_forbidden("fc00::1".parse().expect("literal")).is_some());
    }
}
