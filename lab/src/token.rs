//! The lab's EIP-3009 token (`contracts/LabUSDC.sol`): deploy it from the committed fixture, drive it,
//! sign and recover EIP-3009 authorizations, and decode its logs.
//!
//! The fixture (`fixtures/LabUSDC.json`) is built by `scripts/build-token.mjs`; tests never run the
//! compiler. A "fake USDC" is the same bytecode deployed with an EIP-712 name or version other than the
//! one a 402 declares: pass them to [`Token::deploy`].

use std::borrow::Cow;

use alloy::primitives::{Address, B256, Bytes, Signature, TxHash, U256};
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol;
use alloy::sol_types::{Eip712Domain, SolCall, SolEvent, SolStruct, SolValue};
use serde::Deserialize;

use crate::rpc::{CallRequest, Log, Rpc, RpcError, TxReceipt};

/// The compiled token, as committed.
const FIXTURE_JSON: &str = include_str!("../fixtures/LabUSDC.json");

/// The token's Solidity source, as committed (what the fixture's `sourceSha256` must match).
pub const TOKEN_SOURCE: &str = include_str!("../contracts/LabUSDC.sol");

/// USDC's EIP-712 domain name and version on Base: what an honest lab 402 would declare.
pub const USDC_NAME: &str = "USD Coin";
pub const USDC_VERSION: &str = "2";

/// The token has 6 decimals: 1 USDC is 1_000_000 units.
pub const DECIMALS: u8 = 6;

sol! {
    /// The EIP-712 message a payer signs for `transferWithAuthorization`.
    #[derive(Debug, PartialEq, Eq)]
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }

    /// The EIP-712 message a payer signs for `receiveWithAuthorization`.
    #[derive(Debug, PartialEq, Eq)]
    struct ReceiveWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }

    /// The EIP-712 message an authorizer signs for `cancelAuthorization`.
    #[derive(Debug, PartialEq, Eq)]
    struct CancelAuthorization {
        address authorizer;
        bytes32 nonce;
    }

    /// The part of LabUSDC's interface the lab calls.
    interface LabUsdc {
        event Transfer(address indexed from, address indexed to, uint256 value);
        event Approval(address indexed owner, address indexed spender, uint256 value);
        event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
        event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);

        function name() external view returns (string);
        function version() external view returns (string);
        function decimals() external view returns (uint8);
        function owner() external view returns (address);
        function totalSupply() external view returns (uint256);
        function balanceOf(address account) external view returns (uint256);
        function allowance(address holder, address spender) external view returns (uint256);
        function DOMAIN_SEPARATOR() external view returns (bytes32);
        function eip712Domain() external view returns (
            bytes1 fields, string name, string version, uint256 chainId, address verifyingContract,
            bytes32 salt, uint256[] extensions
        );
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);

        function mint(address to, uint256 value) external;
        function transfer(address to, uint256 value) external returns (bool);
        function approve(address spender, uint256 value) external returns (bool);
        function transferFrom(address from, address to, uint256 value) external returns (bool);

        function transferWithAuthorization(
            address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce,
            uint8 v, bytes32 r, bytes32 s
        ) external;
        function transferWithAuthorization(
            address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce,
            bytes signature
        ) external;
        function receiveWithAuthorization(
            address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce,
            uint8 v, bytes32 r, bytes32 s
        ) external;
        function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s) external;
    }
}

/// topic0 of `Transfer(address,address,uint256)`.
pub const TRANSFER_TOPIC: B256 = LabUsdc::Transfer::SIGNATURE_HASH;
/// topic0 of `AuthorizationUsed(address,bytes32)`.
pub const AUTHORIZATION_USED_TOPIC: B256 = LabUsdc::AuthorizationUsed::SIGNATURE_HASH;
/// topic0 of `AuthorizationCanceled(address,bytes32)`.
pub const AUTHORIZATION_CANCELED_TOPIC: B256 = LabUsdc::AuthorizationCanceled::SIGNATURE_HASH;

