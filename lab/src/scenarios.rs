//! The catalogue of named scenarios: what each lab endpoint does, and what the rubric's checks should
//! conclude about it (`expect`, the lab's promise and the probes' acceptance table).
//!
//! Expectations are written by hand from the scenario's intent, never computed by code that mirrors the
//! probe: a shared baseline for an honest endpoint, then explicit overrides per scenario. A check left out
//! of a scenario's map is one the scenario makes no promise about (typically `unmeasured`, because the
//! probe cannot see that far, e.g. no 402 to parse).

use std::collections::BTreeMap;

use crate::reference::LabReference;
use crate::tls::Lifetime;

/// How the endpoint is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Https(Lifetime),
    Http,
}

/// Which x402 version the endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `PAYMENT-REQUIRED` header, `PAYMENT-SIGNATURE`, `PAYMENT-RESPONSE`.
    V2,
    /// JSON body, `X-PAYMENT`, `X-PAYMENT-RESPONSE`.
    V1,
}

/// A fault in the published payment requirements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuoteFault {
    None,
    /// v2 header plus a body that is also a PaymentRequired, identical to the header.
    HeaderAndBodyAgree,
    /// v2 header plus a body PaymentRequired with another amount.
    HeaderBodyDisagree,
    BadBase64,
    BadJson,
    MissingAccepts,
    /// `amount` is `"0.01"`.
    AmountNotInteger,
    /// `payTo` in lower case (not EIP-55).
    PayToLowercase,
    /// `network` is `"anvil"` instead of `eip155:31337`.
    NetworkNotCaip2,
    MaxTimeout(u64),
    /// `scheme` is `"stream"`.
    UnknownScheme,
    /// The asset is the fake token, whose EIP-712 domain differs from the declared `extra`.
    FakeAsset,
    /// The bazaar extension's `schema` is not a valid JSON Schema.
    InvalidBazaarSchema,
    /// Only a Permit2 transfer method is offered.
    Permit2Only,
    /// 25 USDC per call, above any sane probe cap.
    Expensive,
    /// Base mainnet and its USDC: not on the lab probe's allowlist.
    OffAllowlistNetwork,
    /// The first quote is the normal price; every later 402 asks for three times as much.
    PriceRisesAfterFirst,
    /// A Solana quote (the exact SVM scheme on the lab's SVM, which calls itself devnet).
    Solana(SolanaQuote),
    /// Scheme `upto`: the amount is a maximum of the honest price, `extra.facilitatorAddress`
    /// names the facilitator the Permit2 witness binds (the EVM `upto` scheme settles only
    /// through Permit2).
    Upto,
    /// Scheme `upto` with a maximum of 25 USDC, above any sane probe cap.
    UptoExpensive,
}

/// What a Solana quote gets wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SolanaQuote {
    /// USDC of devnet to a payee whose USDC account is open, with the facilitator's fee payer.
    Honest,
    /// A mint of 6 decimals that is not USDC.
    WrongMint,
    /// A payee that has no USDC account: nobody can pay it.
    MissingAccount,
    /// A payee whose USDC account is frozen: every transfer into it fails.
    FrozenAccount,
    /// payTo is not base58 (a `0` and an `l` in it).
    BadBase58,
    /// No `extra.feePayer`: a client cannot build the transaction.
    FeePayerMissing,
    /// `extra.memo` of 300 bytes (the scheme allows 256).
    MemoTooLong,
}

/// Text published in the description and docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFault {
    None,
    Injection,
    SecretAsk,
    HiddenUnicode,
}

/// How the endpoint answers unpaid requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reliability {
    Normal,
    /// Waits this long before sending the response head.
    SlowTtfb(u64),
    /// Answers 503 to this share of requests, deterministically spread (request i fails when
    /// floor((i+1)*share) > floor(i*share)).
    Flaky(f64),
    /// Nothing listens on the port.
    Down,
    Status500,
    /// 200 with the content, without payment.
    Free200,
    /// 302 to the same resource on 127.0.0.2 (another host).
    RedirectOffHost,
    /// 302 to itself, forever.
    RedirectLoop,
    /// 307 to another path on the same host, which answers the 402.
    RedirectSameHost,
    /// Declares `application/json` and sends HTML with a script.
    ContentTypeLies,
}

/// What happens after a valid payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paid {
    Honest,
    /// Settles, then answers 500 (charge without delivery).
    SettleThen500,
    /// Settles and answers 200 with an empty body.
    EmptyOutput,
    /// Settles and answers 200 with JSON that does not match the declared output.
    InvalidOutput,
    /// Settles, but the `PAYMENT-RESPONSE` names a transaction that does not exist.
    FakePaymentResponse,
    /// Delivers without ever settling, and sends no `PAYMENT-RESPONSE`.
    NoSettlement,
    /// Settles, answers 500, and refunds within the declared window.
    RefundKept,
    /// Settles, answers 500, declares a refund rule and never refunds.
    RefundBroken,
    /// Settles, but first answers 402 with a `settlement_pending` receipt naming the transaction
    /// (x402's non-terminal settle outcome); the same payment sent again gets the output and the
    /// final receipt.
    SettlementPending,
    /// Settles, and answers every sending of the payment with a `settlement_pending` 402: charged,
    /// never delivered.
    PendingForever,
    /// Settles, answers `settlement_pending`, then answers the same payment sent again with a
    /// fresh 402 asking to pay again (the trap that makes naive clients pay twice).
    PendingThen402,
    /// Advertises the `payment-identifier` extension (required): a payment without an id is
    /// refused (400); a payment sent again with the same id and the same payload is answered
    /// from the cache (the output and the first receipt), never settled again; the same id with
    /// another payload is a 409.
    Idempotent,
    /// Advertises `payment-identifier`, settles honestly, and treats the same payment sent again
    /// with the same id as a new order: it pulls the amount again through the allowance the payer
    /// granted the dishonest facilitator's signer, and answers the output with a new receipt.
    IdempotencyDoubleCharge,
    /// Batch or credit-backed settlement: takes the payment, answers the output with a receipt
    /// whose `transaction` is a commitment id (`batch_...`); the value would move when the batch
    /// closes, which the lab never reaches: nothing moves during the call.
    BatchCommitment,
    /// Answers a commitment id as `BatchCommitment` does, but settles at once through its
    /// facilitator (the double-pull one in the scenario): money moved, so it is judged.
    BatchCommitmentSettled,
}

