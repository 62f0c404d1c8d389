//! TLS for the prober: a client configuration whose certificate verifier *records* what webpki
//! concluded, and (when asked to observe invalid TLS) lets the handshake go on so the rest of the
//! exchange can still be seen. Also reads the leaf certificate's validity and names.

use std::sync::{Arc, Mutex, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

/// What the verifier saw during one handshake.
#[derive(Debug, Clone, Default)]
pub struct VerifySeen {
    /// The peer's chain as sent, leaf first.
    pub chain_der: Vec<Vec<u8>>,
    /// webpki's verdict: `None` when the chain verified, else the error.
    pub error: Option<String>,
}

/// Wraps the webpki verifier: records its verdict, and passes it on unless `observe_invalid`.
/// Handshake signatures are always checked for real (against the leaf's key), so an observed
/// exchange is at least with whoever holds the certificate's key.
#[derive(Debug)]
pub struct RecordingVerifier {
    inner: Arc<WebPkiServerVerifier>,
    observe_invalid: bool,
    seen: Mutex<Option<VerifySeen>>,
}

impl RecordingVerifier {
    /// What the last `verify_server_cert` call saw (`None` if the handshake never got there).
    pub fn seen(&self) -> Option<VerifySeen> {
        self.seen.lock().ok().and_then(|guard| guard.clone())
    }
}

impl ServerCertVerifier for RecordingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verdict = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        let chain_der = std::iter::once(end_entity)
            .chain(intermediates)
            .map(|der| der.as_ref().to_vec())
            .collect();
        let error = verdict.as_ref().err().map(ToString::to_string);
        if let Ok(mut slot) = self.seen.lock() {
            *slot = Some(VerifySeen { chain_der, error });
        }
        match verdict {
            Err(_) if self.observe_invalid => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            // Other parts of the program (and reqwest in tests) look for a process-wide default;
            // installing it is harmless when someone already did.
            let _already_installed = rustls::crypto::ring::default_provider().install_default();
            Arc::new(rustls::crypto::ring::default_provider())
        })
        .clone()
}

fn webpki_roots_store() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut store = RootCertStore::empty();
            store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            Arc::new(store)
        })
        .clone()
}

/// The webpki verifier for the webpki roots and `extra_roots`. Built once for the roots last
/// asked for (a daemon has one set): every handshake used to copy the whole root store and
/// build a verifier of its own.
fn webpki_verifier(
    extra_roots: &[CertificateDer<'static>],
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    type Built = (Vec<CertificateDer<'static>>, Arc<WebPkiServerVerifier>);
    static LAST: Mutex<Option<Built>> = Mutex::new(None);
    if let Some((roots, verifier)) = &*LAST.lock().unwrap_or_else(|p| p.into_inner())
        && roots.as_slice() == extra_roots
    {
        return Ok(verifier.clone());
    }
    let roots = if extra_roots.is_empty() {
        webpki_roots_store()
    } else {
        let mut store = (*webpki_roots_store()).clone();
        for (i, root) in extra_roots.iter().enumerate() {
            store
                .add(root.clone())
                .map_err(|e| format!("extra root #{i} is not a usable CA certificate: {e}"))?;
        }
        Arc::new(store)
    };
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| format!("cannot build the certificate verifier: {e}"))?;
    *LAST.lock().unwrap_or_else(|p| p.into_inner()) =
        Some((extra_roots.to_vec(), verifier.clone()));
    Ok(verifier)
}

/// A client configuration for one handshake, and the verifier to ask afterwards what it saw.
pub fn client_config(
    extra_roots: &[CertificateDer<'static>],
    observe_invalid: bool,
) -> Result<(Arc<rustls::ClientConfig>, Arc<RecordingVerifier>), String> {
    let provider = provider();
    let inner = webpki_verifier(extra_roots, &provider)?;
    let verifier = Arc::new(RecordingVerifier {
        inner,
        observe_invalid,
        seen: Mutex::new(None),
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot configure TLS versions: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), verifier))
}

/// What the leaf certificate says about itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeafFacts {
    pub not_before: Option<i64>,
    pub not_after: Option<i64>,
    pub subject: Option<String>,
    pub issuer: Option<String>,
}

/// Reads validity and names from a DER certificate; unparsable input gives empty facts.
pub fn leaf_facts(der: &[u8]) -> LeafFacts {
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => LeafFacts {
            not_before: Some(cert.validity().not_before.timestamp()),
            not_after: Some(cert.validity().not_after.timestamp()),
            subject: Some(cert.subject().to_string()),
            issuer: Some(cert.issuer().to_string()),
        },
        Err(_) => LeafFacts::default(),
    }
}

/// `TLSv1.3` rather than rustls' `TLSv1_3`.
pub fn version_name(version: rustls::ProtocolVersion) -> String {
    match version {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3".to_string(),
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2".to_string(),
        other => format!("{other:?}"),
    }
}

/// The IANA name of the negotiated cipher suite.
pub fn cipher_name(suite: rustls::SupportedCipherSuite) -> String {
    let id = suite.suite();
    id.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("{id:?}"))
}