/// What went wrong with the token. Each variant says which action failed.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{action}: {source}")]
    Rpc {
        action: &'static str,
        #[source]
        source: RpcError,
    },
    #[error("{action}: transaction {tx_hash} was mined but reverted")]
    Reverted {
        action: &'static str,
        tx_hash: TxHash,
    },
    #[error("{action}: the token's answer could not be decoded: {detail}")]
    Decode {
        action: &'static str,
        detail: String,
    },
    #[error("the committed token fixture is unusable: {0}")]
    Fixture(String),
    #[error("deploy: the receipt of {tx_hash} names no contract address")]
    NoContractAddress { tx_hash: TxHash },
    #[error("signing the authorization failed: {0}")]
    Sign(#[source] alloy::signers::Error),
    #[error("recovering the signer of the authorization failed: {0}")]
    Recover(#[source] alloy::primitives::SignatureError),
}

impl TokenError {
    /// The revert reason when the token refused the call, e.g. `authorization is used or canceled`.
    /// `None` for other errors, and for a transaction that was mined and reverted (a receipt carries no
    /// reason; see [`TokenError::Reverted`]).
    pub fn revert_reason(&self) -> Option<&str> {
        match self {
            TokenError::Rpc { source, .. } => source.revert_reason(),
            _ => None,
        }
    }
}

/// An EIP-712 domain of an EIP-3009 token: what a 402's `extra.name`/`extra.version`, its network's
/// chain id and its `asset` say, or what a deployed token really has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    pub name: String,
    pub version: String,
    pub chain_id: u64,
    pub verifying_contract: Address,
}

impl Domain {
    pub fn new(name: &str, version: &str, chain_id: u64, verifying_contract: Address) -> Domain {
        Domain {
            name: name.to_owned(),
            version: version.to_owned(),
            chain_id,
            verifying_contract,
        }
    }

    /// The domain in alloy's form, for signing.
    pub fn eip712(&self) -> Eip712Domain {
        Eip712Domain::new(
            Some(Cow::Owned(self.name.clone())),
            Some(Cow::Owned(self.version.clone())),
            Some(U256::from(self.chain_id)),
            Some(self.verifying_contract),
            None,
        )
    }

    /// The domain separator, as the token's `DOMAIN_SEPARATOR()` returns it.
    pub fn separator(&self) -> B256 {
        self.eip712().separator()
    }
}

/// An EIP-3009 authorization: `from` lets anyone move `value` to `to`, once (per `nonce`), strictly
/// after `valid_after` and strictly before `valid_before` (unix seconds, compared with the block time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authorization {
    pub from: Address,
    pub to: Address,
    pub value: U256,
    pub valid_after: U256,
    pub valid_before: U256,
    pub nonce: B256,
}

impl Authorization {
    /// An authorization with a fresh random nonce, valid in (`valid_after`, `valid_before`).
    pub fn new(
        from: Address,
        to: Address,
        value: U256,
        valid_after: u64,
        valid_before: u64,
    ) -> Authorization {
        Authorization {
            from,
            to,
            value,
            valid_after: U256::from(valid_after),
            valid_before: U256::from(valid_before),
            nonce: random_nonce(),
        }
    }

    fn transfer_message(&self) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: self.from,
            to: self.to,
            value: self.value,
            validAfter: self.valid_after,
            validBefore: self.valid_before,
            nonce: self.nonce,
        }
    }

    fn receive_message(&self) -> ReceiveWithAuthorization {
        ReceiveWithAuthorization {
            from: self.from,
            to: self.to,
            value: self.value,
            validAfter: self.valid_after,
            validBefore: self.valid_before,
            nonce: self.nonce,
        }
    }
}

/// 32 random bytes, as EIP-3009 nonces are.
pub fn random_nonce() -> B256 {
    B256::from(rand::random::<[u8; 32]>())
}

/// The EIP-712 struct hash of `TransferWithAuthorization` for `authorization`.
pub fn authorization_struct_hash(authorization: &Authorization) -> B256 {
    authorization.transfer_message().eip712_hash_struct()
}

/// The digest a payer signs for `transferWithAuthorization`: keccak256(0x1901 ‖ separator ‖ struct hash).
pub fn authorization_digest(domain: &Domain, authorization: &Authorization) -> B256 {
    authorization
        .transfer_message()
        .eip712_signing_hash(&domain.eip712())
}