impl Paid {
    /// Whether the endpoint advertises the `payment-identifier` extension.
    pub fn advertises_payment_identifier(self) -> bool {
        matches!(self, Paid::Idempotent | Paid::IdempotencyDoubleCharge)
    }
}

/// Which facilitator the endpoint settles through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FacilitatorKind {
    Honest,
    /// Settles the authorization, then pulls the same amount again from an allowance.
    DoublePull,
    /// Ignores the authorization and pulls three times the amount from an allowance.
    Overcharge,
    /// Ignores the authorization and pulls the amount to another address.
    WrongPayee,
    /// Claims success with a made-up transaction hash; nothing is sent.
    FakeHash,
}

impl FacilitatorKind {
    pub const ALL: [FacilitatorKind; 5] = [
        FacilitatorKind::Honest,
        FacilitatorKind::DoublePull,
        FacilitatorKind::Overcharge,
        FacilitatorKind::WrongPayee,
        FacilitatorKind::FakeHash,
    ];
    pub fn name(self) -> &'static str {
        match self {
            FacilitatorKind::Honest => "honest",
            FacilitatorKind::DoublePull => "double-pull",
            FacilitatorKind::Overcharge => "overcharge",
            FacilitatorKind::WrongPayee => "wrong-payee",
            FacilitatorKind::FakeHash => "fake-hash",
        }
    }
}

/// Hostile behaviour at the HTTP level (raw bytes, not a well-behaved server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hostile {
    /// A 402 whose body is 64 MiB.
    HugeBody,
    /// A response head with 1 MiB of headers.
    HugeHeader,
    /// Sends the response head one byte per second.
    Slowloris,
    /// A 402 whose body is gzip (not asked for) that inflates to 1 GiB.
    GzipBomb,
    /// A 402 whose chunked body never ends.
    EndlessChunked,
    /// A v2 PaymentRequired only in the body, filling it to just under 1 MiB with about 350,000
    /// empty `accepts` entries.
    AcceptsFloodBody,
    /// A `PAYMENT-REQUIRED` header whose `accepts` holds 10,000 empty entries (about 40 KB).
    AcceptsFloodHeader,
    /// An honest `PAYMENT-REQUIRED` header whose `extensions` hold a chain of arrays nested 100
    /// deep (within what common JSON parsers accept, beyond what any client needs).
    DeepNesting,
    /// A v2 PaymentRequired only in the body, filling it to just under 1 MiB with entries whose
    /// every field has the wrong JSON type: about ten deviations per entry.
    DeviationFlood,
    /// Two `PAYMENT-REQUIRED` headers: the honest quote, then one with another payee and twice the
    /// price. Served over ordinary HTTP, and it settles a payment for the first.
    DuplicateHeadersDisagree,
    /// The honest `PAYMENT-REQUIRED` header, sent twice.
    DuplicateHeadersAgree,
    /// `Payment-Required` and `PAYMENT-REQUIRED` on the wire, with different payees.
    DuplicateHeadersCase,
    /// An honest `PAYMENT-REQUIRED` header, and two `Content-Type` headers that disagree
    /// (`application/json` and `text/html`).
    DuplicateContentType,
    /// An honest header whose bazaar schema is a recursive `anyOf` with two identical branches and
    /// whose `info` nests an array 40 deep: validating it naively takes 2^40 steps.
    SchemaBomb,
}

impl Hostile {
    /// Whether this behaviour is written as raw bytes (one response per connection, whatever was
    /// asked); the others are served over ordinary HTTP, payments included.
    pub fn is_raw(self) -> bool {
        !matches!(
            self,
            Hostile::DuplicateHeadersDisagree | Hostile::DuplicateHeadersAgree
        )
    }
}

/// How the discovery catalogue lists the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// With the same requirements the 402 quotes.
    AsQuoted,
    /// With half the quoted price.
    DifferentPrice,
    Unlisted,
}

/// What `/.well-known/x402-operator.json` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// Lists the quoted payTo.
    ListsPayTo,
    /// Lists only another wallet.
    ListsOther,
    Absent,
    Malformed,
}

/// What the findings peers publish read of an endpoint (`probes/findings/`), beyond the rubric's
/// checks. The default is the honest endpoint's: a 402 that describes itself, no OpenAPI
/// document, the machine answer for a browser too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerTraits {
    /// The 402 carries no bazaar extension: nothing in it describes the resource.
    pub undescribed_402: bool,
    /// Serves an OpenAPI 3.1 document describing `/weather` at `/openapi.json`.
    pub openapi: bool,
    /// Answers a browser's request (`Accept: text/html`, no payment) with an HTML paywall page
    /// (402, as the x402 paywall does).
    pub html_paywall: bool,
    /// The 402's `resource.url` names another endpoint of another host.
    pub resource_elsewhere: bool,
    /// After settling, answers this status (401 or 403) and no output: pay-then-refuse.
    pub refuse_after_pay: Option<u16>,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub summary: &'static str,
    pub transport: Transport,
    pub protocol: Protocol,
    pub quote: QuoteFault,
    pub text: TextFault,
    pub reliability: Reliability,
    pub paid: Paid,
    pub facilitator: FacilitatorKind,
    pub hostile: Option<Hostile>,
    pub listing: Listing,
    pub operator: Operator,
    /// Its operator file declares an ERC-8004 agent identity (`registrations`: the agent the lab
    /// registers for it in its agent registry), which `ledger feedback` rates.
    pub declares_agent: bool,
    /// A reference endpoint (R6): what it answers after payment, and the reference the probe
    /// links it to (`reference.rs`); none: the weather.
    pub reference: Option<crate::reference::LabReference>,
    /// Signed offers and receipts (`offer-receipt`), v2 only.
    pub offers: crate::offers::Signing,
    /// The outcome each check should reach: `pass`, `fail` or `na`.
    pub expect: BTreeMap<&'static str, &'static str>,
    /// What the findings peers publish read of it (`peer`).
    pub peer: PeerTraits,
    /// The outcome each finding should reach (`described`, `resource_url`, `browser_paywall`,
    /// `known_facilitator`, `pay_then_refused`): a finding left out is not promised.
    pub findings: BTreeMap<&'static str, &'static str>,
}

/// Free checks of an honest endpoint.
const HONEST_FREE: [(&str, &str); 14] = [
    ("R1", "pass"),
    ("R2", "pass"),
    ("R3", "pass"),
    ("C1", "pass"),
    ("C2", "pass"),
    ("C3", "pass"),
    ("C4", "na"),
    ("C5", "pass"),
    ("H1", "pass"),
    ("H4", "pass"),
    ("S1", "pass"),
    ("S2", "pass"),
    ("S4", "pass"),
    ("S5", "pass"),
];

