//! The lab's ERC-8004 registry (`contracts/LabAgentRegistry.sol`: identity and reputation in one
//! contract): deploy it from the committed fixture, register agents, and read feedback back the
//! way anyone reads it from a real registry (`readFeedback`, `getLastIndex`, the `NewFeedback`
//! events).
//!
//! The fixture (`fixtures/LabAgentRegistry.json`) is built by
//! `node lab/scripts/build-token.mjs --contract LabAgentRegistry`; tests never run the compiler.

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::sol;
use alloy::sol_types::{SolCall, SolEvent};
use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::rpc::{CallRequest, LogFilter, Rpc};

/// The compiled registry, as committed.
const FIXTURE_JSON: &str = include_str!("../fixtures/LabAgentRegistry.json");

/// The registry's Solidity source, as committed (what the fixture's `sourceSha256` must match).
pub const REGISTRY_SOURCE: &str = include_str!("../contracts/LabAgentRegistry.sol");

sol! {
    /// The part of the registry the lab calls: ERC-8004's reputation interface and the least of
    /// its identity side.
    #[allow(clippy::too_many_arguments)]
    interface LabAgentRegistry {
        event NewFeedback(
            uint256 indexed agentId,
            address indexed clientAddress,
            uint64 feedbackIndex,
            int128 value,
            uint8 valueDecimals,
            string indexed indexedTag1,
            string tag1,
            string tag2,
            string endpoint,
            string feedbackURI,
            bytes32 feedbackHash
        );
        function register(string agentURI) external returns (uint256 agentId);
        function ownerOf(uint256 agentId) external view returns (address);
        function getLastIndex(uint256 agentId, address clientAddress) external view returns (uint64);
        function readFeedback(uint256 agentId, address clientAddress, uint64 feedbackIndex)
            external view returns (int128 value, uint8 valueDecimals, string tag1, string tag2, bool isRevoked);
        function getSummary(uint256 agentId, address[] clientAddresses, string tag1, string tag2)
            external view returns (uint64 count, int128 summaryValue, uint8 summaryValueDecimals);
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Fixture {
    source_sha256: String,
    bytecode: Bytes,
}

/// The sha256 of the source the committed fixture was built from.
pub fn fixture_source_sha256() -> Result<String> {
    Ok(fixture()?.source_sha256)
}

fn fixture() -> Result<Fixture> {
    serde_json::from_str(FIXTURE_JSON).context("the registry fixture is not the expected JSON")
}

/// An agent as ERC-8004 names it: the registry (CAIP-10 on its chain) and the agent's id there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentIdentity {
    pub chain_id: u64,
    pub registry: Address,
    pub agent_id: u64,
}

impl AgentIdentity {
    /// `eip155:{chainId}:{registry}`, as a registration file's `agentRegistry` writes it.
    pub fn caip10(&self) -> String {
        format!(
            "eip155:{}:{}",
            self.chain_id,
            self.registry.to_checksum(None)
        )
    }
}

/// One feedback as the registry stores it and as its `NewFeedback` event told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackRead {
    pub index: u64,
    pub value: i128,
    pub value_decimals: u8,
    pub tag1: String,
    pub tag2: String,
    pub revoked: bool,
    /// From the event (the registry does not store them).
    pub endpoint: String,
    pub feedback_uri: String,
    pub feedback_hash: B256,
}

/// A deployed `LabAgentRegistry`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AgentRegistry {
    rpc: Rpc,
    address: Address,
    chain_id: u64,
}

impl AgentRegistry {
    /// Deploys the fixture's bytecode from `deployer` (an unlocked account).
    pub async fn deploy(rpc: &Rpc, deployer: Address) -> Result<AgentRegistry> {
        let tx = rpc
            .send_transaction(&CallRequest::deploy(deployer, fixture()?.bytecode))
            .await?;
        let receipt = rpc.wait_receipt(tx).await?;
        if !receipt.succeeded {
            bail!("deploying the agent registry reverted ({tx})");
        }
        let address = receipt
            .contract_address
            .context("the registry's deployment names no contract address")?;
        Ok(AgentRegistry {
            rpc: rpc.clone(),
            address,
            chain_id: rpc.chain_id().await?,
        })
    }