/// Signs `authorization` for `transferWithAuthorization` under `domain`.
pub fn sign_authorization(
    signer: &PrivateKeySigner,
    domain: &Domain,
    authorization: &Authorization,
) -> Result<Signature, TokenError> {
    signer
        .sign_hash_sync(&authorization_digest(domain, authorization))
        .map_err(TokenError::Sign)
}

/// Signs `authorization` for `receiveWithAuthorization` (a different EIP-712 type than the transfer).
pub fn sign_receive_authorization(
    signer: &PrivateKeySigner,
    domain: &Domain,
    authorization: &Authorization,
) -> Result<Signature, TokenError> {
    let digest = authorization
        .receive_message()
        .eip712_signing_hash(&domain.eip712());
    signer.sign_hash_sync(&digest).map_err(TokenError::Sign)
}

/// Signs the cancellation of `authorizer`'s `nonce` under `domain`.
pub fn sign_cancel_authorization(
    signer: &PrivateKeySigner,
    domain: &Domain,
    authorizer: Address,
    nonce: B256,
) -> Result<Signature, TokenError> {
    let digest = CancelAuthorization { authorizer, nonce }.eip712_signing_hash(&domain.eip712());
    signer.sign_hash_sync(&digest).map_err(TokenError::Sign)
}

/// The address whose key made `signature` over `authorization` (for `transferWithAuthorization`) under
/// `domain`. A signature from the wrong domain recovers to some other address; compare with `from`.
pub fn recover_authorization_signer(
    domain: &Domain,
    authorization: &Authorization,
    signature: &Signature,
) -> Result<Address, TokenError> {
    signature
        .recover_address_from_prehash(&authorization_digest(domain, authorization))
        .map_err(TokenError::Recover)
}

/// The calldata of `transferWithAuthorization(..., v, r, s)` (selector 0xe3ee160e).
pub fn transfer_with_authorization_calldata(
    authorization: &Authorization,
    signature: &Signature,
) -> Bytes {
    let (v, r, s) = split_signature(signature);
    LabUsdc::transferWithAuthorization_0Call {
        from: authorization.from,
        to: authorization.to,
        value: authorization.value,
        validAfter: authorization.valid_after,
        validBefore: authorization.valid_before,
        nonce: authorization.nonce,
        v,
        r,
        s,
    }
    .abi_encode()
    .into()
}

/// The calldata of `transferWithAuthorization(..., bytes signature)` (selector 0xcf092995). The bytes go
/// through untouched, so a malformed signature reaches the token as sent.
pub fn transfer_with_authorization_bytes_calldata(
    authorization: &Authorization,
    signature: &[u8],
) -> Bytes {
    LabUsdc::transferWithAuthorization_1Call {
        from: authorization.from,
        to: authorization.to,
        value: authorization.value,
        validAfter: authorization.valid_after,
        validBefore: authorization.valid_before,
        nonce: authorization.nonce,
        signature: Bytes::copy_from_slice(signature),
    }
    .abi_encode()
    .into()
}

/// v (27 or 28), r, s as the token's (v, r, s) overloads take them.
fn split_signature(signature: &Signature) -> (u8, B256, B256) {
    let v = 27 + u8::from(signature.v());
    (v, signature.r().into(), signature.s().into())
}

/// A decoded `Transfer` log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferLog {
    /// The contract that emitted it: compare with the expected asset.
    pub token: Address,
    pub from: Address,
    pub to: Address,
    pub value: U256,
}

/// A decoded `AuthorizationUsed` or `AuthorizationCanceled` log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthorizationLog {
    pub token: Address,
    pub authorizer: Address,
    pub nonce: B256,
}

/// `log` as an ERC-20 `Transfer`, or `None` if it is another event or not shaped like one (an ERC-721
/// `Transfer` has the same topic0 but three indexed arguments).
pub fn decode_transfer(log: &Log) -> Option<TransferLog> {
    let [topic0, from, to] = log.topics.as_slice() else {
        return None;
    };
    if *topic0 != TRANSFER_TOPIC || log.data.len() != 32 {
        return None;
    }
    Some(TransferLog {
        token: log.address,
        from: address_from_topic(from)?,
        to: address_from_topic(to)?,
        value: U256::from_be_slice(&log.data),
    })
}