/// Paid checks of an honest endpoint.
pub(crate) const HONEST_PAID: [(&str, &str); 11] = [
    ("R4", "pass"),
    ("R5", "pass"),
    ("R6", "na"),
    ("R7", "pass"),
    ("C6", "pass"),
    ("H5", "pass"),
    ("H6", "pass"),
    ("H7", "pass"),
    ("H8", "pass"),
    ("H9", "na"),
    ("S3", "pass"),
];

/// The free checks that mean anything when a response arrived but no 402 could be read.
const NO_QUOTE: [(&str, &str); 6] = [
    ("R1", "pass"),
    ("R2", "pass"),
    ("R3", "pass"),
    ("C1", "fail"),
    ("S1", "pass"),
    ("S5", "pass"),
];

/// The checks that mean anything when the endpoint answers quickly, but not with a 402.
const ANSWERS_NOT_402: [(&str, &str); 5] = [
    ("R1", "pass"),
    ("R2", "fail"),
    ("R3", "pass"),
    ("C1", "fail"),
    ("S1", "pass"),
];

/// A 402 with more in it than a client should read: it answers quickly with a 402, and the
/// requirements neither parse as published (C1) nor are well-formed (C2).
const OVER_BUDGET: [(&str, &str); 5] = [
    ("R1", "pass"),
    ("R2", "pass"),
    ("C1", "fail"),
    ("C2", "fail"),
    ("S1", "pass"),
];

/// Free checks of an honest Solana endpoint: the operator file names EVM wallets only (H4 `na`
/// until it reads Solana addresses).
const HONEST_SOLANA_FREE: [(&str, &str); 14] = [
    ("R1", "pass"),
    ("R2", "pass"),
    ("R3", "pass"),
    ("C1", "pass"),
    ("C2", "pass"),
    ("C3", "pass"),
    ("C4", "na"),
    ("C5", "pass"),
    ("H1", "pass"),
    ("H4", "na"),
    ("S1", "pass"),
    ("S2", "pass"),
    ("S4", "pass"),
    ("S5", "pass"),
];

/// Paid checks of an endpoint that charges, then answers 500 without a receipt.
pub(crate) const CHARGED_WITHOUT_DELIVERY: [(&str, &str); 8] = [
    ("R4", "fail"),
    ("R7", "pass"),
    ("C6", "fail"),
    ("H5", "pass"),
    ("H6", "pass"),
    ("H7", "pass"),
    ("H8", "fail"),
    ("R6", "na"),
];

struct Builder(Scenario);

impl Builder {
    fn new(name: &'static str, summary: &'static str) -> Builder {
        let mut expect = BTreeMap::new();
        expect.extend(HONEST_FREE);
        expect.extend(HONEST_PAID);
        Builder(Scenario {
            name,
            summary,
            transport: Transport::Https(Lifetime::Good),
            protocol: Protocol::V2,
            quote: QuoteFault::None,
            text: TextFault::None,
            reliability: Reliability::Normal,
            paid: Paid::Honest,
            facilitator: FacilitatorKind::Honest,
            hostile: None,
            listing: Listing::AsQuoted,
            operator: Operator::ListsPayTo,
            declares_agent: false,
            reference: None,
            offers: crate::offers::Signing::None,
            expect,
            peer: PeerTraits::default(),
            findings: BTreeMap::new(),
        })
    }
    fn peer(mut self, p: PeerTraits) -> Self {
        self.0.peer = p;
        self
    }
    /// What the findings should conclude.
    fn findings(mut self, pairs: &[(&'static str, &'static str)]) -> Self {
        self.0.findings.extend(pairs.iter().copied());
        self
    }
    fn offers(mut self, o: crate::offers::Signing) -> Self {
        self.0.offers = o;
        self
    }
    fn transport(mut self, t: Transport) -> Self {
        self.0.transport = t;
        self
    }
    fn v1(mut self) -> Self {
        self.0.protocol = Protocol::V1;
        self
    }
    fn quote(mut self, q: QuoteFault) -> Self {
        self.0.quote = q;
        self
    }
    fn text(mut self, t: TextFault) -> Self {
        self.0.text = t;
        self
    }
    fn reliability(mut self, r: Reliability) -> Self {
        self.0.reliability = r;
        self
    }
    fn paid(mut self, p: Paid) -> Self {
        self.0.paid = p;
        self
    }
    fn facilitator(mut self, f: FacilitatorKind) -> Self {
        self.0.facilitator = f;
        self
    }
    fn hostile(mut self, h: Hostile) -> Self {
        self.0.hostile = Some(h);
        self
    }
    fn listing(mut self, l: Listing) -> Self {
        self.0.listing = l;
        self
    }
    fn operator(mut self, o: Operator) -> Self {
        self.0.operator = o;
        self
    }
    fn reference(mut self, r: crate::reference::LabReference) -> Self {
        self.0.reference = Some(r);
        self
    }
    fn declares_agent(mut self) -> Self {
        self.0.declares_agent = true;
        self
    }
    /// Override some expectations.
    fn expect(mut self, pairs: &[(&'static str, &'static str)]) -> Self {
        self.0.expect.extend(pairs.iter().copied());
        self
    }
    /// Replace all expectations.
    fn expect_only(mut self, pairs: &[(&'static str, &'static str)]) -> Self {
        self.0.expect = pairs.iter().copied().collect();
        self
    }
    /// Drop the paid expectations (the probe refuses to pay, or cannot).
    fn unpayable(mut self) -> Self {
        for (id, _) in HONEST_PAID {
            self.0.expect.remove(id);
        }
        self
    }
    /// Drop some expectations (the probe cannot see that far).
    fn forget(mut self, ids: &[&str]) -> Self {
        for id in ids {
            self.0.expect.remove(*id);
        }
        self
    }
    fn paid_expect(mut self, pairs: &[(&'static str, &'static str)]) -> Self {
        for (id, _) in HONEST_PAID {
            self.0.expect.remove(id);
        }
        self.0.expect.extend(pairs.iter().copied());
        self
    }
    /// A Solana endpoint: its quote, no operator file, free expectations of an honest one (the
    /// paid checks are not promised: the probe refuses or cannot pay a faulty quote).
    fn solana(mut self, q: SolanaQuote) -> Self {
        self.0.quote = QuoteFault::Solana(q);
        self.0.operator = Operator::Absent;
        self.0.expect = HONEST_SOLANA_FREE.into_iter().collect();
        self
    }
    /// A Solana endpoint quoting honestly, paid through the lab's Solana facilitator `f` (the
    /// honest one unless overridden): the paid expectations of an honest endpoint, until changed.
    fn solana_paid(self, f: FacilitatorKind) -> Self {
        let mut b = self.solana(SolanaQuote::Honest).facilitator(f);
        b.0.expect.extend(HONEST_PAID);
        b
    }
    fn build(self) -> Scenario {
        self.0
    }
}

