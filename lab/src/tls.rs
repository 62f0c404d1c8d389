//! A test certificate authority made at runtime, and leaf certificates with chosen lifetimes.
//!
//! The CA exists only in memory and in one PEM file in the lab's temporary directory; the probe trusts it
//! only when told to (`--ca-file`).

use std::sync::Arc;

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::{Duration, OffsetDateTime};

/// How long a leaf certificate is valid, relative to now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// Valid from yesterday for five years. A real site renews its certificate; the lab's servers
    /// do not follow a simulated clock, so a certificate of one year would come within S1's 14
    /// days near the end of a simulated year (the year bench, `simulate --days 365`) and an honest
    /// endpoint would turn into one that fails S1.
    Good,
    /// Valid from yesterday until 5 days from now (S1 wants more than 14).
    ExpiresInDays(i64),
    /// Valid from 30 days ago until yesterday.
    Expired,
}

pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    der: CertificateDer<'static>,
}

/// A leaf certificate and its key, ready for a rustls server.
#[derive(Clone)]
pub struct Leaf {
    pub chain: Vec<CertificateDer<'static>>,
    pub key_der: Vec<u8>,
    pub not_after: OffsetDateTime,
}

/// The names every lab leaf certificate covers: the loopback names the lab's URLs use.
const LEAF_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "127.0.0.2"];

impl TestCa {
    pub fn new() -> Result<TestCa> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "x402-probe lab test CA");
        dn.push(DnType::OrganizationName, "x402-probe lab");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::days(60);
        params.not_after = now + Duration::days(3650);
        let key = KeyPair::generate().context("generating the test CA key")?;
        let cert = params
            .self_signed(&key)
            .context("self-signing the test CA")?;
        let pem = cert.pem();
        let der = cert.der().clone();
        Ok(TestCa {
            issuer: Issuer::new(params, key),
            pem,
            der,
        })
    }

    /// The CA certificate in PEM, as written to the manifest's `ca_file`.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    pub fn der(&self) -> &CertificateDer<'static> {
        &self.der
    }

    /// A leaf for the lab's loopback names with the given lifetime.
    pub fn leaf(&self, lifetime: Lifetime) -> Result<Leaf> {
        self.leaf_also_for(lifetime, &[])
    }

    /// A leaf for the loopback names and `also` (an address the lab serves vantages at).
    pub fn leaf_also_for(&self, lifetime: Lifetime, also: &[std::net::IpAddr]) -> Result<Leaf> {
        let now = OffsetDateTime::now_utc();
        let (not_before, not_after) = match lifetime {
            Lifetime::Good => (now - Duration::days(1), now + Duration::days(5 * 365)),
            Lifetime::ExpiresInDays(d) => (now - Duration::days(1), now + Duration::days(d)),
            Lifetime::Expired => (now - Duration::days(30), now - Duration::days(1)),
        };
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.subject_alt_names = LEAF_NAMES
            .iter()
            .map(|n| match n.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => Ok(SanType::DnsName((*n).try_into()?)),
            })
            .chain(also.iter().map(|ip| Ok(SanType::IpAddress(*ip))))
            .collect::<Result<Vec<_>, rcgen::Error>>()?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "localhost");
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = not_before;
        params.not_after = not_after;
        let key = KeyPair::generate().context("generating a leaf key")?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .context("signing a leaf")?;
        Ok(Leaf {
            chain: vec![cert.der().clone(), self.der.clone()],
            key_der: key.serialize_der(),
            not_after,
        })
    }
}

impl Leaf {
    /// A rustls server configuration presenting this leaf (HTTP/1.1 only).
    pub fn server_config(&self) -> Result<Arc<ServerConfig>> {
        crate::install_crypto_provider();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let mut config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), key)
            .context("building the TLS server configuration")?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A good certificate outlives any simulated year (the year bench, `simulate --days 365`):
    /// S1 wants more than 14 days left, so it must hold well past a year from now.
    #[test]
    fn a_good_certificate_outlives_a_simulated_year() {
        let ca = TestCa::new().unwrap();
        let good = ca.leaf(Lifetime::Good).unwrap();
        assert!(good.not_after > OffsetDateTime::now_utc() + Duration::days(2 * 365));
        let soon = ca.leaf(Lifetime::ExpiresInDays(5)).unwrap();
        assert!(soon.not_after < OffsetDateTime::now_utc() + Duration::days(6));
    }
}