/// `log` as an `AuthorizationUsed`, or `None`.
pub fn decode_authorization_used(log: &Log) -> Option<AuthorizationLog> {
    decode_authorization_log(log, AUTHORIZATION_USED_TOPIC)
}

/// `log` as an `AuthorizationCanceled`, or `None`.
pub fn decode_authorization_canceled(log: &Log) -> Option<AuthorizationLog> {
    decode_authorization_log(log, AUTHORIZATION_CANCELED_TOPIC)
}

fn decode_authorization_log(log: &Log, topic: B256) -> Option<AuthorizationLog> {
    let [topic0, authorizer, nonce] = log.topics.as_slice() else {
        return None;
    };
    if *topic0 != topic || !log.data.is_empty() {
        return None;
    }
    Some(AuthorizationLog {
        token: log.address,
        authorizer: address_from_topic(authorizer)?,
        nonce: *nonce,
    })
}

/// An indexed address: 12 zero bytes, then the address. Anything else is not an address.
fn address_from_topic(topic: &B256) -> Option<Address> {
    let (padding, address) = topic.split_at(12);
    padding
        .iter()
        .all(|byte| *byte == 0)
        .then(|| Address::from_slice(address))
}

/// Every ERC-20 `Transfer` in `receipt`, from any contract, in log order.
pub fn transfers(receipt: &TxReceipt) -> Vec<TransferLog> {
    receipt.logs.iter().filter_map(decode_transfer).collect()
}

/// Every `AuthorizationUsed` in `receipt`, from any contract, in log order.
pub fn authorizations_used(receipt: &TxReceipt) -> Vec<AuthorizationLog> {
    receipt
        .logs
        .iter()
        .filter_map(decode_authorization_used)
        .collect()
}

/// The committed fixture: what `scripts/build-token.mjs` wrote.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenFixture {
    pub contract: String,
    pub source_sha256: String,
    pub solc_version: String,
    pub abi: serde_json::Value,
    /// Function signature → 4-byte selector in hex, as solc reports them.
    pub method_identifiers: std::collections::BTreeMap<String, String>,
    pub bytecode: Bytes,
    pub deployed_bytecode: Bytes,
}

/// Parses the committed fixture.
pub fn fixture() -> Result<TokenFixture, TokenError> {
    let fixture: TokenFixture = serde_json::from_str(FIXTURE_JSON)
        .map_err(|e| TokenError::Fixture(format!("not the expected JSON: {e}")))?;
    if fixture.bytecode.is_empty() {
        return Err(TokenError::Fixture("the bytecode is empty".to_owned()));
    }
    Ok(fixture)
}

/// A deployed LabUSDC. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Token {
    rpc: Rpc,
    address: Address,
    owner: Address,
    domain: Domain,
}

impl Token {
    /// Deploys the fixture's bytecode from `deployer` (an unlocked account, which becomes the owner who
    /// may mint) with EIP-712 `name` and `version`.
    pub async fn deploy(
        rpc: &Rpc,
        deployer: Address,
        name: &str,
        version: &str,
    ) -> Result<Token, TokenError> {
        const ACTION: &str = "deploy";
        let fixture = fixture()?;
        let mut code = fixture.bytecode.to_vec();
        code.extend((name.to_owned(), version.to_owned()).abi_encode_params());
        let tx_hash = rpc
            .send_transaction(&CallRequest::deploy(deployer, code))
            .await
            .map_err(|source| TokenError::Rpc {
                action: ACTION,
                source,
            })?;
        let receipt = rpc
            .wait_receipt(tx_hash)
            .await
            .map_err(|source| TokenError::Rpc {
                action: ACTION,
                source,
            })?;
        if !receipt.succeeded {
            return Err(TokenError::Reverted {
                action: ACTION,
                tx_hash,
            });
        }
        let address = receipt
            .contract_address
            .ok_or(TokenError::NoContractAddress { tx_hash })?;
        let chain_id = rpc.chain_id().await.map_err(|source| TokenError::Rpc {
            action: ACTION,
            source,
        })?;
        Ok(Token {
            rpc: rpc.clone(),
            address,
            owner: deployer,
            domain: Domain::new(name, version, chain_id, address),
        })
    }