/// Every scenario of the lab, in a stable order. Names are unique.
pub fn all() -> Vec<Scenario> {
    use Builder as B;
    let secs = |s: u64| QuoteFault::MaxTimeout(s);
    vec![
        // Honest baselines.
        B::new(
            "honest-v2",
            "x402 v2, valid bazaar extension, honest facilitator",
        )
        .declares_agent()
        .findings(&HONEST_FINDINGS)
        .build(),
        B::new("honest-v1", "x402 v1 body, X-PAYMENT, honest facilitator")
            .v1()
            .findings(&HONEST_FINDINGS)
            .build(),
        B::new(
            "control",
            "the prober's own known-answer endpoint (honest v2, fixed output)",
        )
        .build(),
        B::new(
            "header-body-agree",
            "v2 header and a body carrying the same PaymentRequired",
        )
        .quote(QuoteFault::HeaderAndBodyAgree)
        .expect(&[("C4", "pass")])
        .build(),
        // Conformance faults.
        B::new(
            "header-body-disagree",
            "v2 header and body carry different amounts",
        )
        .quote(QuoteFault::HeaderBodyDisagree)
        .expect(&[("C4", "fail")])
        .build(),
        B::new("bad-base64", "PAYMENT-REQUIRED is not base64")
            .quote(QuoteFault::BadBase64)
            .expect_only(&NO_QUOTE)
            .build(),
        B::new("bad-json", "PAYMENT-REQUIRED decodes to broken JSON")
            .quote(QuoteFault::BadJson)
            .expect_only(&NO_QUOTE)
            .build(),
        B::new("missing-accepts", "PaymentRequired without accepts")
            .quote(QuoteFault::MissingAccepts)
            .expect_only(&NO_QUOTE)
            .build(),
        B::new("amount-not-integer", "amount is \"0.01\"")
            .quote(QuoteFault::AmountNotInteger)
            .expect(&[("C2", "fail")])
            .unpayable()
            .build(),
        B::new("payto-lowercase", "payTo in lower case (not EIP-55)")
            .quote(QuoteFault::PayToLowercase)
            .expect(&[("C2", "fail")])
            .build(),
        B::new(
            "network-not-caip2",
            "network \"anvil\" instead of eip155:31337",
        )
        .quote(QuoteFault::NetworkNotCaip2)
        .expect(&[("C2", "fail")])
        .forget(&["C3"])
        .unpayable()
        .build(),
        B::new("timeout-5", "maxTimeoutSeconds 5: too short to settle")
            .quote(secs(5))
            .expect(&[("C2", "fail")])
            .paid_expect(&[("R4", "fail"), ("H7", "pass"), ("H8", "pass"), ("R6", "na")])
            .build(),
        B::new("timeout-9999", "maxTimeoutSeconds 9999")
            .quote(secs(9999))
            .expect(&[("C2", "fail")])
            .build(),
        B::new("unknown-scheme", "scheme \"stream\"")
            .quote(QuoteFault::UnknownScheme)
            .expect(&[("C2", "fail")])
            .unpayable()
            .build(),
        B::new(
            "fake-asset",
            "asset is a token whose EIP-712 domain is not the declared one",
        )
        .quote(QuoteFault::FakeAsset)
        .expect(&[("C3", "fail")])
        .unpayable()
        .build(),
        B::new(
            "invalid-bazaar-schema",
            "bazaar extension whose schema is not JSON Schema",
        )
        .quote(QuoteFault::InvalidBazaarSchema)
        .expect(&[("C5", "fail")])
        .build(),
        B::new("permit2-only", "offers only the Permit2 transfer method")
            .quote(QuoteFault::Permit2Only)
            .unpayable()
            .build(),
        B::new("expensive", "25 USDC per call")
            .quote(QuoteFault::Expensive)
            .unpayable()
            .build(),
        B::new(
            "off-allowlist-network",
            "Base mainnet USDC: not on the lab allowlist",
        )
        .quote(QuoteFault::OffAllowlistNetwork)
        .forget(&["C3"])
        .unpayable()
        .build(),
        // x402's `upto` scheme (a maximum, the charge settled later up to it): on EVM only through
        // Permit2, which the probe does not sign; held to the caps on its maximum, then refused.
        B::new(
            "upto-within-caps",
            "scheme upto, a maximum of the honest price (Permit2 on EVM)",
        )
        .quote(QuoteFault::Upto)
        .unpayable()
        .build(),
        B::new("upto-over-cap", "scheme upto, a maximum of 25 USDC")
            .quote(QuoteFault::UptoExpensive)
            .unpayable()
            .build(),
        B::new("price-rises", "the price triples after the first 402")
            .quote(QuoteFault::PriceRisesAfterFirst)
            .forget(&["H1"])
            .unpayable()
            .build(),
        // Solana (the lab's SVM, as devnet).
        B::new(
            "solana-honest-v2",
            "x402 v2 on Solana: devnet USDC, an open payout account, the fee payer",
        )
        .solana_paid(FacilitatorKind::Honest)
        .build(),
        B::new(
            "solana-honest-v1",
            "x402 v1 body on Solana, network solana-devnet",
        )
        .v1()
        .solana_paid(FacilitatorKind::Honest)
        .build(),
        // Paid on Solana: what the facilitator lands is read from the chain's token balances.
        B::new(
            "solana-overcharge",
            "the Solana facilitator lands three times the signed amount",
        )
        .solana_paid(FacilitatorKind::Overcharge)
        .expect(&[("H5", "fail")])
        .build(),
        B::new(
            "solana-wrong-payee",
            "the Solana facilitator lands the transfer to another token account",
        )
        .solana_paid(FacilitatorKind::WrongPayee)
        .expect(&[("H6", "fail")])
        .build(),
        B::new(
            "solana-double-pull",
            "the Solana facilitator lands the transfer a second time",
        )
        .solana_paid(FacilitatorKind::DoublePull)
        .expect(&[("H7", "fail")])
        .build(),
        B::new(
            "solana-fake-signature",
            "the Solana facilitator claims success with a signature that never landed",
        )
        .solana_paid(FacilitatorKind::FakeHash)
        .expect(&[("C6", "fail"), ("H5", "na"), ("H6", "na"), ("H7", "na")])
        .build(),
        B::new(
            "solana-charge-without-delivery",
            "settles on Solana, then answers 500",
        )
        .solana_paid(FacilitatorKind::Honest)
        .paid(Paid::SettleThen500)
        .paid_expect(&CHARGED_WITHOUT_DELIVERY)
        .build(),
        B::new(
            "solana-wrong-mint",
            "a Solana mint of 6 decimals that is not USDC",
        )
        .solana(SolanaQuote::WrongMint)
        .expect(&[("C3", "fail")])
        .build(),
        B::new(
            "solana-missing-ata",
            "the payee has no USDC token account: nobody can pay it",
        )
        .solana(SolanaQuote::MissingAccount)
        .expect(&[("C3", "fail")])
        .build(),
        B::new(
            "solana-frozen-ata",
            "the payee's USDC token account is frozen",
        )
        .solana(SolanaQuote::FrozenAccount)
        .expect(&[("C3", "fail")])
        .build(),
        B::new("solana-bad-base58", "payTo is not base58")
            .solana(SolanaQuote::BadBase58)
            .expect(&[("C2", "fail")])
            .forget(&["C3"])
            .build(),
        B::new(
            "solana-fee-payer-missing",
            "no extra.feePayer: a client cannot build the transaction",
        )
        .solana(SolanaQuote::FeePayerMissing)
        .expect(&[("C2", "fail")])
        .build(),
        B::new(
            "solana-memo-too-long",
            "extra.memo of 300 bytes (at most 256)",
        )
        .solana(SolanaQuote::MemoTooLong)
        .expect(&[("C2", "fail")])
        .build(),
        // Text.
        B::new(
            "injection-description",
            "description carries a prompt injection",
        )
        .text(TextFault::Injection)
        .expect(&[("S2", "fail")])
        .build(),
        B::new(
            "secret-ask",
            "docs ask for the wallet's seed phrase in a header",
        )
        .text(TextFault::SecretAsk)
        .expect(&[("S4", "fail")])
        .forget(&["S2"])
        .build(),
        B::new(
            "hidden-unicode",
            "description hides text with zero-width and bidi characters",
        )
        .text(TextFault::HiddenUnicode)
        .expect(&[("S2", "fail")])
        .build(),
        B::new(
            "content-type-lies",
            "declares application/json, sends HTML with a script",
        )
        .reliability(Reliability::ContentTypeLies)
        .expect(&[("S5", "fail")])
        .build(),
        // Transport.
        B::new("plain-http", "HTTP only")
            .transport(Transport::Http)
            .expect(&[("S1", "fail")])
            .build(),
        B::new("cert-expiring", "certificate expires in 5 days")
            .transport(Transport::Https(Lifetime::ExpiresInDays(5)))
            .expect(&[("S1", "fail")])
            .build(),
        B::new("cert-expired", "certificate expired yesterday")
            .transport(Transport::Https(Lifetime::Expired))
            .expect_only(&[
                ("R1", "fail"),
                ("R2", "fail"),
                ("R3", "fail"),
                ("S1", "fail"),
            ])
            .build(),
        B::new("redirect-off-host", "302 to another host")
            .reliability(Reliability::RedirectOffHost)
            .expect_only(&ANSWERS_NOT_402)
            .expect(&[("S1", "fail")])
            .build(),
        B::new("redirect-loop", "302 to itself, forever")
            .reliability(Reliability::RedirectLoop)
            .expect_only(&ANSWERS_NOT_402)
            .build(),
        B::new(
            "redirect-same-host",
            "307 to another path on the same host, which answers 402",
        )
        .reliability(Reliability::RedirectSameHost)
        .build(),
        // Reliability.
        B::new("slow", "waits 4 s before answering")
            .reliability(Reliability::SlowTtfb(4000))
            .expect(&[("R3", "fail")])
            .build(),
        B::new("flaky", "answers 503 to half of the requests")
            .reliability(Reliability::Flaky(0.5))
            .expect_only(&[("R1", "pass"), ("S1", "pass")])
            .build(),
        B::new("down", "nothing listens")
            .reliability(Reliability::Down)
            .expect_only(&[("R1", "fail"), ("R2", "fail"), ("R3", "fail")])
            .build(),
        B::new("status-500", "answers 500")
            .reliability(Reliability::Status500)
            .expect_only(&ANSWERS_NOT_402)
            .build(),
        B::new("free-200", "answers 200 with the content without payment")
            .reliability(Reliability::Free200)
            .expect_only(&ANSWERS_NOT_402)
            .expect(&[("S5", "pass")])
            .build(),
        // Paid behaviour.
        B::new("charge-without-delivery", "settles, then answers 500")
            .paid(Paid::SettleThen500)
            .paid_expect(&CHARGED_WITHOUT_DELIVERY)
            .build(),
        B::new("empty-output", "settles and answers 200 with an empty body")
            .paid(Paid::EmptyOutput)
            .expect(&[("R5", "fail"), ("H8", "fail")])
            .forget(&["S3"])
            .build(),
        B::new(
            "invalid-output",
            "settles and answers JSON that does not match the declared output",
        )
        .paid(Paid::InvalidOutput)
        .expect(&[("R5", "fail"), ("H8", "fail")])
        .build(),
        B::new(
            "fake-payment-response",
            "PAYMENT-RESPONSE names a transaction that does not exist",
        )
        .paid(Paid::FakePaymentResponse)
        .expect(&[("C6", "fail")])
        .build(),
        B::new(
            "no-settlement",
            "delivers without settling and without a receipt",
        )
        .paid(Paid::NoSettlement)
        .expect(&[("C6", "fail")])
        .forget(&["H5", "H6"])
        .build(),
        B::new(
            "facilitator-fake-hash",
            "the facilitator claims success with a made-up transaction",
        )
        .facilitator(FacilitatorKind::FakeHash)
        .expect(&[("C6", "fail")])
        .forget(&["H5", "H6"])
        .build(),
        B::new(
            "double-pull",
            "the facilitator pulls the amount a second time",
        )
        .facilitator(FacilitatorKind::DoublePull)
        .expect(&[("H7", "fail")])
        .findings(&[("known_facilitator", "fail")])
        .build(),
        B::new("overcharge", "the facilitator pulls three times the quote")
            .facilitator(FacilitatorKind::Overcharge)
            .expect(&[("H5", "fail")])
            .findings(&[("known_facilitator", "fail")])
            .build(),
        B::new("wrong-payee", "the facilitator pays another address")
            .facilitator(FacilitatorKind::WrongPayee)
            .expect(&[("H6", "fail")])
            .findings(&[("known_facilitator", "fail")])
            .build(),
        B::new(
            "refund-kept",
            "declares a refund rule; charges without delivery; refunds in time",
        )
        .paid(Paid::RefundKept)
        .paid_expect(&CHARGED_WITHOUT_DELIVERY)
        .expect(&[("H9", "pass")])
        .build(),
        B::new(
            "refund-broken",
            "declares a refund rule; charges without delivery; never refunds",
        )
        .paid(Paid::RefundBroken)
        .paid_expect(&CHARGED_WITHOUT_DELIVERY)
        .expect(&[("H9", "fail")])
        .build(),
        // Listing and operator.
        B::new(
            "price-mismatch",
            "the catalogue lists half the quoted price",
        )
        .listing(Listing::DifferentPrice)
        .expect(&[("H1", "fail")])
        .build(),
        B::new("unlisted", "not in the catalogue")
            .listing(Listing::Unlisted)
            .expect(&[("H1", "na")])
            .build(),
        B::new(
            "operator-mismatch",
            "the operator file lists another wallet",
        )
        .operator(Operator::ListsOther)
        .expect(&[("H4", "fail")])
        .build(),
        B::new("no-operator-file", "no operator file")
            .operator(Operator::Absent)
            .expect(&[("H4", "na")])
            .build(),
        B::new(
            "operator-file-malformed",
            "the operator file is not valid JSON",
        )
        .operator(Operator::Malformed)
        .expect(&[("H4", "fail")])
        .build(),
        // Hostile.
        B::new("huge-body", "a 402 with a 64 MiB body")
            .hostile(Hostile::HugeBody)
            .expect_only(&[("R1", "pass"), ("R2", "pass"), ("C1", "pass")])
            .build(),
        B::new("huge-header", "a response head with 1 MiB of headers")
            .hostile(Hostile::HugeHeader)
            .expect_only(&[("R1", "fail")])
            .build(),
        B::new("slowloris", "sends the response head one byte per second")
            .hostile(Hostile::Slowloris)
            .expect_only(&[("R1", "fail")])
            .build(),
        B::new(
            "gzip-bomb",
            "a 402 whose unasked-for gzip body inflates to 1 GiB",
        )
        .hostile(Hostile::GzipBomb)
        .expect_only(&[
            ("R1", "pass"),
            ("R2", "pass"),
            ("C1", "pass"),
            ("S5", "fail"),
        ])
        .build(),
        B::new("endless-chunked", "a 402 whose chunked body never ends")
            .hostile(Hostile::EndlessChunked)
            .expect_only(&[("R1", "pass"), ("R2", "pass"), ("C1", "pass")])
            .build(),
        // Hostile x402: responses within the read caps that cost too much to evaluate naively.
        B::new(
            "accepts-flood-body",
            "a 1 MiB body with about 350,000 empty accepts entries",
        )
        .hostile(Hostile::AcceptsFloodBody)
        .expect_only(&OVER_BUDGET)
        .build(),
        B::new(
            "accepts-flood-header",
            "a PAYMENT-REQUIRED header with 10,000 empty accepts entries",
        )
        .hostile(Hostile::AcceptsFloodHeader)
        .expect_only(&OVER_BUDGET)
        .build(),
        B::new(
            "deep-nesting",
            "an honest header whose extensions nest arrays 100 deep",
        )
        .hostile(Hostile::DeepNesting)
        .expect_only(&NO_QUOTE)
        .build(),
        B::new(
            "deviation-flood",
            "a 1 MiB body of entries whose every field has the wrong type",
        )
        .hostile(Hostile::DeviationFlood)
        .expect_only(&OVER_BUDGET)
        .build(),
        B::new(
            "dup-header-disagree",
            "two PAYMENT-REQUIRED headers with different payees and prices",
        )
        .hostile(Hostile::DuplicateHeadersDisagree)
        .expect_only(&NO_QUOTE)
        .build(),
        B::new(
            "dup-header-agree",
            "the honest PAYMENT-REQUIRED header, sent twice",
        )
        .hostile(Hostile::DuplicateHeadersAgree)
        .build(),
        B::new(
            "dup-header-case",
            "Payment-Required and PAYMENT-REQUIRED with different payees",
        )
        .hostile(Hostile::DuplicateHeadersCase)
        .expect_only(&[
            ("R1", "pass"),
            ("R2", "pass"),
            ("C1", "fail"),
            ("S1", "pass"),
        ])
        .build(),
        B::new(
            "dup-content-type",
            "two Content-Type headers: application/json and text/html",
        )
        .hostile(Hostile::DuplicateContentType)
        .expect_only(&[
            ("R1", "pass"),
            ("R2", "pass"),
            ("C1", "pass"),
            ("S1", "pass"),
            ("S5", "fail"),
        ])
        .build(),
        B::new(
            "schema-bomb",
            "an honest quote whose bazaar schema takes 2^40 steps to validate naively",
        )
        .hostile(Hostile::SchemaBomb)
        .expect_only(&[
            ("R1", "pass"),
            ("R2", "pass"),
            ("C1", "pass"),
            ("C2", "pass"),
            ("C5", "fail"),
            ("S1", "pass"),
        ])
        .build(),
        // x402's `settlement_pending` (a non-terminal settle outcome): the probe sends the same
        // payment again until the outcome is final or its wait ends, never a new one.
        B::new(
            "settlement-pending",
            "answers settlement_pending first; the same payment sent again gets the output",
        )
        .paid(Paid::SettlementPending)
        .build(),
        B::new(
            "pending-forever",
            "settles, then answers settlement_pending to every sending of the payment",
        )
        .paid(Paid::PendingForever)
        .paid_expect(&CHARGED_WITHOUT_DELIVERY)
        // The receipt says pending and names the transaction that took the payment: true.
        .expect(&[("C6", "pass")])
        .build(),
        B::new(
            "pending-then-402",
            "settles, answers settlement_pending, then a fresh 402 asking to pay again",
        )
        .paid(Paid::PendingThen402)
        .paid_expect(&CHARGED_WITHOUT_DELIVERY)
        .build(),
        // x402's `payment-identifier` (idempotency): the probe's payment carries an id, and its
        // replay (H7) is the retry with the same id and the very same signed payment.
        B::new(
            "payment-id-honest",
            "requires a payment-identifier id and answers a retry with the same id from its cache",
        )
        .paid(Paid::Idempotent)
        .build(),
        B::new(
            "payment-id-double-charge",
            "requires a payment-identifier id, and charges a retry with the same id again",
        )
        .paid(Paid::IdempotencyDoubleCharge)
        .expect(&[("H7", "fail")])
        .build(),
        // Signed offers and receipts (`offer-receipt`): verified, the signer kept as evidence
        // (H3's continuity); a bad or unmatched offer fails C2, a receipt that lies fails C6.
        B::new(
            "signed-offer-eip712",
            "an EIP-712 signed offer for its entry and an EIP-712 signed receipt",
        )
        .offers(crate::offers::Signing::Eip712)
        .build(),
        B::new(
            "signed-offer-jws",
            "a JWS (ES256K, did:pkh) signed offer and receipt",
        )
        .offers(crate::offers::Signing::Jws)
        .build(),
        B::new(
            "signed-offer-bad-signature",
            "a JWS offer whose signature does not verify",
        )
        .offers(crate::offers::Signing::BadSignature)
        .expect(&[("C2", "fail")])
        .build(),
        B::new(
            "signed-offer-unmatched",
            "a well-signed offer committing to half the quoted amount",
        )
        .offers(crate::offers::Signing::Unmatched)
        .expect(&[("C2", "fail")])
        .build(),
        B::new(
            "signed-receipt-lies",
            "an honest signed offer; the signed receipt names another transaction",
        )
        .offers(crate::offers::Signing::ReceiptLies)
        .expect(&[("C6", "fail")])
        .build(),
        // Batch or credit-backed settlement: a commitment id instead of a transaction hash. The
        // chain checks are unmeasured (value moves later), never failed, unless money moved.
        B::new(
            "batch-commitment",
            "answers the output with a commitment id; nothing moves during the call",
        )
        .paid(Paid::BatchCommitment)
        .forget(&["C6", "H5", "H6", "H7"])
        .build(),
        B::new(
            "batch-commitment-double-pull",
            "answers a commitment id, and its facilitator pulls the amount twice at once",
        )
        .paid(Paid::BatchCommitmentSettled)
        .facilitator(FacilitatorKind::DoublePull)
        .forget(&["C6"])
        .expect(&[("H7", "fail")])
        .build(),
        // R6 against a reference (`reference.rs`): honest endpoints pass, dishonest ones fail.
        B::new(
            "npm-honest",
            "an npm package endpoint answering the registry's latest version document",
        )
        .reference(LabReference::NpmHonest)
        .expect(&[("R6", "pass")])
        .build(),
        B::new(
            "npm-stale-version",
            "an npm package endpoint answering the version before the registry's latest",
        )
        .reference(LabReference::NpmStale)
        .expect(&[("R6", "fail")])
        .build(),
        B::new(
            "supply-honest",
            "a token supply endpoint answering the lab token's totalSupply from the chain",
        )
        .reference(LabReference::SupplyHonest)
        .expect(&[("R6", "pass")])
        .build(),
        B::new(
            "supply-doubled",
            "a token supply endpoint answering twice the lab token's totalSupply",
        )
        .reference(LabReference::SupplyDoubled)
        .expect(&[("R6", "fail")])
        .build(),
        // The findings peers publish (`probes/findings/`), honest and not.
        B::new(
            "openapi-described",
            "no bazaar extension in the 402, an OpenAPI document at /openapi.json",
        )
        .peer(PeerTraits {
            undescribed_402: true,
            openapi: true,
            ..PeerTraits::default()
        })
        .expect(&[("C5", "fail")])
        .forget(&["R5"])
        .findings(&[("described", "pass"), ("resource_url", "pass")])
        .build(),
        B::new(
            "undescribed",
            "no bazaar extension in the 402 and no OpenAPI document anywhere",
        )
        .peer(PeerTraits {
            undescribed_402: true,
            ..PeerTraits::default()
        })
        .expect(&[("C5", "fail")])
        .forget(&["R5"])
        .findings(&[("described", "fail")])
        .build(),
        B::new(
            "html-paywall",
            "answers a browser's request with an HTML paywall page (402), agents with the JSON 402",
        )
        .peer(PeerTraits {
            html_paywall: true,
            ..PeerTraits::default()
        })
        .findings(&[
            ("browser_paywall", "pass"),
            ("described", "pass"),
            ("known_facilitator", "pass"),
        ])
        .build(),
        B::new(
            "resource-elsewhere",
            "the 402's resource.url names an endpoint on another host",
        )
        .peer(PeerTraits {
            resource_elsewhere: true,
            ..PeerTraits::default()
        })
        .findings(&[("resource_url", "fail"), ("described", "pass")])
        .build(),
        B::new(
            "pay-then-401",
            "settles, then answers 401 Unauthorized and no output (a honeypot)",
        )
        .peer(PeerTraits {
            refuse_after_pay: Some(401),
            ..PeerTraits::default()
        })
        .paid_expect(&CHARGED_WITHOUT_DELIVERY)
        .findings(&[("pay_then_refused", "fail"), ("known_facilitator", "pass")])
        .build(),
        B::new(
            "pay-then-403",
            "settles, then answers 403 Forbidden and no output (a honeypot)",
        )
        .peer(PeerTraits {
            refuse_after_pay: Some(403),
            ..PeerTraits::default()
        })
        .paid_expect(&CHARGED_WITHOUT_DELIVERY)
        .findings(&[("pay_then_refused", "fail")])
        .build(),
    ]
}