    pub fn address(&self) -> Address {
        self.address
    }

    /// Registers an agent owned by `owner` (an unlocked account) and returns its identity.
    pub async fn register(&self, owner: Address, agent_uri: &str) -> Result<AgentIdentity> {
        let call = LabAgentRegistry::registerCall {
            agentURI: agent_uri.to_string(),
        };
        let request = CallRequest::call(self.address, call.abi_encode()).with_from(owner);
        let id = LabAgentRegistry::registerCall::abi_decode_returns(
            &self.rpc.eth_call(&request).await?,
        )?;
        let tx = self.rpc.send_transaction(&request).await?;
        if !self.rpc.wait_receipt(tx).await?.succeeded {
            bail!("registering an agent reverted ({tx})");
        }
        let owned = self
            .view(LabAgentRegistry::ownerOfCall { agentId: id })
            .await?;
        if owned != owner {
            bail!("agent {id} is owned by {owned}, not {owner}");
        }
        Ok(AgentIdentity {
            chain_id: self.chain_id,
            registry: self.address,
            agent_id: id.try_into().context("an agent id beyond u64")?,
        })
    }

    /// Every feedback `client` gave `agent`, in order: stored fields from `readFeedback`, the
    /// others from the `NewFeedback` events.
    pub async fn feedback(&self, agent: u64, client: Address) -> Result<Vec<FeedbackRead>> {
        let last = self
            .view(LabAgentRegistry::getLastIndexCall {
                agentId: U256::from(agent),
                clientAddress: client,
            })
            .await?;
        let logs = self
            .rpc
            .get_logs(&LogFilter {
                address: Some(self.address),
                topics: vec![
                    Some(LabAgentRegistry::NewFeedback::SIGNATURE_HASH),
                    Some(B256::from(U256::from(agent))),
                    Some(client.into_word()),
                ],
                from_block: None,
                to_block: None,
            })
            .await?;
        let mut read = Vec::new();
        for index in 1..=last {
            let stored = self
                .view(LabAgentRegistry::readFeedbackCall {
                    agentId: U256::from(agent),
                    clientAddress: client,
                    feedbackIndex: index,
                })
                .await?;
            let event = logs
                .iter()
                .filter_map(|log| {
                    LabAgentRegistry::NewFeedback::decode_raw_log(
                        log.topics.iter().copied(),
                        &log.data,
                    )
                    .ok()
                })
                .find(|e| e.feedbackIndex == index)
                .with_context(|| format!("no NewFeedback event for feedback {index}"))?;
            read.push(FeedbackRead {
                index,
                value: stored.value,
                value_decimals: stored.valueDecimals,
                tag1: stored.tag1,
                tag2: stored.tag2,
                revoked: stored.isRevoked,
                endpoint: event.endpoint,
                feedback_uri: event.feedbackURI,
                feedback_hash: event.feedbackHash,
            });
        }
        Ok(read)
    }

    async fn view<C: SolCall>(&self, call: C) -> Result<C::Return> {
        let output = self
            .rpc
            .eth_call(&CallRequest::call(self.address, call.abi_encode()))
            .await?;
        Ok(C::abi_decode_returns_validate(&output)?)
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    /// The committed fixture was built from the committed source (else rebuild it:
    /// `node lab/scripts/build-token.mjs --contract LabAgentRegistry`).
    #[test]
    fn the_fixture_is_built_from_the_committed_source() {
        assert_eq!(
            fixture_source_sha256().unwrap(),
            hex::encode(Sha256::digest(REGISTRY_SOURCE.as_bytes()))
        );
    }

    /// The calls and the event the lab makes and reads are the ERC's (their selectors and topic).
    #[test]
    fn the_interface_is_the_erc_8004_one() {
        assert_eq!(
            hex::encode(LabAgentRegistry::readFeedbackCall::SELECTOR),
            "232b0810"
        );
        assert_eq!(
            LabAgentRegistry::NewFeedback::SIGNATURE,
            "NewFeedback(uint256,address,uint64,int128,uint8,string,string,string,string,string,bytes32)"
        );
    }
}