    /// A LabUSDC already deployed at `address`: reads its owner and EIP-712 domain from the chain.
    pub async fn at(rpc: &Rpc, address: Address) -> Result<Token, TokenError> {
        let mut token = Token {
            rpc: rpc.clone(),
            address,
            owner: Address::ZERO,
            domain: Domain::new("", "", 0, address),
        };
        token.owner = token.view("owner", LabUsdc::ownerCall {}).await?;
        token.domain = token.onchain_domain().await?;
        Ok(token)
    }

    pub fn address(&self) -> Address {
        self.address
    }

    /// The account allowed to mint (the deployer).
    pub fn owner(&self) -> Address {
        self.owner
    }

    /// The EIP-712 domain the token was deployed with (name, version, chain id, its address).
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    pub fn rpc(&self) -> &Rpc {
        &self.rpc
    }

    // ------------------------------------------------------------ views

    pub async fn name(&self) -> Result<String, TokenError> {
        self.view("name", LabUsdc::nameCall {}).await
    }

    pub async fn version(&self) -> Result<String, TokenError> {
        self.view("version", LabUsdc::versionCall {}).await
    }

    pub async fn decimals(&self) -> Result<u8, TokenError> {
        self.view("decimals", LabUsdc::decimalsCall {}).await
    }

    pub async fn total_supply(&self) -> Result<U256, TokenError> {
        self.view("totalSupply", LabUsdc::totalSupplyCall {}).await
    }

    pub async fn balance_of(&self, account: Address) -> Result<U256, TokenError> {
        self.view("balanceOf", LabUsdc::balanceOfCall { account })
            .await
    }

    pub async fn allowance(&self, holder: Address, spender: Address) -> Result<U256, TokenError> {
        self.view("allowance", LabUsdc::allowanceCall { holder, spender })
            .await
    }

    /// The token's own `DOMAIN_SEPARATOR()`.
    pub async fn domain_separator(&self) -> Result<B256, TokenError> {
        self.view("DOMAIN_SEPARATOR", LabUsdc::DOMAIN_SEPARATORCall {})
            .await
    }

    /// The domain as the token reports it through EIP-5267 `eip712Domain()`.
    pub async fn onchain_domain(&self) -> Result<Domain, TokenError> {
        let reported = self
            .view("eip712Domain", LabUsdc::eip712DomainCall {})
            .await?;
        let chain_id = u64::try_from(reported.chainId).map_err(|_| TokenError::Decode {
            action: "eip712Domain",
            detail: format!("chain id {} does not fit in 64 bits", reported.chainId),
        })?;
        Ok(Domain {
            name: reported.name,
            version: reported.version,
            chain_id,
            verifying_contract: reported.verifyingContract,
        })
    }

    /// True once `authorizer`'s `nonce` was used or canceled.
    pub async fn authorization_state(
        &self,
        authorizer: Address,
        nonce: B256,
    ) -> Result<bool, TokenError> {
        self.view(
            "authorizationState",
            LabUsdc::authorizationStateCall { authorizer, nonce },
        )
        .await
    }

    // ------------------------------------------------------------ transactions
    //
    // Each runs the call first as an `eth_call` (the simulation a careful facilitator makes): a call that
    // would revert is not sent and comes back with the token's reason (`TokenError::revert_reason`).
    // Otherwise it sends from an account the node can sign for, waits for the receipt and returns the
    // hash. A transaction mined and reverted anyway (the chain moved in between) is
    // `TokenError::Reverted`. To get a reverted transaction mined on purpose, send the calldata with an
    // explicit gas limit through `Rpc::send_transaction`.

    /// Mints `value` to `to` (sent by the owner).
    pub async fn mint(&self, to: Address, value: U256) -> Result<TxHash, TokenError> {
        self.send(
            "mint",
            self.owner,
            LabUsdc::mintCall { to, value }.abi_encode(),
        )
        .await
    }