/// The findings of an honest endpoint, paid through the honest facilitator (the lab's list of
/// known facilitators names its sender).
const HONEST_FINDINGS: [(&str, &str); 5] = [
    ("described", "pass"),
    ("resource_url", "pass"),
    ("browser_paywall", "fail"),
    ("known_facilitator", "pass"),
    ("pay_then_refused", "pass"),
];

/// The agent-readiness (seed 000) a free run of a scenario should reach, worked out by hand from
/// `rubrics/agent-readiness.json` and the mapping in `rubrics/README.md` ("Agent readiness"): the
/// score's range and the band. A free run makes no paid call, so completion is unmeasured and the
/// band `unverified` (or `hostile` on a critical finding); docs and both bonuses are unmeasured
/// (0..10 and 0..5 each), so `high` is at least `low + 40` held at 100.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadinessExpect {
    pub low: u32,
    pub high: u32,
    pub band: &'static str,
}

/// Free-run readiness by scenario, for the scenarios that stand for a kind of subject.
pub const READINESS_FREE: [(&str, ReadinessExpect); 10] = {
    const fn r(low: u32, high: u32, band: &'static str) -> ReadinessExpect {
        ReadinessExpect { low, high, band }
    }
    [
        // access 25 + payment 25 + interface 18 = 68; + completion 20, docs 10, bonuses 10: 108,
        // held at 100.
        ("honest-v2", r(68, 100, "unverified")),
        ("honest-v1", r(68, 100, "unverified")),
        // No valid discovery schema: interface unmeasured (0..20): 50..110, held at 100.
        ("invalid-bazaar-schema", r(50, 100, "unverified")),
        // Critical: prompt injection in the description; a seed-phrase ask (key-request).
        ("injection-description", r(0, 0, "hostile")),
        ("secret-ask", r(0, 0, "hostile")),
        // tls is severe, -40: 68..100 becomes 28..60.
        ("plain-http", r(28, 60, "unverified")),
        ("cert-expiring", r(28, 60, "unverified")),
        // pricing is moderate, -15: 53..85.
        ("price-mismatch", r(53, 85, "unverified")),
        // No parsable 402: nothing decided, 0..100 (held).
        ("bad-base64", r(0, 100, "unverified")),
        ("down", r(0, 100, "unverified")),
    ]
};