    /// Gives `payer` `value` more tokens (a mint by the owner) and returns the payer's new balance.
    pub async fn fund_payer(&self, payer: Address, value: U256) -> Result<U256, TokenError> {
        self.mint(payer, value).await?;
        self.balance_of(payer).await
    }

    /// A plain transfer from `from`, e.g. a refund from the payee back to the payer.
    pub async fn transfer(
        &self,
        from: Address,
        to: Address,
        value: U256,
    ) -> Result<TxHash, TokenError> {
        self.send(
            "transfer",
            from,
            LabUsdc::transferCall { to, value }.abi_encode(),
        )
        .await
    }

    /// `holder` lets `spender` move up to `value` of its tokens.
    pub async fn approve(
        &self,
        holder: Address,
        spender: Address,
        value: U256,
    ) -> Result<TxHash, TokenError> {
        self.send(
            "approve",
            holder,
            LabUsdc::approveCall { spender, value }.abi_encode(),
        )
        .await
    }

    /// `spender` moves `value` from `from` to `to` out of its allowance.
    pub async fn transfer_from(
        &self,
        spender: Address,
        from: Address,
        to: Address,
        value: U256,
    ) -> Result<TxHash, TokenError> {
        let call = LabUsdc::transferFromCall { from, to, value };
        self.send("transferFrom", spender, call.abi_encode()).await
    }

    /// Settles `authorization` with the (v, r, s) overload, sent by `sender` (the facilitator).
    pub async fn transfer_with_authorization(
        &self,
        sender: Address,
        authorization: &Authorization,
        signature: &Signature,
    ) -> Result<TxHash, TokenError> {
        let calldata = transfer_with_authorization_calldata(authorization, signature);
        self.send("transferWithAuthorization", sender, calldata.to_vec())
            .await
    }

    /// Settles `authorization` with the `bytes signature` overload, passing `signature` as given.
    pub async fn transfer_with_authorization_bytes(
        &self,
        sender: Address,
        authorization: &Authorization,
        signature: &[u8],
    ) -> Result<TxHash, TokenError> {
        let calldata = transfer_with_authorization_bytes_calldata(authorization, signature);
        self.send(
            "transferWithAuthorization(bytes)",
            sender,
            calldata.to_vec(),
        )
        .await
    }

    /// Runs the settlement as an `eth_call` from `sender` without changing the chain: `Ok` means it would
    /// succeed now; a refusal carries the token's reason (`TokenError::revert_reason`).
    pub async fn simulate_transfer_with_authorization(
        &self,
        sender: Address,
        authorization: &Authorization,
        signature: &Signature,
    ) -> Result<(), TokenError> {
        let calldata = transfer_with_authorization_calldata(authorization, signature);
        let call = CallRequest::call(self.address, calldata).with_from(sender);
        self.rpc
            .eth_call(&call)
            .await
            .map(drop)
            .map_err(|source| TokenError::Rpc {
                action: "simulate transferWithAuthorization",
                source,
            })
    }

    /// Settles `authorization` with `receiveWithAuthorization`; only the payee (`authorization.to`) may
    /// send it, and the signature must be for the `ReceiveWithAuthorization` type.
    pub async fn receive_with_authorization(
        &self,
        sender: Address,
        authorization: &Authorization,
        signature: &Signature,
    ) -> Result<TxHash, TokenError> {
        let (v, r, s) = split_signature(signature);
        let call = LabUsdc::receiveWithAuthorizationCall {
            from: authorization.from,
            to: authorization.to,
            value: authorization.value,
            validAfter: authorization.valid_after,
            validBefore: authorization.valid_before,
            nonce: authorization.nonce,
            v,
            r,
            s,
        };
        self.send("receiveWithAuthorization", sender, call.abi_encode())
            .await
    }

    /// Burns `authorizer`'s unused `nonce` (signature from [`sign_cancel_authorization`]), sent by `sender`.
    pub async fn cancel_authorization(
        &self,
        sender: Address,
        authorizer: Address,
        nonce: B256,
        signature: &Signature,
    ) -> Result<TxHash, TokenError> {
        let (v, r, s) = split_signature(signature);
        let call = LabUsdc::cancelAuthorizationCall {
            authorizer,
            nonce,
            v,
            r,
            s,
        };
        self.send("cancelAuthorization", sender, call.abi_encode())
            .await
    }