/// One scenario by name.
pub fn by_name(name: &str) -> Option<Scenario> {
    all().into_iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_expectations_are_valid() {
        let all = all();
        let mut names: Vec<_> = all.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len(), "duplicate scenario names");
        for s in &all {
            for (id, want) in &s.expect {
                assert!(
                    ["pass", "fail", "na"].contains(want),
                    "{}: {id} => {want}",
                    s.name
                );
                assert!(id.len() == 2, "{}: odd check id {id}", s.name);
            }
        }
    }
}

/// What a free probe of a lab MCP server should report (`probe mcp+URL --json`), written by
/// hand from each server's intent (`crate::mcp::McpKind`).
#[derive(Debug, Clone)]
pub struct McpScenario {
    pub name: &'static str,
    pub kind: crate::mcp::McpKind,
    pub summary: &'static str,
    /// The form the server answers `tools/list` in (`stateless`, `session`), `None` when none.
    pub form: Option<&'static str>,
    /// The paid tools' subjects' tool names, in report order.
    pub paid_tools: &'static [&'static str],
    /// The first paid tool's checks (id -> outcome); the rest are no promise.
    pub expect: BTreeMap<&'static str, &'static str>,
    /// When no tool can be probed: the deviation code the failure names.
    pub failure_code: Option<&'static str>,
    /// The probe's exit code.
    pub exit_code: i32,
}