    /// The `Transfer` logs this token emitted in `receipt`.
    pub fn transfers_in(&self, receipt: &TxReceipt) -> Vec<TransferLog> {
        transfers(receipt)
            .into_iter()
            .filter(|log| log.token == self.address)
            .collect()
    }

    /// The `AuthorizationUsed` logs this token emitted in `receipt`.
    pub fn authorizations_used_in(&self, receipt: &TxReceipt) -> Vec<AuthorizationLog> {
        authorizations_used(receipt)
            .into_iter()
            .filter(|log| log.token == self.address)
            .collect()
    }

    async fn view<C: SolCall>(
        &self,
        action: &'static str,
        call: C,
    ) -> Result<C::Return, TokenError> {
        let output = self
            .rpc
            .eth_call(&CallRequest::call(self.address, call.abi_encode()))
            .await
            .map_err(|source| TokenError::Rpc { action, source })?;
        C::abi_decode_returns_validate(&output).map_err(|e| TokenError::Decode {
            action,
            detail: e.to_string(),
        })
    }

    async fn send(
        &self,
        action: &'static str,
        from: Address,
        calldata: Vec<u8>,
    ) -> Result<TxHash, TokenError> {
        let tx = CallRequest::call(self.address, calldata).with_from(from);
        // Anvil mines a reverting transaction (status 0) without saying why; the call says why.
        self.rpc
            .eth_call(&tx)
            .await
            .map_err(|source| TokenError::Rpc { action, source })?;
        let tx_hash = self
            .rpc
            .send_transaction(&tx)
            .await
            .map_err(|source| TokenError::Rpc { action, source })?;
        let receipt = self
            .rpc
            .wait_receipt(tx_hash)
            .await
            .map_err(|source| TokenError::Rpc { action, source })?;
        if receipt.succeeded {
            Ok(tx_hash)
        } else {
            Err(TokenError::Reverted { action, tx_hash })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::{address, b256, hex};

    #[test]
    fn event_topics_are_the_documented_ones() {
        assert_eq!(
            TRANSFER_TOPIC,
            b256!("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef")
        );
        assert_eq!(
            AUTHORIZATION_USED_TOPIC,
            b256!("98de503528ee59b575ef0c0a2576a82497bfc029a5685b209e9ec333479b10a5")
        );
        assert_eq!(
            AUTHORIZATION_CANCELED_TOPIC,
            b256!("1cdd46ff242716cdaa72d159d339a485b3438398348d68f09d7c8c0a59353d81")
        );
    }

    #[test]
    fn calldata_uses_the_documented_selectors_and_lengths() {
        let authorization = Authorization::new(Address::ZERO, Address::ZERO, U256::from(1), 0, 1);
        let signature = Signature::new(U256::from(1), U256::from(2), true);
        let vrs = transfer_with_authorization_calldata(&authorization, &signature);
        assert_eq!(vrs[..4], hex!("e3ee160e"));
        assert_eq!(vrs.len(), 4 + 9 * 32);
        assert_eq!(vrs[4 + 6 * 32 + 31], 28, "v is 27 + y parity");
        let bytes =
            transfer_with_authorization_bytes_calldata(&authorization, &signature.as_bytes());
        assert_eq!(bytes[..4], hex!("cf092995"));
    }

    #[test]
    fn a_topic_with_dirty_padding_is_not_an_address() {
        let mut topic = B256::left_padding_from(
            address!("857b06519E91e3A54538791bDbb0E22373e36b66").as_slice(),
        );
        assert!(address_from_topic(&topic).is_some());
        topic[0] = 1;
        assert_eq!(address_from_topic(&topic), None);
    }

    #[test]
    fn the_fixture_parses_and_names_the_token() {
        let fixture = fixture().expect("fixture parses");
        assert_eq!(fixture.contract, "LabUSDC");
        assert!(fixture.deployed_bytecode.len() > 100);
    }
}