/// Every lab MCP server's scenario. Over MCP on the lab's plain HTTP, S1 fails ("plain HTTP");
/// the paid tool quotes as `honest-v2` does, so the quote's own checks pass where the
/// transport is honest.
pub fn mcp_scenarios() -> Vec<McpScenario> {
    use crate::mcp::McpKind as K;
    let honest = [
        ("R1", "pass"),
        ("R2", "pass"),
        ("C1", "pass"),
        ("C2", "pass"),
        ("C3", "pass"),
        ("C4", "pass"),
        ("H4", "na"),
        ("S1", "fail"),
        ("S2", "pass"),
        ("S4", "pass"),
    ];
    let with = |over: &[(&'static str, &'static str)]| -> BTreeMap<&'static str, &'static str> {
        let mut map: BTreeMap<_, _> = honest.iter().copied().collect();
        map.extend(over.iter().copied());
        map
    };
    let paid = |name, kind, summary, form, expect| McpScenario {
        name,
        kind,
        summary,
        form: Some(form),
        paid_tools: &["get_weather"],
        expect,
        failure_code: None,
        exit_code: 1,
    };
    let failing = |name, kind, summary, form, code| McpScenario {
        name,
        kind,
        summary,
        form,
        paid_tools: &[],
        expect: BTreeMap::new(),
        failure_code: code,
        exit_code: 1,
    };
    vec![
        paid(
            "mcp-honest",
            K::Honest,
            "stateless form, JSON answers, PaymentRequired in structuredContent and content[0].text",
            "stateless",
            with(&[]),
        ),
        paid(
            "mcp-honest-session",
            K::HonestSession,
            "initialize handshake and Mcp-Session-Id only, event-stream answers",
            "session",
            with(&[]),
        ),
        paid(
            "mcp-draft-error",
            K::DraftError,
            "the draft form: JSON-RPC error -32402 with data.payment[]",
            "stateless",
            with(&[("C4", "na")]),
        ),
        paid(
            "mcp-text-differs",
            K::TextDiffers,
            "content[0].text quotes another amount than structuredContent",
            "stateless",
            with(&[("C4", "fail")]),
        ),
        paid(
            "mcp-no-structured-content",
            K::NoStructuredContent,
            "the PaymentRequired only as text",
            "stateless",
            with(&[("C1", "fail"), ("C4", "na")]),
        ),
        paid(
            "mcp-not-marked-error",
            K::NotMarkedError,
            "the PaymentRequired in a result without isError: true",
            "stateless",
            with(&[("C1", "fail")]),
        ),
        failing(
            "mcp-unpaid",
            K::Unpaid,
            "the paid-looking tool answers without asking for payment",
            Some("stateless"),
            None,
        ),
        paid(
            "mcp-session-churn",
            K::SessionChurn,
            "a new Mcp-Session-Id on every answer (noted; the first is kept)",
            "session",
            with(&[]),
        ),
        McpScenario {
            name: "mcp-huge-tool-list",
            kind: K::HugeToolList,
            summary: "5,003 tools: the first 1,000 read, 3 called",
            form: Some("stateless"),
            paid_tools: &["get_weather", "lookup_0", "lookup_1"],
            expect: with(&[]),
            failure_code: None,
            exit_code: 1,
        },
        failing(
            "mcp-endless-stream",
            K::EndlessStream,
            "every answer an event stream that never ends and never answers",
            None,
            Some("mcp.answer.too_large"),
        ),
        failing(
            "mcp-deep-schema",
            K::DeepSchema,
            "an input schema nested 10,000 deep",
            None,
            Some("mcp.answer.too_deep"),
        ),
        McpScenario {
            name: "mcp-huge-result",
            kind: K::HugeResult,
            summary: "tools/call answers a 100 MB result",
            form: Some("stateless"),
            paid_tools: &[],
            expect: BTreeMap::new(),
            failure_code: None,
            exit_code: 1,
        },
    ]
}
